"""Cross-site request forgery protection: a random session cookie and, in every form, a
token that is the HMAC of that session, the mount's path and the queue's identity under
the console's secret; and a check of a POST's Origin header.

A forged form from another site cannot know the token (it cannot read the console's
pages or cookie, and the token is bound to the session), and the cookie is SameSite=Strict
besides, so a cross-site POST arrives without it. A token names the mount that drew it:
two mounts of one app (a read-only one and a read-write one, or one per queue) share
the secret and possibly the session, and a form drawn by one must not act on another."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.requests import Request

from ..queue import QueueSettings

__all__ = ["SESSION_COOKIE", "CsrfTokens", "foreign_origin", "queue_identity"]

SESSION_COOKIE = "agentjobs_console_session"
_SESSION_BYTES = 24
_DEFAULT_PORTS = {"http": 80, "https": 443}


def queue_identity(settings: QueueSettings) -> str:
    """What tells one queue from another: its Redis servers, database and key prefix
    (never the password)."""
    redis = settings.redis
    servers = sorted(
        f"{host}:{port}" for host, port in redis.addresses or [(redis.host, redis.port)]
    )
    return json.dumps([servers, redis.sentinel_service, redis.db, settings.prefix])


class CsrfTokens:
    """Issues sessions and the form token of each on one mount; checks a posted token.

    `mount_root(request)` is the path of the mount that answers `request`; a token
    is good on that path and for `queue` (a queue_identity) only."""

    def __init__(
        self, secret: bytes | None, queue: str, mount_root: Callable[[Request], str]
    ) -> None:
        if secret is not None and len(secret) < 16:
            raise ValueError("the console's CSRF secret must be at least 16 bytes")
        # A secret generated here is good for this process: tokens of a restarted
        # console no longer verify, and a form is simply loaded again.
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._queue = queue
        self._mount_root = mount_root

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

    def token(self, request: Request, session: str) -> str:
        """The token of `session` on the mount answering `request`."""
        # JSON keeps the parts apart: no path, identity or session runs into the next.
        bound = json.dumps(["csrf", self._queue, self._mount_root(request), session])
        return hmac.new(self._secret, bound.encode(), hashlib.sha256).hexdigest()

    def verify(self, request: Request, token: str | None) -> bool:
        """The posted `token` is the one this mount issued for the request's session."""
        session = request.cookies.get(SESSION_COOKIE)
        if not self.is_session(session) or not token:
            return False
        assert session is not None
        return hmac.compare_digest(self.token(request, session), token)


def foreign_origin(request: Request) -> str | None:
    """The request's Origin header when it is present and not the console's own origin
    (the scheme, host and port the request was made to), else None."""
    origin = request.headers.get("origin")
    if origin is None:
        return None
    own = request.url
    if _origin_of(origin) == (own.scheme, own.hostname, own.port or _DEFAULT_PORTS.get(own.scheme)):
        return None
    return origin


def _origin_of(origin: str) -> tuple[str, str | None, int | None] | None:
    """An Origin header's scheme, host and port; None for "null" or one that does not
    parse (a sandboxed or privacy-redirected page: never this console's)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, port or _DEFAULT_PORTS.get(scheme)
