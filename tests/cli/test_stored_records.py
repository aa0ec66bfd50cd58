"""`job show` and `dead show` of records whose stored fields do not parse (what the worker
dead-letters as corrupt), and `dead list/requeue/purge --error-matches` over thousands of
dead letters: a listing's read is bounded, an action still covers every match."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.queue import JobPayload, JobQueue
from tests.cli.jobs_made import dead_letters
from tests.cli.runner import table_row
from tests.support.planted import plant_dead_letters
from tests.support.queue_handlers import make_job
from tests.support.queue_runtime import eventually, fast_settings, running_worker
from tests.support.sync_redis import sync_reply
from tests.support.worker_records import SyncClient

DINING = QueueKeys("dining")


# -- A: records that do not parse -------------------------------------------------------
DAMAGED = [
    ("payload", b'{"task": "caf\xe9"}', "not UTF-8 (byte 13: invalid continuation byte)",
     '{"task": "caf\\xe9"}'),
    ("payload", b"{not json", "not JSON (Expecting property name enclosed in double quotes",
     "{not json"),
    ("history", b"[{not json", "not JSON (", "[{not json"),
    ("history", b"\xff\xfe[]", "not UTF-8 (byte 0: invalid start byte)", "\\xff\\xfe[]"),
]  # fmt: skip


@pytest.mark.parametrize(("field", "stored", "problem", "shown"), DAMAGED)
def test_job_and_dead_show_give_a_field_that_does_not_parse_as_its_text(
    agentjobs: Any, redis_url: str, client: SyncClient,
    field: str, stored: bytes, problem: str, shown: str,
) -> None:  # fmt: skip
    (job_id,) = dead_letters(redis_url, ["omakase"])
    client.hset(DINING.job(job_id), field, stored)  # type: ignore[arg-type]

    for command in ("job", "dead"):
        detail = agentjobs(command, "show", "dining", job_id, "-o", "json").json()
        (unparsed,) = detail["unparsed"]
        assert unparsed["field"] == field and unparsed["problem"].startswith(problem)
        assert unparsed["raw"] == shown and unparsed["size"] == len(stored)
        # The rest of the record is all there; the field itself reads as absent.
        assert detail["state"] == "dead" and detail["attempts"] == 1
        assert detail["last_error"] == "RuntimeError: cannot book omakase"
        assert detail["result"]["status"] == "failed"
        if field == "payload":
            assert detail["payload"] is None and len(detail["history"]) == 1
        else:
            assert detail["history"] == [] and detail["payload"]["task"] == "omakase"

        table = agentjobs(command, "show", "dining", job_id)
        assert (table.code, table.err) == (0, "")
        assert f"does not parse  {field}: shown as stored below" in table.out
        assert f"{field} (stored, does not parse)" in table.out
        assert f"does not parse: {problem}" in table.out and shown in table.out


LISTED_DAMAGE = [
    ("attempts", "many", "many (does not parse)"),
    ("finished_at", "yesterday", "yesterday (does not parse)"),
    ("finished_at", "1e400", "1e400 (does not parse)"),
    ("enqueued_at", "soon", "2023-11-14T22:13:21.001+00:00"),  # not listed: the time shows
]


@pytest.mark.parametrize(("field", "stored", "cell"), LISTED_DAMAGE)
def test_dead_list_shows_a_letter_whose_fields_do_not_parse_as_stored(
    agentjobs: Any, client: SyncClient, field: str, stored: str, cell: str
) -> None:
    ids = plant_dead_letters(client, DINING, 3, lambda n: f"error {n}")
    damaged = ids[1]
    client.hset(DINING.job(damaged), field, stored)
    table = agentjobs("dead", "list", "dining")
    assert (table.code, table.err) == (0, "")
    row = table_row(table.out, damaged)
    assert cell in row and row[3] == "error 1"
    assert table_row(table.out, ids[0])[1] == "2023-11-14T22:13:21.000+00:00"  # the rest
    listed = agentjobs("dead", "list", "dining", "-o", "json").json()
    assert [x["job_id"] for x in listed["letters"]] == list(reversed(ids))
    (letter,) = [x for x in listed["letters"] if x["job_id"] == damaged]
    listed_fields = {"attempts", "finished_at"}
    assert letter["unparsed"] == ({field: stored} if field in listed_fields else {})
    # And it goes as any other: by its id, or with every letter.
    assert agentjobs("dead", "purge", "dining", "--id", damaged, "--yes").code == 0
    assert client.lrange(DINING.dead, 0, -1) == [ids[2], ids[0]]
    assert agentjobs("dead", "purge", "dining", "--all", "--yes").code == 0
    assert client.llen(DINING.dead) == 0


def test_dead_list_shows_ids_with_a_slash_or_bytes_that_are_not_utf8(
    agentjobs: Any, client: SyncClient
) -> None:
    [sound] = plant_dead_letters(client, DINING, 1, lambda n: "error")
    record = sync_reply(client.hgetall(DINING.job(sound)))
    for raw_id in (b"with/slash", b"caf\xe9-1"):  # a decoding client writes bytes as is
        client.execute_command("HSET", DINING.job("").encode() + raw_id, *sum(record.items(), ()))  # type: ignore[no-untyped-call]
        client.lpush(DINING.dead, raw_id)
    table = agentjobs("dead", "list", "dining")
    assert (table.code, table.err) == (0, "")
    assert table_row(table.out, "with/slash")[3] == "error"
    assert table_row(table.out, "caf\\xe9-1")[3] == "error"  # escaped, as `job show` does
    listed = agentjobs("dead", "list", "dining", "-o", "json").json()
    assert [x["job_id"] for x in listed["letters"]] == ["caf\\xe9-1", "with/slash", sound]
    # The id as a shell passes those bytes ($'caf\xe9-1'): Python reads them escaped.
    shell_id = b"caf\xe9-1".decode("utf-8", "surrogateescape")
    shown = agentjobs("dead", "show", "dining", shell_id, "-o", "json")
    assert shown.json()["job_id"] == "caf\\xe9-1"
    done = agentjobs("dead", "purge", "dining", "--id", shell_id, "--id", "with/slash", "--yes")
    assert (done.code, done.err) == (0, "")
    assert done.out.startswith("purged 2 of 2 selected dead letter(s)")
    assert client.lrange(DINING.dead, 0, -1) == [sound]


def test_a_list_position_beyond_any_list_is_a_usage_error(agentjobs: Any) -> None:
    done = agentjobs("dead", "list", "dining", "--start", "99999999999999999999")
    assert done.code == 2
    assert done.err == (
        "error: start: a list position from 0 to 9999999999999999, got 99999999999999999999\n"
    )


@pytest.mark.single_node("a worker process; the claim reads the packed job the same on a cluster")
def test_a_job_the_worker_dead_letters_as_corrupt_can_be_looked_at(
    agentjobs: Any, redis_url: str
) -> None:
    # Damaged while it waits (packed in `queued`): `job show` reads it as stored, then a
    # worker dead-letters it as corrupt, and `dead show` shows why and what it held.
    raw = redis.Redis.from_url(redis_url)

    async def handler(job: JobPayload) -> None:
        raise AssertionError("a corrupt job never reaches its handler")

    async def run() -> str:
        async with await JobQueue.connect(fast_settings(redis_url, max_attempts=1)) as queue:
            job_id = await queue.enqueue(make_job(task="sushi"))
            packed = raw.hget(DINING.queued, job_id)
            assert isinstance(packed, bytes)
            header, trace, payload = packed.split(b"\n", 2)
            raw.hset(DINING.queued, job_id, header + b"\n" + trace + b"\n\xff" + payload)
            waiting = await asyncio.to_thread(
                agentjobs, "job", "show", "dining", job_id, "-o", "json"
            )
            (unparsed,) = waiting.json()["unparsed"]
            assert waiting.json()["state"] == "queued"
            assert unparsed["field"] == "payload" and unparsed["raw"].startswith("\\xff{")

            async def dead() -> bool:
                return await queue.dead_letters.count("dining") == 1

            async with running_worker(queue.settings, handler):
                await eventually(dead)
            return job_id

    try:
        job_id = asyncio.run(run())
    finally:
        raw.close()
    detail = agentjobs("dead", "show", "dining", job_id, "-o", "json").json()
    assert detail["state"] == "dead"
    (attempt,) = detail["history"]
    assert attempt["outcome"] == "corrupt"
    (unparsed,) = detail["unparsed"]
    assert unparsed["field"] == "payload" and unparsed["problem"].startswith("not UTF-8")
    assert '"task":"sushi"' in unparsed["raw"]
    table = agentjobs("dead", "show", "dining", job_id)
    assert table.code == 0 and "payload (stored, does not parse)" in table.out
    assert "\\xff{" in table.out


# -- B: a bounded listing, actions over every match -------------------------------------
RARE = {5, 1_700, 2_950}
"""Which of the planted letters match the rare error (oldest = 0)."""


def rare_error(n: int) -> str:
    return f"PoisonError: row {n}" if n in RARE else f"TimeoutError: try {n}"


@pytest.mark.single_node("reads counted in one server's commandstats")
def test_a_filtered_dead_list_reads_at_most_max_scan_and_says_where_to_go_on(
    agentjobs: Any, client: SyncClient
) -> None:
    ids = plant_dead_letters(client, DINING, 3_000, rare_error)
    newest_first = list(reversed(ids))
    client.config_resetstat()
    first = agentjobs(
        "dead", "list", "dining", "--error-matches", "Poison", "--max-scan", "1000", "-o", "json"
    ).json()
    # One job hash read per letter looked at: 1,000, not the 3,000 of the list.
    assert sync_reply(client.info("commandstats"))["cmdstat_hmget"]["calls"] == 1_000
    assert (first["scanned"], first["scan_limited"], first["complete"]) == (1_000, True, False)
    assert first["next_start"] == 1_000 and first["total"] == 3_000
    assert [x["job_id"] for x in first["letters"]] == [ids[2_950]]

    found = [x["job_id"] for x in first["letters"]]
    start = first["next_start"]
    while start is not None:
        page = agentjobs(
            "dead", "list", "dining", "--error-matches", "Poison", "--max-scan", "1000",
            "--start", str(start), "-o", "json",
        ).json()  # fmt: skip
        assert page["scanned"] <= 1_000 and page["start"] == start
        found += [x["job_id"] for x in page["letters"]]
        start = page["next_start"]
    assert found == [j for j in newest_first if int(j[2:]) in RARE]

    table = agentjobs("dead", "list", "dining", "--error-matches", "Poison", "--max-scan", "1000")
    assert table.code == 0, table.err
    assert table_row(table.out, ids[2_950])[3] == "PoisonError: row 2950"
    caption = " ".join(table.out.split())
    assert "1 matching 'Poison' among the newest 1,000 of 3,000 dead letters" in caption
    assert "Stopped after looking at 1,000 (--max-scan). More: --start 1000." in caption

    # Without --max-scan the default bound (5,000) covers this list: every match.
    whole = agentjobs("dead", "list", "dining", "--error-matches", "Poison", "-o", "json").json()
    assert whole["complete"] is True and whole["next_start"] is None
    assert len(whole["letters"]) == 3


def test_requeue_and_purge_by_error_cover_every_match_of_a_long_list(
    agentjobs: Any, client: SyncClient
) -> None:
    ids = plant_dead_letters(client, DINING, 3_000, rare_error)
    poison = [ids[n] for n in sorted(RARE)]  # oldest first, as they go
    dry = agentjobs(
        "dead", "requeue", "dining", "--error-matches", "Poison", "--dry-run", "-o", "json"
    ).json()
    assert (dry["selected"], dry["done"], dry["sample"]) == (3, 0, poison)

    done = agentjobs("dead", "requeue", "dining", "--error-matches", "Poison", "-o", "json").json()
    assert (done["selected"], done["done"], done["sample"]) == (3, 3, poison)
    assert client.llen(DINING.dead) == 2_997
    assert {client.hget(DINING.job(j), "state") for j in poison} == {None}  # queued

    # Purge the rest by a filter matching nearly all: in batches of 500, true counts.
    purged = agentjobs(
        "dead", "purge", "dining", "--error-matches", "Timeout", "--yes", "-o", "json"
    ).json()
    assert (purged["selected"], purged["done"]) == (2_997, 2_997)
    assert client.llen(DINING.dead) == 0
    assert not client.exists(DINING.job(ids[0]), DINING.job(ids[2_999]))
