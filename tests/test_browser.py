"""The course as people see it: the built site (desktop and phone) and JupyterLab, in headless Chromium.

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




@pytest.fixture(scope="module")
def site_url(site):
    out, _ = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def open_page(browser, url, width=1280, height=900):
    page = browser.new_page(viewport={"width": width, "height": height})
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
    page.on("request", lambda r: None if r.url.startswith((url.split("/")[0] + "//" + url.split("/")[2], "data:"))
            else problems.append(f"went to the network: {r.url}"))
    page.goto(url, wait_until="load")
    return page, problems


LESSON_PAGES = [path.with_suffix(".html").name for path in lesson_paths()]
PROSE = ["glossary.html", "teaching.html"]


def test_every_page_loads_cleanly_with_its_images_sidebar_and_folded_answers(browser, site_url):
    problems = []
    for name in ["index.html", *PROSE, *LESSON_PAGES]:
        page, page_problems = open_page(browser, f"{site_url}/{name}")
        sidebar = page.eval_on_selector_all("nav.bd-docs-nav a", "links => links.map(a => a.getAttribute('href'))")
        listed = [link.split("#")[0].split("/")[-1] for link in sidebar]
        assert all(lesson in listed or lesson == name for lesson in LESSON_PAGES + PROSE), f"{name}: sidebar {listed}"
        if name in LESSON_PAGES:
            images = page.evaluate("[...document.images].filter(i => i.src.includes('_images')).map(i => i.complete && i.naturalWidth > 0)")
            assert images and all(images), f"{name}: an image did not load"
            assert page.locator(".bd-article h2 a.headerlink").count() > 0, f"{name}: headings need links"
            on_this_page = page.locator(".bd-sidebar-secondary nav.page-toc").inner_text()
            assert page.locator(".bd-article h2").first.inner_text().strip("#¶ \n") in on_this_page, f"{name}: no page contents"
            folded = page.evaluate("[...document.querySelectorAll('details.solution')].map(d => d.open)")
            assert folded and not any(folded), f"{name}: answers must start folded"
            fold = page.locator("details.solution").first
            assert not fold.locator(".check-output").is_visible()
            fold.locator("summary").click()
            assert fold.locator(".check-output").is_visible() and "Correct" in fold.locator(".check-output").inner_text()
            size = page.evaluate("parseFloat(getComputedStyle(document.querySelector('.bd-article p')).fontSize)")
            assert size >= 16, f"{name}: body text at {size}px"
            characters = page.evaluate("""() => {
                const p = document.querySelector('.bd-article section > p');
                const probe = document.createElement('span');
                probe.style.cssText = 'position:absolute;visibility:hidden;white-space:nowrap';
                probe.textContent = 'the quick brown fox jumps over the lazy dog; '.repeat(4);
                p.appendChild(probe);
                const perCharacter = probe.getBoundingClientRect().width / probe.textContent.length;
                probe.remove();
                return p.getBoundingClientRect().width / perCharacter;
            }""")
            assert characters <= 95, f"{name}: lines of about {characters:.0f} characters"
        problems += [f"{name}: {problem}" for problem in page_problems]
        page.close()
    assert problems == []


def test_search_finds_the_lessons_about_leases(browser, site_url):
    page, problems = open_page(browser, f"{site_url}/search.html?q=lease")
    page.wait_for_selector("#search-results ul li a", timeout=30_000)
    found = page.eval_on_selector_all("#search-results ul li a", "links => links.map(a => a.getAttribute('href'))")
    assert any(link.split("?")[0].split("#")[0] in LESSON_PAGES for link in found), found
    assert problems == []
    page.close()


def test_on_a_phone_the_index_and_a_lesson_fit_and_plots_stay_legible(browser, site_url, tmp_path):
    for name in ("index.html", "01_why_duplicates_arrive.html"):
        page, problems = open_page(browser, f"{site_url}/{name}", width=390, height=844)
        page.screenshot(path=str(tmp_path / f"phone-{name}.png"))
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page scrolls sideways by {overflow}px on a phone"
        if name != "index.html":
            widths = page.evaluate("[...document.querySelectorAll('div.cell_output img')].map(i => i.getBoundingClientRect().width)")
            assert widths and min(widths) >= 390 * 0.9, f"plots shrank to {min(widths):.0f}px on a phone"
        assert problems == []
        page.close()


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
            // A folded solution shows an empty prompt; every prompt a learner can read has run.
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].filter(p => p.textContent.trim());
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
