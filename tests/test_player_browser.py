"""The site's step-through player in headless Chromium: previous / next / play move the frame, no script shows all.

The page is the course's real site page (``site.render_site``) for a lesson made
of one step-through, the way an executed lesson carries it: the StepThrough's own
output, with no kernel behind it. Needs Debian's ``chromium`` and ``playwright``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from idemlib import RUNNING_EXAMPLE, FaultPlan, LostAck, NaiveHandler, simulate
from idemlib.course.site import render_site
from idemlib.pictures.widgets import StepThrough


@pytest.fixture(scope="module")
def site_page(tmp_path_factory) -> tuple[Path, int]:
    """A site page whose one output is the lost-ack step-through; returns its path and its number of frames."""
    run = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)
    player = StepThrough(run, "The naive consumer, first ack lost")
    cell = nbformat.v4.new_code_cell("StepThrough(run)", execution_count=1, outputs=[
        nbformat.v4.new_output("display_data", data=player._repr_mimebundle_())])
    lesson = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 01 · A run, step by step\n\n**In this lesson you will**\n\n- watch a run."), cell])
    out = tmp_path_factory.mktemp("site")
    render_site({Path("01_a_run.ipynb"): lesson}, out)
    return out / "01_a_run.html", len(player.scenes)


def visible_frames(page) -> list[int]:
    return page.eval_on_selector_all(
        "figure.idemlib-step", "frames => frames.flatMap(f => f.offsetParent ? [Number(f.dataset.index)] : [])")


def open_site_page(browser, path: Path, **context):
    session = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
    page = session.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:")) else problems.append(request.url))
    page.goto(path.as_uri(), wait_until="load")
    return session, page, problems


def test_next_previous_and_play_move_the_frame(browser, site_page):
    path, count = site_page
    session, page, problems = open_site_page(browser, path)
    try:
        assert visible_frames(page) == [0]
        assert page.locator(".idemlib-counter").inner_text() == f"event 1 of {count}"
        assert not page.locator(".idemlib-storyboard-note").is_visible()
        page.get_by_role("button", name="next").click()
        page.get_by_role("button", name="next").click()
        assert visible_frames(page) == [2] and page.locator(".idemlib-counter").inner_text() == f"event 3 of {count}"
        page.get_by_role("button", name="previous").click()
        assert visible_frames(page) == [1]
        shown = page.locator("figure.idemlib-step", has=page.locator("svg")).nth(1)
        assert "delivers m-7f3 to consumer A" in shown.locator("figcaption").inner_text()
        page.get_by_role("button", name="play").click()
        page.wait_for_function("() => document.querySelector('.idemlib-counter').textContent.startsWith('event 3')",
                               timeout=10_000)
        page.get_by_role("button", name="pause").click()
        stopped = visible_frames(page)
        page.wait_for_timeout(1500)
        assert visible_frames(page) == stopped and stopped[0] >= 2
        assert problems == []
    finally:
        session.close()


def test_without_script_every_frame_shows_as_a_storyboard(browser, site_page):
    path, count = site_page
    session, page, problems = open_site_page(browser, path, java_script_enabled=False)
    try:
        assert visible_frames(page) == list(range(count))
        assert page.locator(".idemlib-storyboard-note").is_visible()
        assert not page.locator(".idemlib-controls").is_visible()
        last = page.locator("figure.idemlib-step").last
        assert "$40 too much" in last.locator("svg").text_content()
        assert "lost on the way" in page.locator("figure.idemlib-step figcaption").nth(5).inner_text()
        assert problems == []
    finally:
        session.close()
