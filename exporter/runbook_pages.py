"""Serves the generated runbooks: `GET /runbooks/` (index) and `GET /runbooks/{AlertName}`.

Every alert's `runbook_url` points here by default, so a runbook resolves inside the
cluster without any other hosting. The pages are the committed markdown, package data of
`platform_common.jobs_monitoring.runbooks`, rendered to HTML on request. They are found
by path, never by importing that package: the exporter does not depend on the monitoring
code (or its extra's dependencies), only on the files the same wheel installs.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import markdown
from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse

__all__ = ["INDEX_PAGE", "default_directory", "runbook_router"]

INDEX_PAGE = "README.md"
"""The index page's file name: README.md so the folder also reads well in a git browser."""

# Alert names are identifiers; anything else (dots, slashes, encoded separators) is
# refused before the file system is touched, so no path can leave the directory.
_ALERT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
# Pages link each other as `Name.md` (works in a git browser); served pages drop the
# suffix so `/runbooks/` + `Name` resolves to this router.
_MD_LINK = re.compile(r'href="([A-Za-z][A-Za-z0-9_]*)\.md(#[^"]*)?"')
_INDEX_LINK = re.compile(r'href="README\.md"')

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.5; }}
pre {{ background: #f4f4f4; padding: .75rem; overflow-x: auto; }}
code {{ font-family: ui-monospace, monospace; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3rem .6rem; }}
</style></head>
<body>
{body}
</body></html>
"""


# The wheel installs the monitoring packages beside this one under `platform_common/`.
_PACKAGED_PAGES = Path(__file__).parent.parent / "jobs_monitoring" / "runbooks"


def default_directory() -> Path:
    """The folder of the packaged runbook pages, wherever the wheel installed them.

    Resolved through the index page: an editable install links each page back to the
    source tree's `runbooks/`, and that folder (not the link farm) is what is served.
    """
    index = _PACKAGED_PAGES / INDEX_PAGE
    return index.resolve().parent if index.is_file() else _PACKAGED_PAGES.resolve()


def render_page(source: str, title: str) -> str:
    """Markdown -> a standalone HTML page with links rewritten for this router."""
    body = markdown.markdown(source, extensions=["fenced_code", "tables"])
    body = _INDEX_LINK.sub('href="./"', body)  # before the page links: README is one too
    body = _MD_LINK.sub(lambda match: f'href="{match[1]}{match[2] or ""}"', body)
    return _PAGE.format(title=html.escape(title), body=body)


def runbook_router(directory: Path | None = None) -> APIRouter:
    """A router serving the runbooks in `directory` (default: the committed ones)."""
    root = (directory or default_directory()).resolve()
    router = APIRouter(tags=["runbooks"])

    @router.get("/runbooks/", response_class=HTMLResponse)
    def runbook_index() -> HTMLResponse:
        index = root / INDEX_PAGE
        if index.is_file():
            source = index.read_text(encoding="utf-8")
        else:
            names = sorted(path.stem for path in root.glob("*.md"))
            source = "# Runbooks\n\n" + "".join(f"- [{name}]({name}.md)\n" for name in names)
        return HTMLResponse(render_page(source, "Runbooks"))

    @router.get("/runbooks/{alert_name}", response_class=HTMLResponse)
    def runbook_page(alert_name: str) -> HTMLResponse:
        if not _ALERT_NAME.fullmatch(alert_name) or f"{alert_name}.md" == INDEX_PAGE:
            raise HTTPException(status_code=404, detail="no such runbook")
        page = root / f"{alert_name}.md"
        # Belt and braces: the name check already rules out separators.
        if page.resolve().parent != root or not page.is_file():
            raise HTTPException(status_code=404, detail="no such runbook")
        source = page.read_text(encoding="utf-8")
        return HTMLResponse(render_page(source, f"Runbook: {alert_name}"))

    return router
