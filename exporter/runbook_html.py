"""Runbook markdown -> a standalone HTML page: the one renderer of the exporter's
`/runbooks/` pages and of the static folder `runbooks/html/`, so both show the same page.

Pages link each other as `Name.md` (right in a git browser); the HTML links them as
`Name.html` and the index as `index.html`, which both the static folder and the exporter
serve. A numbered step after a command block keeps its number (`<ol start="N">`).
"""

from __future__ import annotations

import html
import re

import markdown
from markdown.extensions import Extension

__all__ = ["INDEX_HTML", "INDEX_PAGE", "html_name", "render_page"]

INDEX_PAGE = "README.md"
"""The index page's file name: README.md so the folder also reads well in a git browser."""
INDEX_HTML = "index.html"
"""The index page's HTML name: what a static host serves for the folder itself."""

_MD_LINK = re.compile(r'href="([A-Za-z][A-Za-z0-9_]*)\.md(#[^"]*)?"')

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.5; }}
pre {{ background: #f4f4f4; padding: .75rem; overflow-x: auto; }}
code {{ font-family: ui-monospace, monospace; }}
ol {{ margin-bottom: .25rem; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3rem .6rem; }}
</style></head>
<body>
{body}
</body></html>
"""


class _NumberedSteps(Extension):
    """Ordered lists start at their first number (Python-Markdown ignores it by default;
    its `lazy_ol` keyword is not honoured by `markdown.markdown`)."""

    def extendMarkdown(self, md: markdown.Markdown) -> None:
        md.parser.blockprocessors["olist"].LAZY_OL = False  # type: ignore[attr-defined]


def html_name(page: str) -> str:
    """`README.md` -> `index.html`, `QueueIdle.md` -> `QueueIdle.html`."""
    return INDEX_HTML if page == INDEX_PAGE else page.removesuffix(".md") + ".html"


def _link(match: re.Match[str]) -> str:
    return f'href="{html_name(match[1] + ".md")}{match[2] or ""}"'


def render_page(source: str, title: str) -> str:
    """Markdown -> a standalone HTML page, page links rewritten to their HTML names."""
    body = markdown.markdown(source, extensions=["fenced_code", "tables", _NumberedSteps()])
    body = _MD_LINK.sub(_link, body)
    return _PAGE.format(title=html.escape(title), body=body)
