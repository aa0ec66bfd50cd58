"""Cross-site request forgery protection: a random session cookie and, in every form, a
token that is the HMAC of that session under the console's secret.

A forged form from another site cannot know the token (it cannot read the console's
pages or cookie, and the token is bound to the session), and the cookie is SameSite=Strict
besides, so a cross-site POST arrives without it."""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["SESSION_COOKIE", "CsrfTokens"]

SESSION_COOKIE = "agentjobs_console_session"
_SESSION_BYTES = 24


class CsrfTokens:
    """Issues sessions and the form token of each; checks a posted token."""

    def __init__(self, secret: bytes | None = None) -> None:
        if secret is not None and len(secret) < 16:
            raise ValueError("the console's CSRF secret must be at least 16 bytes")
        # A secret generated here is good for this process: tokens of a restarted
        # console no longer verify, and a form is simply loaded again.
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    @staticmethod
    def new_session() -> str:
        return secrets.token_urlsafe(_SESSION_BYTES)

    @staticmethod
    def is_session(value: str | None) -> bool:
        """A cookie value this console could have issued (a well-formed session id)."""
        return (
            value is not None
            and len(value) == len(secrets.token_urlsafe(_SESSION_BYTES))
            and value.replace("-", "").replace("_", "").isalnum()
        )

    def token(self, session: str) -> str:
        return hmac.new(self._secret, f"csrf:{session}".encode(), hashlib.sha256).hexdigest()

    def verify(self, session: str | None, token: str | None) -> bool:
        """The posted `token` is the one this console issued for `session`."""
        if not self.is_session(session) or not token:
            return False
        assert session is not None
        return hmac.compare_digest(self.token(session), token)
