"""The forms of a kept list (the dead letters, or the failed jobs): requeue or purge the
selected entries, or all those matching the filter, in two steps (confirm, then act),
through the operations layer's selection and actions, so the page reports what Redis
says was really done. One implementation for both lists (KeptList). The confirmation
page carries the selection's moment and newest letter (Confirmation) on to the act."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from starlette.requests import Request

from ..operations import (
    DeadLetterAction,
    DeadSelection,
    KeptList,
    SelectionKind,
    purge_dead_letters,
    requeue_dead_letters,
    select_dead_letters,
)
from .forms import ActionForms, ConsoleError

__all__ = ["ACTIONS", "Confirmation", "DeadLetterForms"]

ACTIONS = ("requeue", "purge")
SCOPES = ("selected", "matching")
MAX_FILTER = 500
"""Longest error text a filter takes (the dead page's query allows as much)."""
_DIGITS = re.compile(r"[0-9]{1,16}")
"""A confirmed count or moment (Redis ms): 16 digits pass any of them."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What the confirmation page shows, and posts on to act."""

    kept: KeptList
    action: str
    scope: str
    error: str
    """The error-text filter ("" = every entry of the list), for scope "matching"."""
    job_ids: tuple[str, ...]
    """The ticked ids, for scope "selected"."""
    count: int
    """Dead letters the action would touch (confirmed, it is the most it touches)."""
    not_dead: tuple[str, ...]
    sample: tuple[str, ...]
    as_of: int | None = None
    """The selection's moment (Redis ms): confirmed, nothing dead-lettered later is touched."""
    newest: str | None = None
    """All matching: the newest letter counted (the act stops there)."""


@dataclass(frozen=True, slots=True)
class _Request:
    action: str
    scope: str
    error: str
    job_ids: tuple[str, ...]


class DeadLetterForms(ActionForms):
    """Reads and checks a posted form, then selects and acts on the dead letters."""

    @staticmethod
    def pattern(error: str) -> str | None:
        """The filter's error text as the operations' regular expression: searched
        literally (people type error text, not expressions); None for no filter."""
        return re.escape(error) if error else None

    async def confirm(self, request: Request, agent_type: str, kept: KeptList) -> Confirmation:
        """What the posted form would do to the list `kept`: selected now, changing nothing."""
        asked = await self._checked(request, agent_type, kept)
        selection = await self._select(asked, agent_type, kept)
        run = requeue_dead_letters if asked.action == "requeue" else purge_dead_letters
        preview = await run(self._queue, selection, dry_run=True)
        return Confirmation(
            kept, asked.action, asked.scope, asked.error, selection.job_ids if asked.scope ==
            "selected" else (), selection.count, selection.not_dead, preview.sample,
            selection.as_of, selection.newest,
        )  # fmt: skip

    async def act(self, request: Request, agent_type: str, kept: KeptList) -> DeadLetterAction:
        """Do the confirmed action on the list `kept`: only on entries that joined it no
        later than the confirmed moment, on at most as many as were confirmed."""
        form = await self._form(request)
        asked = await self._checked(request, agent_type, kept, form)
        confirmed = _one(form, "count")
        if not _DIGITS.fullmatch(confirmed):
            raise ConsoleError(400, "count: the confirmed count is missing or not a number")
        moment = _one(form, "as_of")
        if not (_DIGITS.fullmatch(moment) or (moment == "" and asked.scope == "selected")):
            raise ConsoleError(
                400, "as_of: the confirmed moment is missing or not a number: confirm again"
            )
        newest = _one(form, "newest") or None
        as_of = int(moment) if moment else None
        if asked.scope == "matching" and not asked.error:
            selection = DeadSelection(
                agent_type, SelectionKind.ALL, int(confirmed), (), as_of=as_of, newest=newest,
                kept=kept,
            )  # fmt: skip
        else:
            selection = await self._select(asked, agent_type, kept, newest)
            selection = _at_most(replace(selection, as_of=as_of), int(confirmed))
        run = requeue_dead_letters if asked.action == "requeue" else purge_dead_letters
        return await run(self._queue, selection)

    async def _checked(
        self,
        request: Request,
        agent_type: str,
        kept: KeptList,
        form: dict[str, list[str]] | None = None,
    ) -> _Request:
        form = form if form is not None else await self._form(request)
        await self._verify(request, form, agent_type)
        # One field per button: `do` is "<action>:<scope>", e.g. "requeue:selected".
        action, _, scope = _one(form, "do").partition(":")
        error = _one(form, "error")
        if action not in ACTIONS or scope not in SCOPES:
            raise ConsoleError(
                400,
                f"do: must be <{'|'.join(ACTIONS)}>:<{'|'.join(SCOPES)}>, got {_one(form, 'do')!r}",
            )
        if len(error) > MAX_FILTER:
            raise ConsoleError(400, f"error: a filter is at most {MAX_FILTER} characters")
        job_ids = tuple(dict.fromkeys(j for j in form.get("ids", []) if j))
        if scope == "selected" and not job_ids:
            raise ConsoleError(400, f"no {kept.noun} selected: tick at least one")
        return _Request(action, scope, error, job_ids)

    async def _select(
        self, asked: _Request, agent_type: str, kept: KeptList, newest: str | None = None
    ) -> DeadSelection:
        if asked.scope == "selected":
            return await select_dead_letters(
                self._queue, agent_type, job_ids=asked.job_ids, kept=kept
            )
        if asked.error:
            return await select_dead_letters(
                self._queue, agent_type, error_matches=self.pattern(asked.error),
                newest=newest, kept=kept,
            )  # fmt: skip
        return await select_dead_letters(self._queue, agent_type, every=True, kept=kept)


def _one(form: dict[str, list[str]], name: str) -> str:
    values = form.get(name) or [""]
    return values[0]


def _at_most(selection: DeadSelection, confirmed: int) -> DeadSelection:
    """The selection as confirmed: its count the one the person saw (the report says how
    many of those were done), its ids at most that many, the oldest first (the moment
    already leaves out the letters dead-lettered after the confirmation page)."""
    return replace(selection, count=confirmed, job_ids=selection.job_ids[:confirmed])
