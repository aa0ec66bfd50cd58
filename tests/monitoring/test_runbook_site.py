"""The static runbook folder (`runbooks/html/`): the generated pages, numbered steps
rendered as ordered lists, links that work from any host."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from platform_common.jobs_monitoring import outputs
from platform_common.jobs_monitoring.generate import bundle
from platform_common.jobs_monitoring.site import load_config
from platform_common.jobs_monitoring.spec import alert_specs

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / outputs.RUNBOOK_SITE_DIR
STEP = re.compile(r"^(\d+)\. ", re.MULTILINE)


class Lists(HTMLParser):
    """The start number and item count of every <ol>, and every href."""

    def __init__(self) -> None:
        super().__init__()
        self.ordered: list[list[int]] = []  # [start, items]
        self.hrefs: list[str] = []
        self.paragraphs: list[str] = []
        self._in_p = False
        self._open: list[str] = []  # the lists around the current point

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag in ("ol", "ul"):
            self._open.append(tag)
        if tag == "ol":
            self.ordered.append([int(named.get("start") or 1), 0])
        elif tag == "li" and self._open[-1:] == ["ol"]:
            self.ordered[-1][1] += 1
        elif tag == "a" and named.get("href"):
            self.hrefs.append(str(named["href"]))
        elif tag == "p":
            self._in_p = True
            self.paragraphs.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("ol", "ul"):
            self._open.pop()
        if tag == "p":
            self._in_p = False

    def handle_data(self, data: str) -> None:
        if self._in_p:
            self.paragraphs[-1] += data


def parsed(name: str) -> Lists:
    lists = Lists()
    lists.feed((SITE / name).read_text(encoding="utf-8"))
    return lists


def test_site_is_the_generated_one_with_a_page_per_alert_and_an_index() -> None:
    files = bundle(load_config())
    site = {k: v for k, v in files.items() if k.startswith(f"{outputs.RUNBOOK_SITE_DIR}/")}
    names = {path.rsplit("/", 1)[1] for path in site}
    assert names == {f"{spec.name}.html" for spec in alert_specs(load_config())} | {"index.html"}
    for path, text in site.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, path


def test_numbered_steps_render_as_ordered_lists_with_their_numbers() -> None:
    for spec in alert_specs(load_config()):
        markdown = (ROOT / outputs.RUNBOOKS_DIR / f"{spec.name}.md").read_text()
        steps = [int(number) for number in STEP.findall(markdown)]
        lists = parsed(f"{spec.name}.html")
        rendered = [start + i for start, items in lists.ordered for i in range(items)]
        assert rendered == steps, spec.name
        # No step is left as a paragraph starting with its number.
        assert not [p for p in lists.paragraphs if re.match(r"\s*\d+\.\s", p)], spec.name


def test_links_stay_inside_the_folder_or_are_absolute() -> None:
    config = load_config()
    pages = {path.name for path in SITE.glob("*.html")}
    for page in pages:
        for href in parsed(page).hrefs:
            target = href.split("#", 1)[0]
            if href.startswith(("http://", "https://")):
                assert not href.startswith(config.exporter_url), (page, href)
                continue
            assert target in pages, (page, href)  # never /d/... against the runbook host
