"""The runbooks as a static HTML folder (`runbooks/html/`), hostable anywhere: a docs
site, object storage, `python -m http.server`. Rendered by the exporter's page renderer,
so the folder and the exporter's `/runbooks/` show the same pages."""

from __future__ import annotations

from collections.abc import Mapping

from platform_common.jobs_exporter.runbook_html import INDEX_PAGE, html_name, render_page

__all__ = ["render_site"]


def render_site(pages: Mapping[str, str]) -> dict[str, str]:
    """Markdown page name -> markdown, as HTML file name -> standalone HTML page."""
    return {
        html_name(name): render_page(
            source, "Runbooks" if name == INDEX_PAGE else f"Runbook: {name.removesuffix('.md')}"
        )
        for name, source in pages.items()
    }
