"""The course as people see it: the built site and JupyterLab, in headless Chromium.

The ``browser`` fixture (in conftest.py) needs Debian's ``chromium`` and the
``playwright`` package, which drives it without downloading a browser of its own.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
import time
import urllib.request

import pytest

from idemlib.course.lessons import lesson_paths
from idemlib.course.publish import PROSE_PAGES, render_site




@pytest.fixture(scope="module")
def site_url(tmp_path_factory, executed_lesson):
    out = tmp_path_factory.mktemp("site")
    render_site({path: executed_lesson(path) for path in lesson_paths()}, out)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def open_page(browser, url):
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
    page.goto(url, wait_until="load")
    return page, problems


def test_every_page_of_the_site_loads_cleanly_with_its_images_and_folded_solutions(browser, site_url):
    index, problems = open_page(browser, f"{site_url}/index.html")
    pages = index.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
    prose = [page for page, _ in PROSE_PAGES.values()]
    assert [page for page in pages if page not in prose] == [path.with_suffix(".html").name for path in lesson_paths()]
    for name in prose:  # the glossary and the teacher's guide, linked from the index
        assert name in pages
        page, page_problems = open_page(browser, f"{site_url}/{name}")
        problems += [f"{name}: {problem}" for problem in page_problems]
        page.close()
    for name in (page for page in pages if page not in prose):
        page, page_problems = open_page(browser, f"{site_url}/{name}")
        images = page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
        assert images and all(images), f"{name}: an image did not load"
        folded = page.evaluate("[...document.querySelectorAll('details.solution')].map(d => d.open)")
        assert folded and not any(folded), f"{name}: solutions must start folded"
        page.click("details.solution > summary")
        assert page.evaluate("document.querySelector('details.solution').open")
        problems += [f"{name}: {problem}" for problem in page_problems]
        page.close()
    assert problems == []


def test_lesson_01_runs_in_jupyterlab_and_its_step_through_moves(browser, jupyterlab, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        run_lesson_01(page, jupyterlab)
    except Exception:
        page.screenshot(path=str(tmp_path / "jupyterlab-failure.png"), full_page=True)
        print(f"screenshot of the failure: {tmp_path / 'jupyterlab-failure.png'}")
        raise
    finally:
        page.close()


def wait_for_idle_kernel(url: str, timeout: float = 120.0) -> None:
    """Wait until the server reports the notebook's kernel started and idle: a click before that is lost."""
    base, token = url.split("/lab/")[0], url.split("token=")[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=5) as answer:
            sessions = json.load(answer)
        if any((s.get("kernel") or {}).get("execution_state") == "idle" for s in sessions):
            return
        time.sleep(0.5)
    pytest.fail(f"the notebook's kernel was not idle within {timeout:.0f} s")


def run_lesson_01(page, url):
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    wait_for_idle_kernel(url)
    for _ in range(3):  # an early click can reach a kernel that is not connected yet: try again
        page.get_by_role("menuitem", name="Run").click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        try:
            page.wait_for_function(
                "() => /\\[(\\d+|\\*)\\]/.test(document.querySelector('.jp-CodeCell .jp-InputPrompt').textContent)",
                timeout=30_000,
            )
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError; nothing ran
            continue
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""",
        timeout=180_000,
    )
    # The course has no maths: anything typeset as maths is a dollar amount that lost its escape.
    assert page.locator(".jp-MarkdownOutput mjx-container").count() == 0
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert errors.count() == 0, errors.first.inner_text() if errors.count() else ""
    view = page.locator(".widget-html-content", has_text="event 1 of").first
    view.wait_for(state="attached", timeout=30_000)
    view.scroll_into_view_if_needed()
    assert "is published and waits on the queue" in view.inner_text()
    handle = page.locator(".widget-slider .noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    handle.press("ArrowRight")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.widget-html-content')].some(v => v.textContent.includes('event 2 of'))",
        timeout=10_000,
    )
    moved = page.locator(".widget-html-content", has_text="event 2 of").first.inner_text()
    assert "delivers m-7f3 to consumer A" in moved
