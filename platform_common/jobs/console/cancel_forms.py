"""The cancel form of a job's page: cancel it (JobQueue.cancel), checked as the pause and
dead-letter forms are (read-only refused, Origin, the session's CSRF token). One step, no
confirmation page: the button says what it does, and a finished job is left alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request

from ..queue import CancelReport, JobQueue
from ..queue.cancel import MAX_REASON_LENGTH
from .csrf import CsrfTokens
from .forms import read_form

__all__ = ["CancelForms"]


class CancelForms:
    """Reads and checks a posted cancel form, then cancels the job."""

    def __init__(
        self,
        queue: JobQueue,
        tokens: CsrfTokens,
        read_only: bool,
        refuse: Callable[[int, str], Exception],
        known: Callable[[str], Awaitable[str]],
    ) -> None:
        self._queue = queue
        self._tokens = tokens
        self._read_only = read_only
        self._refuse = refuse
        self._known = known

    async def act(self, request: Request, agent_type: str, job_id: str) -> CancelReport:
        if self._read_only:
            raise self._refuse(403, "this console is read-only: it changes nothing")
        form = await read_form(request)
        await self._known(agent_type)
        if not self._tokens.verify(request, (form.get("csrf") or [""])[0]):
            raise self._refuse(
                403, "the form's security token is missing or stale: load the page again"
            )
        reason = (form.get("reason") or [""])[0].strip()
        if len(reason) > MAX_REASON_LENGTH:
            raise self._refuse(400, f"reason: longer than {MAX_REASON_LENGTH} characters")
        return await self._queue.cancel(agent_type, job_id, reason or "cancelled in the console")
