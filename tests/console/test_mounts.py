"""The console mounted twice in one app, as the README shows: every link, form and the
session cookie of a page belong to the mount that drew it, and a form token of one mount
is refused by another (another path, or another queue under the same secret)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from platform_common.jobs.console import console_router
from platform_common.jobs.console.csrf import SESSION_COOKIE
from platform_common.jobs.queue import JobQueue
from tests.console.conftest import allow_everyone, client_of, csrf_token, make_dead_letters
from tests.support.queue_runtime import fast_settings

SECRET = b"one-secret-for-every-mount"
_TARGETS = re.compile(r'(?:href|action)="(/[^"]*)"')


def targets(page: str) -> list[str]:
    """Every in-app link and form action of a page (external links start with http)."""
    found = _TARGETS.findall(page)
    assert found, page[:2000]
    return found


def two_mounts(looker: JobQueue, admin: JobQueue, at: tuple[str, str]) -> FastAPI:
    """`looker` read-only at at[0], `admin` read-write at at[1], one secret."""
    app = FastAPI()
    for queue, prefix, read_only in ((looker, at[0], True), (admin, at[1], False)):
        app.include_router(
            console_router(
                queue, auth_dependency=allow_everyone, read_only=read_only, secret=SECRET
            ),
            prefix=prefix,
        )
    return app


@pytest.fixture
async def tenant_b(redis_url: str) -> AsyncIterator[JobQueue]:
    """A second queue on the same server, in database 1 (the first is in database 0)."""
    url = redis_url.rsplit("/", 1)[0] + "/1"
    async with await JobQueue.connect(fast_settings(url, max_attempts=1)) as opened:
        yield opened


async def test_the_admin_mount_links_posts_and_keeps_its_cookie_on_itself(
    queue: JobQueue,
) -> None:
    [first, second] = await make_dead_letters(queue, ["a", "b"])
    app = two_mounts(queue, queue, ("/queue-console", "/queue-admin"))
    async with client_of(app) as client:
        looked = await client.get("/queue-console/types/dining/dead")
        assert all(t.startswith("/queue-console/") for t in targets(looked.text))
        assert "Path=/queue-console/" in looked.headers["set-cookie"]
        dead = await client.get("/queue-admin/types/dining/dead")
        assert dead.status_code == 200
        assert all(t.startswith("/queue-admin/") for t in targets(dead.text)), targets(dead.text)
        assert "Path=/queue-admin/" in dead.headers["set-cookie"]
        # Both sessions are kept, each sent only to its own mount (as a browser does).
        assert {c.path for c in client.cookies.jar if c.name == SESSION_COOKIE} == {
            "/queue-console/", "/queue-admin/",
        }  # fmt: skip
        # Requeue through the admin mount's own forms, as a browser follows them.
        [confirm_at] = re.findall(r'<form method="post" action="([^"]+)"', dead.text)
        picked = {"csrf": csrf_token(dead.text), "do": "requeue:selected", "error": ""}
        confirm = await client.post(confirm_at, data={**picked, "ids": first})
        assert confirm.status_code == 200, confirm.text
        assert all(t.startswith("/queue-admin/") for t in targets(confirm.text))
        [act_at] = re.findall(r'<form method="post" action="([^"]+)"', confirm.text)
        done = await client.post(act_at, data={**picked, "ids": first, "count": "1"})
        assert done.status_code == 200 and "Requeued 1 of 1" in done.text, done.text
        assert all(t.startswith("/queue-admin/") for t in targets(done.text))
    assert [letter.job_id for letter in await queue.dead_letters.list("dining")] == [second]


async def test_purge_all_on_one_tenant_leaves_the_other_alone(
    queue: JobQueue, tenant_b: JobQueue
) -> None:
    kept = set(await make_dead_letters(queue, ["tenant a"]))
    await make_dead_letters(tenant_b, ["tenant b 1", "tenant b 2"])
    app = two_mounts(queue, tenant_b, ("/tenant-a", "/tenant-b"))
    async with client_of(app) as client:
        dead = await client.get("/tenant-b/types/dining/dead")
        [confirm_at] = re.findall(r'<form method="post" action="([^"]+)"', dead.text)
        assert confirm_at == "/tenant-b/types/dining/dead/confirm"
        every = {"csrf": csrf_token(dead.text), "do": "purge:matching", "error": ""}
        confirm = await client.post(confirm_at, data=every)
        assert "Purge 2 dead letters?" in confirm.text, confirm.text
        [act_at] = re.findall(r'<form method="post" action="([^"]+)"', confirm.text)
        # What the confirmation form carries (the count and the moment shown, with it).
        shown = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', confirm.text))
        done = await client.post(act_at, data=shown)
        assert "Purged 2 of 2" in done.text, done.text
    assert await tenant_b.dead_letters.count("dining") == 0
    assert {letter.job_id for letter in await queue.dead_letters.list("dining")} == kept


@pytest.mark.parametrize(
    ("mounts", "minted_at", "posted_to"),
    [
        # Another path of the same queue: the read-write mount behind another login.
        (("/queue-admin", "/queue-admin-2"), "/queue-admin-2", "/queue-admin"),
        # Another queue under the same secret and the same session cookie.
        (("/tenant-a", "/tenant-b"), "/tenant-b", "/tenant-a"),
    ],
)
async def test_a_token_of_one_mount_is_refused_by_another(
    queue: JobQueue,
    tenant_b: JobQueue,
    mounts: tuple[str, str],
    minted_at: str,
    posted_to: str,
) -> None:
    [job_id] = await make_dead_letters(queue, ["a"])
    second = tenant_b if minted_at == "/tenant-b" else queue
    app = FastAPI()
    for prefix, mounted in ((mounts[0], queue), (mounts[1], second)):
        app.include_router(
            console_router(mounted, auth_dependency=allow_everyone, secret=SECRET),
            prefix=prefix,
        )
    async with client_of(app) as client:
        minted = await client.get(f"{minted_at}/types/dining/dead")
        session = minted.cookies[SESSION_COOKIE]
        fields = {"csrf": csrf_token(minted.text), "error": "", "ids": job_id, "count": "1"}
        for step in ("confirm", "act"):
            # Its session cookie too, as if the cookie's path did not keep it home.
            refused = await client.post(
                f"{posted_to}/types/dining/dead/{step}",
                data={**fields, "do": "purge:selected"},
                headers={"cookie": f"{SESSION_COOKIE}={session}"},
            )
            assert refused.status_code == 403, refused.text
            assert "security token is missing or stale" in refused.text
        # The same session with the token the target mount draws is accepted.
        own = await client.get(
            f"{posted_to}/types/dining/dead", headers={"cookie": f"{SESSION_COOKIE}={session}"}
        )
        accepted = await client.post(
            f"{posted_to}/types/dining/dead/confirm",
            data={**fields, "csrf": csrf_token(own.text), "do": "purge:selected"},
            headers={"cookie": f"{SESSION_COOKIE}={session}"},
        )
        assert accepted.status_code == 200 and "Purge 1 dead letter?" in accepted.text
    assert await queue.dead_letters.count("dining") == 1


async def test_a_console_app_mounted_under_a_path_serves_its_cookie_and_links_there(
    queue: JobQueue,
) -> None:
    outer = FastAPI()
    outer.mount("/ops", two_mounts(queue, queue, ("/queue-console", "/queue-admin")))
    async with client_of(outer) as client:
        dead = await client.get("/ops/queue-admin/types/dining/dead")
    assert dead.status_code == 200
    assert all(t.startswith("/ops/queue-admin/") for t in targets(dead.text))
    assert "Path=/ops/queue-admin/" in dead.headers["set-cookie"]


async def test_one_router_included_at_two_paths_is_refused_loudly(queue: JobQueue) -> None:
    # One console_router per mount: a router included twice cannot tell its mounts apart.
    router = console_router(queue, auth_dependency=allow_everyone)
    app = FastAPI()
    app.include_router(router, prefix="/one")
    app.include_router(router, prefix="/two")
    async with client_of(app) as client:
        first = await client.get("/one/")
        second = await client.get("/two/types/dining/dead")
    assert first.status_code == 200
    assert second.status_code == 500
    assert "call console_router once for each mount" in second.text
    assert "set-cookie" not in second.headers
