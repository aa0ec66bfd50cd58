"""The cancel form of a job's page: cancel it (JobQueue.cancel), checked as the pause and
dead-letter forms are (read-only refused, Origin, the session's CSRF token). One step, no
confirmation page: the button says what it does, and a finished job is left alone."""

from __future__ import annotations

from starlette.requests import Request

from ..queue import CancelReport
from ..queue.cancel import MAX_REASON_LENGTH
from .forms import ActionForms, ConsoleError

__all__ = ["CancelForms"]


class CancelForms(ActionForms):
    """Reads and checks a posted cancel form, then cancels the job."""

    async def act(self, request: Request, agent_type: str, job_id: str) -> CancelReport:
        form = await self._form(request)
        await self._verify(request, form, agent_type)
        reason = (form.get("reason") or [""])[0].strip()
        if len(reason) > MAX_REASON_LENGTH:
            raise ConsoleError(400, f"reason: longer than {MAX_REASON_LENGTH} characters")
        return await self._queue.cancel(agent_type, job_id, reason or "cancelled in the console")
