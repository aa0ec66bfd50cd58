"""Runbooks: one per alert and one alert per page, every section, commands that work
against this project's keys, metrics and API, and every runbook_url served by the exporter."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from platform_common.jobs.dashboard_ids import PANEL_TITLES, QUEUE_OVERVIEW_TITLE
from platform_common.jobs.keys import QueueKeys
from platform_common.jobs.metric_catalogue import CATALOGUE
from platform_common.jobs_exporter.app import create_app
from platform_common.jobs_exporter.runbook_pages import default_directory, runbook_router
from platform_common.jobs_exporter.settings import ExporterSettings
from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.runbooks.render import INDEX, SECTIONS, render_runbooks
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.slo_queries import recording_rules
from platform_common.jobs_monitoring.spec import alert_specs
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = ROOT / outputs.RUNBOOKS_DIR
CONFIG = load_config()
SPECS = alert_specs(CONFIG)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PROMQL_COMMAND = re.compile(r"promtool query instant \"\$PROMETHEUS_URL\" '([^']+)'")
KEY = re.compile(r"jobs:\{\$AGENT_TYPE\}:([a-z_]+)")


def pages() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted(RUNBOOKS.glob("*.md"))}


def blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


# -- both ways ---------------------------------------------------------------------


def test_every_alert_has_a_page_and_every_page_an_alert() -> None:
    names = {spec.name for spec in SPECS}
    on_disk = set(pages()) - {Path(INDEX).stem}
    assert on_disk == names
    assert default_directory().resolve() == RUNBOOKS.resolve()


def test_pages_are_the_generated_ones() -> None:
    rendered = render_runbooks(CONFIG)
    assert {name: (RUNBOOKS / name).read_text() for name in rendered} == rendered


def test_every_page_has_every_section_in_order() -> None:
    for spec in SPECS:
        text = pages()[spec.name]
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        assert headings == list(SECTIONS), spec.name
        for section in SECTIONS:
            body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
            assert len(body.split()) >= 15, f"{spec.name}: {section} is nearly empty"


def test_page_states_the_alerts_own_threshold_duration_query_and_panel() -> None:
    for spec in SPECS:
        text = pages()[spec.name]
        assert text.startswith(f"# {spec.name}\n")
        assert f"`{spec.condition}` for `{spec.for_}`" in text
        assert f"```promql\n{spec.expr}\n```" in text
        assert CONFIG.dashboard_url(spec.dashboard_uid, spec.panel) in text
        assert f"{QUEUE_OVERVIEW_TITLE} / {PANEL_TITLES[spec.panel]}" in text
        assert f"`{spec.severity}`" in text and f"`{spec.action}`" in text


def test_index_lists_every_alert() -> None:
    index = pages()[Path(INDEX).stem]
    for spec in SPECS:
        assert f"[{spec.name}]({spec.name}.md)" in index


# -- the commands are this project's -----------------------------------------------


def test_redis_keys_in_pages_are_the_queue_layout() -> None:
    layout = QueueKeys("$AGENT_TYPE")
    known = {
        name
        for name in dir(layout)
        if not name.startswith("_")
        and isinstance(getattr(layout, name), str)
        and getattr(layout, name).startswith("jobs:{$AGENT_TYPE}:")
    } | {"job"}
    # Keys named by what they are, not by their suffix: the ring `fair` (and its `fair:q:`
    # and `fair:r:` per-key keys, whose first segment is the same).
    known |= {"fair"} if layout.fair_ring.endswith(":fair") else set()
    used = {key for text in pages().values() for key in KEY.findall(text)}
    assert {"queue", "dead"} <= used
    assert used <= known, used - known


def test_promql_in_pages_parses_and_uses_catalogue_metrics(tmp_path: Path) -> None:
    queries = sorted({q for text in pages().values() for q in PROMQL_COMMAND.findall(text)})
    queries += [spec.expr for spec in SPECS]
    assert len(queries) > len(SPECS)
    known = {m.full_name() for m in CATALOGUE} | {"up"}
    known |= {f"{m.full_name()}_bucket" for m in CATALOGUE if m.type == "histogram"}
    known |= {rule.record for rule in recording_rules(CONFIG)}  # the SLOs' recordings
    for query in queries:
        for name in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", query):
            assert name in known, (name, query)
    # promtool 2.42 has no "parse" command: recording rules make `check rules` parse them.
    rules = [{"record": f"runbook:query{i}", "expr": query} for i, query in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "runbooks", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_snippets_are_valid_bash() -> None:
    for name, text in pages().items():
        for snippet in blocks(text, "sh"):
            result = subprocess.run(
                ["bash", "-n"], input=snippet, capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, f"{name}:\n{snippet}\n{result.stderr}"


def test_dead_letter_page_requeues_and_purges_with_the_cli() -> None:
    text = pages()["DeadLetterDepthHigh"]
    assert 'agentjobs dead requeue "$AGENT_TYPE" --all --dry-run' in text
    assert "agentjobs dead purge" in text and "python - <<" not in text


# -- served by the exporter ---------------------------------------------------------


@pytest.fixture
async def exporter_client() -> AsyncIterator[httpx.AsyncClient]:
    # The real app; nothing here scrapes, so the Redis URL is never dialled.
    app = create_app(ExporterSettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as client:
        yield client


def _runbook_urls() -> list[str]:
    files = [
        ROOT / outputs.GRAFANA_ALERT_RULES,
        ROOT / outputs.PROMETHEUS_RULES,
    ]
    urls = []
    for path in files:
        document: Any = yaml.safe_load(path.read_text())
        for group in document["groups"]:
            alerts = [rule for rule in group["rules"] if "record" not in rule]
            urls += [rule["annotations"]["runbook_url"] for rule in alerts]
    return urls


async def test_every_runbook_url_resolves_on_the_exporter(
    exporter_client: httpx.AsyncClient,
) -> None:
    urls = _runbook_urls()
    assert len(urls) == 2 * len(SPECS)
    for url in urls:
        assert url.startswith(CONFIG.runbook_base) and url.endswith(".html")
        parts = urlsplit(url)
        response = await exporter_client.get("/runbooks/" + parts.path.rsplit("/", 1)[1])
        assert response.status_code == 200, url
        assert response.headers["content-type"].startswith("text/html")
        name = parts.path.rsplit("/", 1)[1].removesuffix(".html")
        assert f"<h1>{name}</h1>" in response.text
        for section in SECTIONS:
            assert f"<h2>{section}</h2>" in response.text


async def test_index_links_resolve(exporter_client: httpx.AsyncClient) -> None:
    response = await exporter_client.get("/runbooks/")
    assert response.status_code == 200
    links = re.findall(r'href="([A-Za-z][A-Za-z0-9]*)\.html"', response.text)
    assert sorted(links) == sorted(spec.name for spec in SPECS)
    for link in links:
        assert (await exporter_client.get(f"/runbooks/{link}")).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/runbooks/NoSuchAlert",
        "/runbooks/README",
        "/runbooks/QueueIdle.md",
        "/runbooks/..%2Fpyproject",
        "/runbooks/%2E%2E",
        "/runbooks/__init__",
    ],
)
async def test_unknown_names_and_traversal_are_404(
    exporter_client: httpx.AsyncClient, path: str
) -> None:
    assert (await exporter_client.get(path)).status_code == 404


async def test_router_serves_another_directory(tmp_path: Path) -> None:
    (tmp_path / "CustomAlert.md").write_text("# CustomAlert\n\nSee [the index](README.md).\n")
    (tmp_path / "secret.txt").write_text("not a runbook")
    from fastapi import FastAPI

    app = FastAPI()
    app.include_router(runbook_router(tmp_path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        page = await client.get("/runbooks/CustomAlert")
        assert page.status_code == 200 and 'href="index.html"' in page.text
        index = await client.get("/runbooks/index.html")
        assert 'href="CustomAlert.html"' in index.text  # no README: a generated list
        assert (await client.get("/runbooks/CustomAlert.html")).status_code == 200
        assert (await client.get("/runbooks/secret")).status_code == 404
        assert (await client.get("/runbooks/QueueIdle")).status_code == 404
