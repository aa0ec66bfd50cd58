"""The pause form of an agent type's page: pause or resume it (JobQueue.pause / resume),
checked as the dead-letter forms are (read-only refused, the session's CSRF token). One
step, no confirmation page: a pause is undone by a resume, and neither touches a job."""

from __future__ import annotations

from starlette.requests import Request

from ..queue import PauseState
from .forms import ActionForms, ConsoleError

__all__ = ["PAUSE_ACTIONS", "PauseForms"]

PAUSE_ACTIONS = ("pause", "resume")


class PauseForms(ActionForms):
    """Reads and checks a posted pause form, then pauses or resumes."""

    async def act(self, request: Request, agent_type: str) -> PauseState:
        form = await self._form(request)
        await self._verify(request, form, agent_type)
        action = (form.get("do") or [""])[0]
        if action not in PAUSE_ACTIONS:
            raise ConsoleError(400, f"do: must be pause or resume, got {action[:40]!r}")
        if action == "pause":
            return await self._queue.pause(agent_type)
        return await self._queue.resume(agent_type)
