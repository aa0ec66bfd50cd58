"""Serves the generated runbooks: `GET /runbooks/` (index) and `GET /runbooks/{AlertName}`.

The pages are the committed markdown (package data of
`platform_common.jobs_monitoring.runbooks`, found by path: the exporter does not import
the monitoring code), rendered on request by runbook_html, which also writes the static
folder `runbooks/html/`: so each page also answers as `{AlertName}.html` and the index
as `index.html`, and the links of one rendering work on both.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse

from .runbook_html import INDEX_HTML, INDEX_PAGE, render_page

__all__ = ["INDEX_PAGE", "default_directory", "render_page", "runbook_router"]

# Alert names are identifiers; anything else (dots, slashes, encoded separators) is
# refused before the file system is touched, so no path can leave the directory.
_ALERT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")


# The wheel installs the monitoring packages beside this one under `platform_common/`.
_PACKAGED_PAGES = Path(__file__).parent.parent / "jobs_monitoring" / "runbooks"


def default_directory() -> Path:
    """The folder of the packaged runbook pages, wherever the wheel installed them.

    Resolved through the index page: an editable install links each page back to the
    source tree's `runbooks/`, and that folder (not the link farm) is what is served.
    """
    index = _PACKAGED_PAGES / INDEX_PAGE
    return index.resolve().parent if index.is_file() else _PACKAGED_PAGES.resolve()


def runbook_router(directory: Path | None = None) -> APIRouter:
    """A router serving the runbooks in `directory` (default: the committed ones)."""
    root = (directory or default_directory()).resolve()
    router = APIRouter(tags=["runbooks"])

    @router.get("/runbooks/", response_class=HTMLResponse)
    @router.get(f"/runbooks/{INDEX_HTML}", response_class=HTMLResponse)
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
        alert_name = alert_name.removesuffix(".html")  # the static folder's names
        if not _ALERT_NAME.fullmatch(alert_name) or f"{alert_name}.md" == INDEX_PAGE:
            raise HTTPException(status_code=404, detail="no such runbook")
        page = root / f"{alert_name}.md"
        # Belt and braces: the name check already rules out separators.
        if page.resolve().parent != root or not page.is_file():
            raise HTTPException(status_code=404, detail="no such runbook")
        source = page.read_text(encoding="utf-8")
        return HTMLResponse(render_page(source, f"Runbook: {alert_name}"))

    return router
