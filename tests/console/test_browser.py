"""The console in a real browser (headless Chromium via chromedriver) over a live queue:
open the overview, follow a dead letter, read its traceback, requeue it and watch it run
to success under a worker running in this test; and requeue one with the keyboard alone.
Each page's screenshot is written to $CONSOLE_SCREENSHOTS_DIR (default: the test's
temporary directory), never committed."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from platform_common.jobs.queue import JobPayload, JobQueue
from tests.console.conftest import make_dead_letters, served_console
from tests.support.queue_runtime import running_worker

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (scripts/ensure-system-deps.sh)",
)

if CHROMIUM and CHROMEDRIVER:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.wait import WebDriverWait


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,800"):  # fmt: skip
        options.add_argument(flag)
    # The system's chromedriver: selenium must not try to download one.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


async def succeed(job: JobPayload) -> dict[str, str]:
    return {"booked": job.task}


def shoot(browser: WebDriver, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    assert browser.save_screenshot(str(path)), path
    assert path.stat().st_size > 0


def follow(browser: WebDriver, element: WebElement) -> None:
    """Click a link or a form's button and wait until the next page has replaced this one
    and finished loading (a click that submits a form returns before the browser navigates).
    The old page is marked with a window property a new document does not have: selenium's
    `staleness_of` asks chromium about the old node mid-navigation, which chromium sometimes
    answers with an inspector error instead of "stale" (seen in CI)."""
    browser.execute_script("window.__leaving_this_page = true")
    element.click()
    next_page(browser)


def next_page(browser: WebDriver) -> None:
    """Wait until a page marked as `follow` marks it was replaced and finished loading."""
    WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,)).until(
        lambda driver: driver.execute_script(
            "return window.__leaving_this_page === undefined && document.readyState === 'complete'"
        )
    )


def until_text(browser: WebDriver, text: str, within: float = 20.0) -> None:
    """Reload until the page shows `text` (the job runs in this test's worker)."""
    deadline = time.monotonic() + within
    while True:
        try:
            if text in browser.find_element(By.TAG_NAME, "body").text:
                return
        except StaleElementReferenceException:
            pass  # caught between two loads: read the next one
        assert time.monotonic() < deadline, f"{text!r} not shown within {within}s"
        time.sleep(0.2)  # a poll interval, not a wait for something to happen
        browser.refresh()


async def test_follow_a_dead_letter_requeue_it_and_see_it_succeed(
    queue: JobQueue, redis_url: str, browser: WebDriver, screenshots: Path, tmp_path: Path
) -> None:
    [job_id] = await make_dead_letters(queue, ["the restaurant said no"], task="Book Den")
    with served_console(redis_url, tmp_path, "--read-write") as base:
        async with running_worker(queue.settings, succeed):
            await asyncio.to_thread(walk_through, browser, base, job_id, screenshots)
    print(f"console screenshots: {screenshots}")


def walk_through(browser: WebDriver, base: str, job_id: str, shots: Path) -> None:
    browser.get(base)
    assert browser.title.startswith("Overview")
    shoot(browser, shots, "1-overview")
    dead_link = browser.find_element(By.CSS_SELECTOR, 'a[href="/types/dining/dead"]')
    assert dead_link.text == "1"
    follow(browser, dead_link)
    assert "Dead letters" in browser.find_element(By.TAG_NAME, "h1").text
    shoot(browser, shots, "2-dead-letters")
    follow(browser, browser.find_element(By.LINK_TEXT, job_id))
    traceback = browser.find_element(By.CSS_SELECTOR, "pre.traceback").text
    assert "Traceback" in traceback and "RuntimeError: the restaurant said no" in traceback
    assert "Book Den" in browser.find_element(By.CSS_SELECTOR, "pre.json").text
    shoot(browser, shots, "3-job-dead")
    follow(browser, browser.find_element(By.CSS_SELECTOR, 'button[value="requeue:selected"]'))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Requeue 1 dead letter?"
    shoot(browser, shots, "4-confirm")
    follow(browser, browser.find_element(By.XPATH, "//button[normalize-space()='Yes, requeue 1']"))
    assert "Requeued 1 of 1" in browser.find_element(By.TAG_NAME, "h1").text
    shoot(browser, shots, "5-done")
    follow(browser, browser.find_element(By.LINK_TEXT, job_id))
    until_text(browser, "succeeded")
    assert "Book Den" in browser.find_element(By.CSS_SELECTOR, "pre.json").text
    shoot(browser, shots, "6-job-succeeded")
    browser.set_window_size(390, 844)  # a phone: still readable, no horizontal page scroll
    browser.get(base + "types/dining/dead")
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390, width
    shoot(browser, shots, "7-narrow-dead-letters")


async def test_the_dead_letters_can_be_requeued_with_the_keyboard_alone(
    queue: JobQueue, redis_url: str, browser: WebDriver, tmp_path: Path
) -> None:
    [job_id] = await make_dead_letters(queue, ["no mouse here"])
    with served_console(redis_url, tmp_path, "--read-write") as base:
        await asyncio.to_thread(by_keyboard, browser, base, job_id)
    assert await queue.dead_letters.count("dining") == 0


def by_keyboard(browser: WebDriver, base: str, job_id: str) -> None:
    browser.get(base + "types/dining/dead")
    reached: list[str] = []
    for _ in range(60):  # Tab through the page, as a keyboard user does
        browser.switch_to.active_element.send_keys(Keys.TAB)
        focused = browser.switch_to.active_element
        reached.append(
            f"{focused.tag_name}:{focused.get_attribute('name') or ''}:"
            f"{focused.get_attribute('value') or focused.text}"
        )
        if reached[-1] == "button:do:purge:matching":
            break
    assert reached[0] == "a::Skip to content"  # the first stop skips the navigation
    for control in ("input:error:", f"input:ids:{job_id}", "button:do:requeue:selected",
                    "button:do:purge:selected", "button:do:requeue:matching",
                    "button:do:purge:matching"):  # fmt: skip
        assert control in reached, (control, reached)
    # Tick the letter with Space, go on to "Requeue selected…" and press Enter.
    box = browser.find_element(By.CSS_SELECTOR, f'input[name="ids"][value="{job_id}"]')
    box.send_keys(Keys.SPACE)
    assert box.is_selected()
    for _ in range(10):
        if browser.switch_to.active_element.get_attribute("value") == "requeue:selected":
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    press_enter(browser)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Requeue 1 dead letter?"
    # The confirmation's button has the focus: Enter confirms.
    assert browser.switch_to.active_element.text == "Yes, requeue 1"
    press_enter(browser)
    assert "Requeued 1 of 1" in browser.find_element(By.TAG_NAME, "h1").text


def press_enter(browser: WebDriver) -> None:
    """Enter on the focused control, then wait for the next page as `follow` does."""
    browser.execute_script("window.__leaving_this_page = true")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    next_page(browser)
