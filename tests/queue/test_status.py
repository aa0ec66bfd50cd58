"""The status vocabularies (platform_common.jobs.status) against their other copy: the
strings the queue's Lua scripts write and compare.

The scripts cannot import the enum, so this test reads them: every state they write,
compare or store in a result must be a QueueState, every QueueState must be written by
some script, and every reply of queue_fail / queue_complete must be an AttemptOutcome
(and the reverse). A state word used in a form the scanner does not know fails the test
too, so a new script cannot slip past it silently."""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import re
from enum import StrEnum
from importlib import resources

import pytest

from platform_common.jobs import status as status_module
from platform_common.jobs.errors import InvalidRecord
from platform_common.jobs.queue import JobQueue
from platform_common.jobs.queue.results import parse_result
from platform_common.jobs.status import (
    ACTIVE,
    JOB_STATUS_OF,
    QUEUE_ACTIVE,
    QUEUE_TERMINAL,
    RESULT_STATES,
    TERMINAL,
    AttemptOutcome,
    JobStatus,
    QueueState,
)

# A Lua string literal holding one word, in either quote style.
WORD = r"""['"](\w+)['"]"""
# Every form in which the scripts use a state, by what the form does with it.
STATE_FORMS: dict[str, list[re.Pattern[str]]] = {
    "writes": [
        # HSET's field/value pairs: 'state', 'running'. Limited to HSET because HMGET's
        # field list ('state', 'token') reads the same way.
        re.compile(r"redis\.call\('HSET',[^)]*?'state',\s*" + WORD),
        # queue_fail's `outcome = 'dead'` ... HSET ... 'state', outcome (checked below).
        re.compile(r"\boutcome\s*=\s*" + WORD),
    ],
    "reads": [
        # state == 'queued', state ~= 'running', and f[1] (HMGET's first field, 'state').
        re.compile(r"(?:\bstate|\bf\[1\])\s*(?:==|~=)\s*" + WORD),
        # The no-field default: `state = 'queued'`, `local state = f[1] or 'queued'`.
        re.compile(r"\bstate\s*=\s*(?:f\[1\]\s+or\s+)?" + WORD),
    ],
    "results": [
        # The result envelope: '{"status":"expired","result":null,...}'.
        re.compile(r'"status":"(\w+)"'),
    ],
    "placeholders": [
        # {'lost', state or 'missing'}: a reply's stand-in for a record that is gone.
        re.compile(r"\bstate\s+or\s+" + WORD),
    ],
}
# A state word in a form none of the above consumed (after they are cut out of the line).
UNKNOWN_FORM = re.compile(
    r"(?:\bstate|\bf\[1\])\s*(?:==|~=|=|\bor\b)\s*['\"]|['\"]\s*(?:==|~=)\s*(?:state|f\[1\])"
)
# The scripts that end an attempt, and what they reply: return {'retrying', ...}, or
# for queue_complete, which ends several attempts per call, each job's entry of the
# reply: entries[i] = {'ok'}.
ATTEMPT_SCRIPTS = ("queue_fail", "queue_complete")
REPLY = re.compile(r"(?:\breturn|\bentries\[\w+\]\s*=)\s*\{\s*" + WORD)


def queue_scripts() -> dict[str, str]:
    """Every queue script by name, comments removed (their prose mentions states too)."""
    lua = resources.files("platform_common.jobs").joinpath("lua")
    scripts = {}
    for entry in lua.iterdir():
        if entry.name.startswith("queue_") and entry.name.endswith(".lua"):
            text = entry.read_text("utf-8")
            scripts[entry.name.removesuffix(".lua")] = strip_comments(text)
    assert len(scripts) >= 10, "the queue scripts were not found"
    return scripts


def strip_comments(text: str) -> str:
    # No queue script has "--" inside a string, so a plain split is exact here.
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[1] for line in text.splitlines() if "--" in line)


def scan(code: str) -> dict[str, set[str]]:
    """The state words of one script, by form."""
    return {
        kind: {word for pattern in patterns for word in pattern.findall(code)}
        for kind, patterns in STATE_FORMS.items()
    }


def uses(kind: str) -> dict[str, set[str]]:
    """Word -> the scripts using it in this form."""
    found: dict[str, set[str]] = {}
    for name, code in queue_scripts().items():
        for word in scan(code)[kind]:
            found.setdefault(word, set()).add(name)
    return found


def values(enum: type[StrEnum]) -> set[str]:
    return {member.value for member in enum}


# -- the Lua scripts against the enums ---------------------------------------------------
def test_the_scanner_reads_each_form_and_only_those() -> None:
    code = (
        "redis.call('HMGET', job_key, 'state', 'token')\n"
        "redis.call('HSET', job_key, 'state', 'running', 'token', token)\n"
        "if state == 'queued' or f[1] ~= 'retrying' then\n"
        "local state = f[1] or 'queued'\n"
        "return {'lost', state or 'missing'}\n"
        'redis.call(\'SET\', k, \'{"status":"expired","result":null}\')\n'
    )
    assert scan(code) == {
        "writes": {"running"},
        "reads": {"queued", "retrying"},
        "results": {"expired"},
        "placeholders": {"missing"},
    }


def test_every_state_a_script_writes_compares_or_stores_is_a_queue_state() -> None:
    for kind in ("writes", "reads", "results"):
        known = values(QueueState)
        unknown = {word: names for word, names in uses(kind).items() if word not in known}
        assert not unknown, f"{kind}: not QueueState values: {unknown}"


def test_every_queue_state_is_written_by_a_script() -> None:
    written = set(uses("writes")) | set(uses("results"))
    assert written == values(QueueState)


def test_the_state_field_holds_every_state_but_expired() -> None:
    # Expiry deletes the record: EXPIRED exists only in results (see QueueState).
    assert set(uses("writes")) == values(QueueState) - {QueueState.EXPIRED}


def test_results_carry_exactly_the_result_states() -> None:
    assert set(uses("results")) == {state.value for state in RESULT_STATES}


def test_the_lost_placeholder_is_not_a_state() -> None:
    # A "lost" reply names the job's state, or "missing" when the record is gone: that
    # word must never be a real state, or the two would read alike.
    assert set(uses("placeholders")) == {"missing"}
    assert "missing" not in values(QueueState)


def test_no_state_is_used_in_a_form_the_scanner_does_not_know() -> None:
    for name, code in queue_scripts().items():
        # f[1] stands for the state only where HMGET reads 'state' first.
        for first in re.findall(r"local f = redis\.call\('HMGET',\s*[^,]+,\s*'(\w+)'", code):
            assert first == "state", f"{name}: f[1] is {first!r}, not the state"
        for line in code.splitlines():
            rest = line
            for pattern in (p for patterns in STATE_FORMS.values() for p in patterns):
                rest = pattern.sub("", rest)
            assert not UNKNOWN_FORM.search(rest), f"{name}: unrecognised state use: {line!r}"
        # Each mention of the 'state' field is an HMGET (read above), an HSET write the
        # scanner saw, or an HDEL (a record with no state is a queued one: the requeue
        # writes it so); an HGET, or an HSET of anything else, would be missed.
        mentions = len(re.findall(r"""['"]state['"]""", code))
        hmget = len(re.findall(r"'HMGET',\s*[^,]+,\s*'state'", code))
        hset = len(re.findall(r"'HSET',[^)]*?'state',\s*(?:'\w+'|outcome\b)", code))
        hdel = len(re.findall(r"'HDEL',\s*[^,]+,\s*'state'", code))
        assert mentions == hmget + hset + hdel, f"{name}: a 'state' field use the scanner misses"


def test_queue_fail_writes_its_outcome_as_the_state() -> None:
    # The `outcome = '...'` assignments count as writes only because of this line.
    code = queue_scripts()["queue_fail"]
    assert re.search(r"'HSET',[^)]*?'state',\s*outcome\b", code)
    assert set(uses("writes")) >= {"retrying", "dead", "failed"}


def test_every_attempt_reply_is_an_attempt_outcome_and_back() -> None:
    scripts = queue_scripts()
    replied = {word for name in ATTEMPT_SCRIPTS for word in REPLY.findall(scripts[name])}
    # queue_fail also ends with `return {outcome}`: one of its `outcome = '...'` words.
    assert re.search(r"\breturn\s*\{outcome\}", scripts["queue_fail"])
    replied |= set(re.findall(r"\boutcome\s*=\s*" + WORD, scripts["queue_fail"]))
    assert replied == values(AttemptOutcome)


def test_the_scripts_document_the_replies_they_make() -> None:
    lua = resources.files("platform_common.jobs").joinpath("lua")
    documented = {
        word
        for name in ATTEMPT_SCRIPTS
        for word in re.findall(r'\{"(\w+)"', comments(lua.joinpath(f"{name}.lua").read_text()))
    }
    assert documented == values(AttemptOutcome)


def test_outcomes_share_a_value_with_a_state_only_where_fail_writes_that_state() -> None:
    shared = values(AttemptOutcome) & values(QueueState)
    # (cancelled: complete and fail reply with the state they just wrote, as fail does)
    assert shared == {"retrying", "dead", "failed", "cancelled"}
    assert shared <= set(uses("writes"))


# -- the Python side ---------------------------------------------------------------------
def test_active_and_terminal_split_each_vocabulary() -> None:
    assert set(QueueState) == QUEUE_ACTIVE | QUEUE_TERMINAL
    assert not QUEUE_ACTIVE & QUEUE_TERMINAL
    assert {QueueState.QUEUED, QueueState.RUNNING, QueueState.RETRYING} == QUEUE_ACTIVE
    assert QUEUE_TERMINAL - {QueueState.DEAD} == RESULT_STATES
    assert {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED} == TERMINAL
    assert set(JobStatus) == ACTIVE | TERMINAL
    assert not ACTIVE & TERMINAL


def test_each_queue_state_reads_as_a_job_status_of_the_same_kind() -> None:
    assert set(JOB_STATUS_OF) == set(QueueState)
    for state, job_status in JOB_STATUS_OF.items():
        assert (state in QUEUE_TERMINAL) == (job_status in TERMINAL), state


@pytest.mark.parametrize("enum", [JobStatus, QueueState, AttemptOutcome])
def test_every_member_has_a_one_line_docstring(enum: type[StrEnum]) -> None:
    tree = ast.parse(inspect.getsource(status_module))
    body = next(
        node.body
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == enum.__name__
    )
    documented = {
        statement.targets[0].id
        for statement, following in itertools.pairwise(body)
        if isinstance(statement, ast.Assign)
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and isinstance(following.value.value, str)
        and "\n" not in following.value.value
    }
    assert documented == set(enum.__members__)


def test_states_cross_json_and_redis_as_plain_strings() -> None:
    assert json.dumps([QueueState.DEAD, AttemptOutcome.LOST]) == '["dead", "lost"]'
    assert str(QueueState.RETRYING) == f"{QueueState.RETRYING}" == "retrying"


@pytest.mark.parametrize("state", sorted(RESULT_STATES))
def test_a_result_reads_back_as_its_queue_state(state: QueueState) -> None:
    text = json.dumps({"status": state.value, "result": None, "error": None})
    result = parse_result("dining", "job-1", text)
    assert result.status is state and result.ok == (state == QueueState.SUCCEEDED)


@pytest.mark.parametrize("status", ["dead", "running", "pending", "", None, ["failed"], {}])
def test_a_result_without_a_result_state_is_refused(status: object) -> None:
    # Unhashable statuses included: they must raise InvalidRecord, not TypeError.
    with pytest.raises(InvalidRecord):
        parse_result("dining", "job-1", json.dumps({"status": status, "result": None}))


async def test_get_record_reads_each_queue_state_as_its_job_status(redis_url: str) -> None:
    queue = await JobQueue.connect(redis_url)
    try:
        keys, client = queue.connection.keys("dining"), queue.connection.client
        fields = {"payload": "{}", "enqueued_at": "1000", "attempts": "1", "last_error": "boom"}
        # No field is QUEUED (enqueue writes none); an unknown word reads as PENDING.
        cases = {None: JobStatus.PENDING, "bogus": JobStatus.PENDING}
        cases |= {state.value: JOB_STATUS_OF[state] for state in QueueState}
        del cases[QueueState.EXPIRED]  # never in a record: expiry deletes it
        for n, (state, expected) in enumerate(cases.items()):
            stored = fields if state is None else {**fields, "state": state}
            await client.hset(keys.job(f"job-{n}"), mapping=stored)
            record = await queue.get_record("dining", f"job-{n}")
            assert record is not None and record.status is expected, state
            assert record.error == ("boom" if state in ("failed", "dead") else None), state
        # The record gone, the result left: the result's state decides.
        for state in RESULT_STATES:
            ok = state == QueueState.SUCCEEDED
            envelope = {"status": state, "result": 7 if ok else None, "error": None if ok else "x"}
            await client.set(keys.result(f"gone-{state}"), json.dumps(envelope))
            record = await queue.get_record("dining", f"gone-{state}")
            assert record is not None and record.status is JOB_STATUS_OF[state], state
            assert record.result == ({"value": 7} if ok else None), state
    finally:
        await queue.aclose()
