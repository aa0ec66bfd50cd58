"""The pause form of an agent type's page: pause or resume it (JobQueue.pause / resume),
checked as the dead-letter forms are (read-only refused, the session's CSRF token). One
step, no confirmation page: a pause is undone by a resume, and neither touches a job."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request

from ..queue import JobQueue, PauseState
from .csrf import CsrfTokens
from .forms import read_form

__all__ = ["PAUSE_ACTIONS", "PauseForms"]

PAUSE_ACTIONS = ("pause", "resume")


class PauseForms:
    """Reads and checks a posted pause form, then pauses or resumes."""

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

    async def act(self, request: Request, agent_type: str) -> PauseState:
        if self._read_only:
            raise self._refuse(403, "this console is read-only: it changes nothing")
        form = await read_form(request)
        await self._known(agent_type)
        if not self._tokens.verify(request, (form.get("csrf") or [""])[0]):
            raise self._refuse(
                403, "the form's security token is missing or stale: load the page again"
            )
        action = (form.get("do") or [""])[0]
        if action not in PAUSE_ACTIONS:
            raise self._refuse(400, f"do: must be pause or resume, got {action[:40]!r}")
        if action == "pause":
            return await self._queue.pause(agent_type)
        return await self._queue.resume(agent_type)
