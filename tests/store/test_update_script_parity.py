"""store_update.lua judges a stored record by parse_hash's rules before it writes, so that
an update is one round trip. Its verdict must be Python's: a record the script accepts is
one parse_hash reads, a record it refuses is refused by parse_hash naming the same field,
and what it cannot judge it leaves to Python ("check", nothing written), which then parses
the record and comes back with a compare-and-set. Held here case by case (every rule, and
the cases left to Python on purpose) and on generated records.

The script is run with no change requested and no status, so that its verdict on the
record is all a reply says; Python's verdict is redis-py's UTF-8 decoding followed by
parse_hash, exactly what a get does.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_common.jobs import InvalidRecord, JobStatus, RedisJobStore
from platform_common.jobs.redis.script import Script
from platform_common.jobs.redis.url import RedisSettings
from platform_common.jobs.store import redis_store as redis_store_module
from platform_common.jobs.store.record_hash import parse_hash
from tests.support.redis_server import RedisServer

AGENT = "parity-agent"
STAMP = b"1700000000.000000"
BASE: dict[bytes, bytes] = {
    b"status": b"pending",
    b"payload": b'{"a":1}',
    b"created_at": STAMP,
    b"updated_at": STAMP,
    b"version": b"1",
    b"owner_oid": b"u1",
}
_keys = itertools.count()

Fields = dict[bytes, bytes | None]
"""Changes to BASE: a value, or None to remove the field."""


def record(changes: Fields) -> dict[bytes, bytes]:
    fields = {**BASE, **changes}
    return {name: value for name, value in fields.items() if value is not None}


def python_verdict(fields: dict[bytes, bytes]) -> str:
    """The field InvalidRecord names, or "ok": what get() and the old update did."""
    try:
        decoded = {name.decode(): value.decode() for name, value in fields.items()}
    except UnicodeDecodeError:
        return "record"
    try:
        parse_hash("j", decoded)
    except InvalidRecord as exc:
        return exc.field
    return "ok"


def script_verdict(client: redis.Redis, fields: dict[bytes, bytes]) -> str:
    """The field the script names as malformed, "ok" or "check" (a fresh key each call)."""
    key = f"parity:{{{AGENT}}}:{next(_keys)}"
    client.hset(key, mapping=cast(Any, fields))
    args = ["", "", "", "", "", "", "", "", redis_store_module._KNOWN_STATUSES, "", ""]
    reply = cast(list[bytes], client.eval(Script.named("store_update").source, 1, key, *args))
    client.delete(key)
    tag = reply[0].decode()
    return tag if tag in ("ok", "check") else reply[1].decode()


@pytest.fixture(scope="module")
def sync_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port)
    try:
        yield client
    finally:
        client.close()


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


# -- every rule, one case each: (changes, the script decides it here) ----------------------
DECIDED: dict[str, Fields] = {
    "as create writes it": {},
    "every optional field": {b"result": b'{"r":[1]}', b"error": "é".encode(), b"x-new": b"1"},
    "no owner_oid": {b"owner_oid": None},
    # UTF-8, as redis-py decodes every name and value
    "error not UTF-8": {b"error": b"\xff\xfe"},
    "owner_oid cut UTF-8": {b"owner_oid": b"\xc3("},
    "unknown field's name not UTF-8": {b"x-\xff": b"1"},
    "unknown field's value a surrogate": {b"x-new": b"\xed\xa0\x80"},
    "past U+10FFFF": {b"error": b"\xf4\x90\x80\x80"},
    "overlong 2 bytes": {b"error": b"\xc0\xaf"},
    "overlong 3 bytes": {b"error": b"\xe0\x80\xaf"},
    "overlong 4 bytes": {b"error": b"\xf0\x80\x80\xaf"},
    "truncated": {b"error": b"ok \xe2\x82"},
    "stray continuation": {b"error": b"\x80"},
    "4-byte emoji": {b"error": "😀 and ✓".encode()},
    "largest code point": {b"error": b"\xf4\x8f\xbf\xbf"},
    # missing fields: the first in sorted order
    "version missing": {b"version": None},
    "two missing": {b"version": None, b"payload": None},
    "status missing": {b"status": None},
    "updated_at missing": {b"updated_at": None},
    # status
    "status capitalised": {b"status": b"Pending"},
    "status padded": {b"status": b"pending "},
    "status empty": {b"status": b""},
    "status list": {b"status": b"pending,running"},
    "status of a newer version": {b"status": b"paused"},
    # created_at / updated_at: float(), finite
    "created_at digits only": {b"created_at": b"1700000000"},
    "created_at exponent": {b"created_at": b"1.7E+9"},
    "created_at signs and dots": {b"created_at": b"+.5", b"updated_at": b"-5."},
    "created_at tiny": {b"created_at": b"1e-400"},
    "created_at overflows": {b"created_at": b"1e400"},
    "created_at overflows by digits": {b"created_at": b"9" * 400},
    "created_at too large for microseconds": {b"created_at": b"1e303"},
    "created_at too small for microseconds": {b"created_at": b"-1.8e302"},
    "created_at just in microseconds": {b"created_at": b"1.7e302"},
    "created_at huge in create's format": {b"created_at": b"9" * 300 + b".000000"},
    "updated_at huge": {b"updated_at": b"1e303"},
    "microseconds before version": {b"created_at": b"1e303", b"version": b"x"},
    "created_at inf": {b"created_at": b"inf"},
    "created_at nan": {b"created_at": b"-NaN"},
    "created_at hex": {b"created_at": b"0x10"},
    "created_at two dots": {b"created_at": b"1.2.3"},
    "created_at fractional exponent": {b"created_at": b"1e5.5"},
    "created_at NUL": {b"created_at": b"1\x00"},
    "created_at file separator": {b"created_at": b"\x1c1.5"},
    "version unit separator": {b"version": b"1\x1f"},
    "created_at empty": {b"created_at": b""},
    "updated_at garbage": {b"updated_at": b"soon"},
    # version: int(), >= 1, finite as a float
    "version leading zeros and sign": {b"version": b"+007"},
    "version 10**23": {b"version": str(10**23).encode()},
    "version 308 digits": {b"version": b"9" * 308},
    "version past the largest float": {b"version": b"9" * 309},
    "version zero": {b"version": b"00"},
    "version minus zero": {b"version": b"-0"},
    "version negative": {b"version": b"-5"},
    "version float": {b"version": b"1.0"},
    "version exponent": {b"version": b"1e3"},
    "version empty": {b"version": b""},
    # payload / result: json.loads, a dict or None
    "payload null": {b"payload": b" null\n"},
    "payload spaced": {b"payload": b' {"a" : [ 1 , 2.5e-3 , -0 , true , false , null ] }\r\n'},
    "payload empty containers": {b"payload": b'{"a":{},"b":[],"c":[[]],"d":{"e":{}}}'},
    "payload duplicate keys": {b"payload": b'{"a":1,"a":2}'},
    "payload NaN and Infinity": {b"payload": b'{"a":NaN,"b":Infinity,"c":-Infinity}'},
    "payload huge float": {b"payload": b'{"a":1e400,"b":-0.0,"c":1E+5}'},
    "payload escapes": {b"payload": rb'{"a":"\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00"}'},
    "payload lone surrogate escape": {b"payload": rb'{"a":"\udcff"}'},
    "payload raw UTF-8 and DEL": {b"payload": '{"é":"東京\x7f"}'.encode()},
    "payload a 640-digit integer": {b"payload": b'{"a":' + b"1" * 640 + b"}"},
    "payload a long float": {b"payload": b'{"a":' + b"1" * 5000 + b".5}"},
    "payload 64 deep": {b"payload": nested(64)},
    "payload not JSON": {b"payload": b"{not json"},
    "payload empty": {b"payload": b""},
    "payload nul": {b"payload": b"nul"},
    "payload array": {b"payload": b"[1,2]"},
    "payload string": {b"payload": b'"x"'},
    "payload array 1000 deep": {b"payload": b"[" * 1000},
    "payload trailing garbage": {b"payload": b'{"a":1}x'},
    "payload two objects": {b"payload": b"{} {}"},
    "payload trailing comma": {b"payload": b'{"a":1,}'},
    "payload array trailing comma": {b"payload": b'{"a":[1,]}'},
    "payload leading comma": {b"payload": b'{"a":[,1]}'},
    "payload no colon": {b"payload": b'{"a" 1}'},
    "payload bare key": {b"payload": b"{a:1}"},
    "payload single quotes": {b"payload": b"{'a':1}"},
    "payload leading zero": {b"payload": b'{"a":01}'},
    "payload negative leading zero": {b"payload": b'{"a":-01}'},
    "payload bare dot": {b"payload": b'{"a":1.}'},
    "payload no integer part": {b"payload": b'{"a":-.5}'},
    "payload plus sign": {b"payload": b'{"a":+1}'},
    "payload hex": {b"payload": b'{"a":0x10}'},
    "payload exponent without digits": {b"payload": b'{"a":1e}'},
    "payload minus alone": {b"payload": b'{"a":-}'},
    "payload lower-case nan": {b"payload": b'{"a":nan}'},
    "payload inf": {b"payload": b'{"a":-inf}'},
    "payload True": {b"payload": b'{"a":True}'},
    "payload nulll": {b"payload": b'{"a":nulll}'},
    "payload short escape": {b"payload": rb'{"a":"\u12"}'},
    "payload bad hex escape": {b"payload": rb'{"a":"\uZZZZ"}'},
    "payload unknown escape": {b"payload": rb'{"a":"\x41"}'},
    "payload control character": {b"payload": b'{"a":"\x01"}'},
    "payload raw tab in a string": {b"payload": b'{"a":"\t"}'},
    "payload unterminated": {b"payload": b'{"a":"x}'},
    "payload unclosed": {b"payload": b'{"a":[1,2'},
    "payload mismatched": {b"payload": b'{"a":[1,2}]'},
    "payload non-ASCII outside a string": {b"payload": '{"a":1}\u00a0'.encode()},
    "payload BOM": {b"payload": b'\xef\xbb\xbf{"a":1}'},
    "payload invalid UTF-8 in a string": {b"payload": b'{"a":"\xff"}'},
    "result array": {b"result": b"[1]"},
    "result null": {b"result": b"null"},
    # json.loads refuses what is not JSON whatever its limits: decided, however deep
    "payload broken past 64 deep": {b"payload": b'{"a":' + b"[" * 70 + b"]" * 70 + b"}x"},
    "payload broken beside a 641-digit integer": {b"payload": b'{"a":' + b"1" * 641 + b",}"},
    "result not JSON": {b"result": b"{oops"},
    # several faults: the one parse_hash meets first
    "status before version": {b"status": b"weird", b"version": b"x"},
    "created_at before payload": {b"created_at": b"x", b"payload": b"x"},
    "payload before result": {b"payload": b"[]", b"result": b"x"},
    "result before updated_at": {b"result": b"[]", b"updated_at": b"x"},
    "updated_at before version": {b"updated_at": b"x", b"version": b"0"},
    "UTF-8 before a missing field": {b"version": None, b"error": b"\xff"},
}

LEFT_TO_PYTHON: dict[str, Fields] = {
    "payload 65 deep": {b"payload": nested(65)},
    "payload 100k deep": {b"payload": nested(100_000)},
    "result 65 deep": {b"result": b'{"a":' + b"[" * 64 + b"]" * 64 + b"}"},
    "payload longer than the script scans": {b"payload": b'{"a":"' + b"x" * 8192 + b'"}'},
    "result longer than the script scans, broken": {b"result": b"[" + b" " * 8192},
    "payload a 641-digit integer": {b"payload": b'{"a":' + b"1" * 641 + b"}"},
    "payload a 5000-digit integer": {b"payload": b'{"a":-' + b"1" * 5000 + b"}"},
    "created_at padded": {b"created_at": b" 1700000000.5\n"},
    "created_at grouped": {b"created_at": b"1_700_000_000.5"},
    "created_at Arabic-Indic digits": {b"created_at": "\u0661\u0667".encode()},
    "created_at two numbers": {b"created_at": b"1 2"},
    "version padded": {b"version": b" 7 "},
    "version grouped": {b"version": b"1_0"},
    "version Arabic-Indic": {b"version": "\u0667".encode()},
    "version 701 digits": {b"version": b"0" * 700 + b"5"},
    "version grouped badly": {b"version": b"1__0"},
    "deep payload before a bad version": {b"payload": nested(70), b"version": b"x"},
}


@pytest.mark.parametrize("case", sorted(DECIDED))
def test_the_script_judges_a_record_as_parse_hash_does(sync_client: redis.Redis, case: str) -> None:
    fields = record(DECIDED[case])
    assert script_verdict(sync_client, fields) == python_verdict(fields)


@pytest.mark.parametrize("case", sorted(LEFT_TO_PYTHON))
def test_the_script_leaves_what_it_cannot_judge_to_python(
    sync_client: redis.Redis, case: str
) -> None:
    assert script_verdict(sync_client, record(LEFT_TO_PYTHON[case])) == "check"


# -- the store's outcome on the same records, either path -----------------------------------
@pytest.fixture
async def store(single_node_url: str) -> AsyncIterator[RedisJobStore]:
    made = RedisJobStore(single_node_url, agent=AGENT)
    try:
        yield made
    finally:
        await made.close()


@pytest.mark.parametrize("case", sorted(DECIDED.keys() | LEFT_TO_PYTHON.keys()))
async def test_the_store_updates_exactly_the_records_parse_hash_reads(
    store: RedisJobStore, sync_client: redis.Redis, case: str
) -> None:
    fields = record({**DECIDED, **LEFT_TO_PYTHON}[case])
    key = store.keys.record("j")
    sync_client.hset(key, mapping=cast(Any, fields))
    sync_client.expire(key, 60)
    before = (sync_client.dump(key), sync_client.pexpiretime(key))
    expected = python_verdict(fields)
    try:
        updated = await store.update("j", result={"r": 1})
    except InvalidRecord as exc:
        assert exc.field == expected
        assert (sync_client.dump(key), sync_client.pexpiretime(key)) == before
    else:
        assert expected == "ok"
        assert await store.get("j") == updated
        stored = cast(dict[bytes, bytes], sync_client.hgetall(key))
        assert {n: v for n, v in stored.items() if n not in (b"version", b"updated_at")} == {
            **{n: v for n, v in fields.items() if n not in (b"version", b"updated_at")},
            b"result": b'{"r":1}',
        }
        assert stored[b"version"] == str(int(fields[b"version"].decode()) + 1).encode()


# -- generated records ----------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)
TRICKY = list(' \t\n\r\x00\x01\x1f\x7f"\\/{}[],:-+.0123456789eEtrufalsnNIyxu\u00e9\u00a0😀')


@st.composite
def json_texts(draw: st.DrawFn) -> bytes:
    """json.dumps of a random value (NaN and Infinity included), spaced or not, ASCII or
    not, then perhaps broken: characters inserted, removed or replaced."""
    value = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=4) | json_values)
    spacing = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    text = json.dumps(value, separators=spacing, ensure_ascii=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["insert", "remove", "replace"]))
        char = draw(st.sampled_from([*TRICKY, "\ud800"]))
        keep = at + 1 if edit != "insert" else at
        text = text[:at] + ("" if edit == "remove" else char) + text[keep:]
    return text.encode("utf-8", "surrogatepass")  # "\ud800": bytes that are not UTF-8


numbers = st.text(alphabet="0123456789+-.eE _\x1c\x00xinfatyINF\u0667", max_size=10).map(str.encode)
field_values = {
    b"payload": json_texts(),
    b"result": json_texts(),
    b"created_at": numbers | st.floats().map(lambda f: repr(f).encode()),
    b"updated_at": numbers,
    b"version": numbers | st.integers(-5, 10**30).map(lambda n: str(n).encode()),
    b"status": st.sampled_from([s.value.encode() for s in JobStatus] + [b"Running", b""]),
}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional=field_values))
def test_generated_records_get_python_s_verdict_or_are_left_to_it(
    sync_client: redis.Redis, changes: dict[bytes, Any]
) -> None:
    fields = record(changes)
    verdict = script_verdict(sync_client, fields)
    assert verdict in (python_verdict(fields), "check")


@settings(max_examples=500, deadline=None)
@given(json_texts())
def test_generated_json_gets_python_s_verdict_or_is_left_to_it(
    sync_client: redis.Redis, text: bytes
) -> None:
    fields = record({b"payload": text})
    assert script_verdict(sync_client, fields) in (python_verdict(fields), "check")


@settings(max_examples=200, deadline=None)
@given(json_texts())
def test_json_the_store_would_write_is_judged_by_the_script(
    sync_client: redis.Redis, text: bytes
) -> None:
    """Unbroken json.dumps output, 64 deep at most: never left to Python."""
    try:
        value = json.loads(text.decode())  # strict: json.loads(bytes) lets surrogates pass
    except ValueError:
        return
    if not isinstance(value, dict) or text.count(b"[") + text.count(b"{") > 64:
        return
    fields = record({b"payload": text})
    assert script_verdict(sync_client, fields) == python_verdict(fields) == "ok"


# -- one round trip ----------------------------------------------------------------------------
async def test_an_update_is_one_round_trip_unless_the_script_leaves_the_record_to_python(
    single_node_url: str, sync_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = RedisSettings.from_url(single_node_url).make_client()
    store = RedisJobStore(single_node_url, agent=AGENT, client=client)
    sent: list[str] = []
    execute = client.execute_command

    async def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return await execute(*args, **options)

    try:
        await store.create("j", {"a": 1}, ttl_seconds=60)
        await store.update("j", status=JobStatus.RUNNING)  # loads the script
        monkeypatch.setattr(client, "execute_command", counting)
        updated = await store.update("j", result={"r": 1}, error="e", expected_version=2)
        assert (sent, updated.version, updated.payload) == (["EVALSHA"], 3, {"a": 1})
        sync_client.hset(store.keys.record("j"), "payload", cast(Any, nested(65)))
        sent.clear()
        deep = await store.update("j", status=JobStatus.SUCCEEDED)
        assert sent == ["EVALSHA", "HGETALL", "EVALSHA"]
        assert deep.version == 4 and await store.get("j") == deep
    finally:
        await store.close()
        await client.aclose()
