"""Newest 20 jobs of one owner: the time index vs the legacy scan, at 1e3 / 1e5 / 1e6 jobs.

    .venv/bin/python -m bench.listing [--sizes 1000,100000,1000000] [--repeat 200]

Starts its own redis-server and grows one agent's history in place (a Lua bulk loader,
bench only, writes records and index entries exactly as the create script does). The
history: half the jobs belong to the measured owner, a quarter are shared, a quarter
belong to 100 other owners. At each size it times `list_for_owner(owner, limit=20)`:

    index        JOBSTATE_TIME_INDEX_READS on: two bucket reads + one row fetch
    scan (cap)   the legacy path with the default JOBSTATE_LIST_SCAN_CAP=5000: bounded
                 work, but past 5000 jobs its page is wrong (it never saw the newest)
    scan (full)  the legacy path with no cap: the right page, at the cost of a full scan

and checks each page against the full scan. Target (issue 4): index time at 1e6 within
1.5x of its time at 1e3.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from platform_common.jobs import RedisJobStore
from platform_common.jobs.keys import StoreKeys
from platform_common.jobs.redis.url import RedisSettings
from tests.support.redis_server import RedisServer

AGENT = "bench-agent"
OWNER = "owner-a"
CHUNK = 5000

# Bench-only bulk loader: job i gets created_at = base + i microseconds, so the newest
# jobs are the last loaded, and the same hash and index entry the create script writes.
# KEYS: none (a single-node bench server). ARGV: record prefix, index prefix, first i,
# count, base seconds.
BULK_LOAD = """
local rec, idx, first, count, base = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5])
for i = first, first + count - 1 do
  local owner
  local r = i % 4
  if r < 2 then owner = 'owner-a' elseif r == 2 then owner = '' else owner = 'o' .. (i % 100) end
  local sec = base + math.floor(i / 1000000)
  local usec = string.format('%06d', i % 1000000)
  local created = sec .. '.' .. usec
  local job_id = string.format('job-%08d', i)
  local key = rec .. job_id
  redis.call('HSET', key, 'status', 'succeeded', 'payload', '{"n":' .. i .. '}',
    'result', '{"ok":true}', 'created_at', created, 'updated_at', created,
    'version', '3', 'owner_oid', owner)
  redis.call('EXPIRE', key, 86400)
  local bucket = owner
  if owner == '' then bucket = '__shared__' end
  redis.call('ZADD', idx .. bucket, 0, string.format('%010d', sec) .. usec .. ':' .. job_id)
end
return count
"""


async def load(client: object, keys: StoreKeys, first: int, last: int, base: int) -> float:
    started = time.perf_counter()
    script = client.register_script(BULK_LOAD)  # type: ignore[attr-defined]
    for start in range(first, last, CHUNK):
        count = min(CHUNK, last - start)
        await script(args=[keys.base + ":", keys.base + ":_idx:", start, count, base])
    return time.perf_counter() - started


async def page_times(store: RedisJobStore, repeat: int) -> tuple[float, list[str]]:
    """Median seconds of one newest-20 page, and the page's job ids."""
    latencies = []
    ids: list[str] = []
    for _ in range(repeat):
        started = time.perf_counter()
        page = await store.list_for_owner(OWNER, limit=20)
        latencies.append(time.perf_counter() - started)
        ids = [r.job_id for r in page.rows]
    return statistics.median(latencies), ids


async def bench(
    url: str, sizes: list[int], repeat: int, full_scan_max: int
) -> list[dict[str, object]]:
    settings = RedisSettings.from_url(url, socket_timeout=120.0)
    client = settings.make_client()
    index = RedisJobStore(settings, agent=AGENT, time_index=True, client=client)
    capped = RedisJobStore(settings, agent=AGENT, time_index=False, client=client)
    keys = StoreKeys(AGENT)
    base = int(time.time()) - 86_000
    rows: list[dict[str, object]] = []
    loaded = 0
    for size in sizes:
        load_s = await load(client, keys, loaded, size, base)
        loaded = size
        index_s, index_ids = await page_times(index, repeat)
        capped_s, capped_ids = await page_times(capped, max(3, repeat // 20))
        row: dict[str, object] = {"size": size, "load_s": load_s, "index_s": index_s,
                                  "capped_s": capped_s}  # fmt: skip
        if size <= full_scan_max:
            full = RedisJobStore(settings, agent=AGENT, time_index=False, list_scan_cap=size + 1,
                                 client=client)  # fmt: skip
            full_s, truth = await page_times(full, 1 if size > 100_000 else 3)
            row |= {
                "full_s": full_s,
                "index_ok": index_ids == truth,
                "capped_ok": capped_ids == truth,
            }
        else:
            expected = [f"job-{i:08d}" for i in range(size - 1, -1, -1) if i % 4 < 3][:20]
            row |= {"full_s": None, "index_ok": index_ids == expected,
                    "capped_ok": capped_ids == expected}  # fmt: skip
        rows.append(row)
        print(f"  {size:>9,} jobs loaded in {load_s:6.1f} s; measured", flush=True)
    await client.aclose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=200, help="index pages timed per size")
    parser.add_argument("--full-scan-max", type=int, default=1_000_000,
                        help="largest size at which the uncapped scan is timed")  # fmt: skip
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(f"newest 20 of {OWNER!r}: time index vs legacy scan (median latency per page)")
    with RedisServer() as server:
        rows = asyncio.run(bench(server.url, sizes, args.repeat, args.full_scan_max))
    first = rows[0]["index_s"]
    assert isinstance(first, float)
    print(f"{'jobs':>10}{'index ms':>10}{'x vs min':>9}{'ok':>4}{'scan cap5000 ms':>17}{'ok':>4}"
          f"{'scan full ms':>14}{'full/index':>12}")  # fmt: skip
    for row in rows:
        index_s, capped_s, full_s = row["index_s"], row["capped_s"], row["full_s"]
        assert isinstance(index_s, float) and isinstance(capped_s, float)
        full = f"{full_s * 1e3:14.1f}{full_s / index_s:12.0f}" if isinstance(full_s, float) else (
            f"{'(skipped)':>14}{'':>12}")  # fmt: skip
        print(f"{row['size']:>10,}{index_s * 1e3:>10.3f}{index_s / first:>9.2f}"
              f"{'yes' if row['index_ok'] else 'NO':>4}{capped_s * 1e3:>17.1f}"
              f"{'yes' if row['capped_ok'] else 'NO':>4}{full}")  # fmt: skip
    last = rows[-1]["index_s"]
    assert isinstance(last, float)
    ratio = last / first
    print(f"index page at {rows[-1]['size']:,} vs {rows[0]['size']:,} jobs: {ratio:.2f}x "
          f"(target <= 1.5x): {'met' if ratio <= 1.5 else 'NOT met'}")  # fmt: skip
    print("'ok' = the page equals the full scan's (the true newest 20); the capped scan only"
          " sees 5000 records, so past that its page is wrong.")  # fmt: skip
    return 0 if ratio <= 1.5 and all(r["index_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
