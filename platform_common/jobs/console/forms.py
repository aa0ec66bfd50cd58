"""The console's POST bodies: URL-encoded forms, read bounded, without python-multipart;
the checks every action form passes before it acts (ActionForms); and ConsoleError, what
the router answers with an error page."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from starlette.requests import Request

from ..queue import JobQueue
from .csrf import CsrfTokens

__all__ = [
    "MAX_FORM_BYTES",
    "MAX_FORM_FIELDS",
    "ActionForms",
    "ConsoleError",
    "FormError",
    "read_form",
]

MAX_FORM_BYTES = 256 * 1024
"""A dead-letters form names at most a page of ids: far less than this."""
MAX_FORM_FIELDS = 1000


class ConsoleError(Exception):
    """A request the console answers with an error page of `status`: a body that is not
    a form it sends, bad input, an action refused."""

    def __init__(self, status: int, problem: str) -> None:
        self.status = status
        self.problem = problem
        super().__init__(problem)


FormError = ConsoleError
"""The name this module exported for it before the router's error was the same class."""


async def read_form(request: Request) -> dict[str, list[str]]:
    """The posted form's fields (each a list of its values, in order)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ConsoleError(415, "expected a form (application/x-www-form-urlencoded)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ConsoleError(413, f"form larger than {MAX_FORM_BYTES} bytes")
    try:
        return parse_qs(
            body.decode(), keep_blank_values=True, strict_parsing=False,
            max_num_fields=MAX_FORM_FIELDS,
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleError(400, f"malformed form: {exc}") from None


class ActionForms:
    """What the console's action forms (dead letters, pause, cancel) share: a read-only
    console refuses before the body is read; the agent type must be known (`known`) and
    the session's CSRF token must match before anything is done."""

    def __init__(
        self,
        queue: JobQueue,
        tokens: CsrfTokens,
        read_only: bool,
        known: Callable[[str], Awaitable[str]],
    ) -> None:
        self._queue = queue
        self._tokens = tokens
        self._read_only = read_only
        self._known = known

    async def _form(self, request: Request) -> dict[str, list[str]]:
        """The posted form; refused at once by a read-only console."""
        if self._read_only:
            raise ConsoleError(403, "this console is read-only: it changes nothing")
        return await read_form(request)

    async def _verify(self, request: Request, form: dict[str, list[str]], agent_type: str) -> None:
        """The agent type is known and the form carries the session's CSRF token."""
        await self._known(agent_type)
        if not self._tokens.verify(request, (form.get("csrf") or [""])[0]):
            raise ConsoleError(
                403, "the form's security token is missing or stale: load the page again"
            )
