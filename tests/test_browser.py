"""The course as people see it: the built site (desktop and phone) and JupyterLab, in headless Chromium.

The ``browser`` fixture (in conftest.py) needs Debian's ``chromium`` and the
``playwright`` package, which drives it without downloading a browser of its own.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
import time
import urllib.parse
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
            images = page.evaluate("[...document.images].filter(i => i.src.includes('_images'))"
                                   ".map(i => i.complete && i.naturalWidth > 0)")
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


SEARCHES = ["lease", "409", "422", "24 h", "30 days"]


@pytest.mark.parametrize("how", ["http", "file"])
def test_search_finds_words_and_status_codes_and_quotes_the_sentence_that_matched(browser, site, site_url, how):
    # Opened from file:// as the README says, the browser refuses Sphinx's fetch of each page: the
    # course's summaries come from a script the search page loads instead.
    out, _ = site
    base = site_url if how == "http" else out.resolve().as_uri()
    for query in SEARCHES:
        page, problems = open_page(browser, f"{base}/search.html?q={urllib.parse.quote(query)}")
        page.wait_for_selector("#search-results ul li a", timeout=30_000)
        found = page.eval_on_selector_all("#search-results ul li a", "links => links.map(a => a.getAttribute('href'))")
        assert any(link.split("?")[0].split("#")[0] in LESSON_PAGES for link in found), (query, found)
        page.wait_for_selector("#search-results ul li p.context", timeout=10_000)
        summaries = page.eval_on_selector_all("#search-results ul li p.context", "ps => ps.map(p => p.textContent)")
        # The best result quotes a word of the query (a page may hold "30" and "days" apart, or a word only in a
        # figure's alt text); some result quotes the query as typed.
        assert summaries and any(word in summaries[0].lower() for word in query.split()), (query, summaries[:3])
        assert any(query in summary.lower() for summary in summaries), (query, summaries[:3])
        # The sentence that matched, not the page's list of contents ("2. A consumer with no memory 3. What ...").
        assert not any(re.search(r"\b\d\. [A-Z][^.]{3,60} \d\. ", summary) for summary in summaries), summaries[:3]
        assert problems == [], (query, problems)
        page.close()


def test_on_a_phone_every_page_fits_and_plots_keep_their_drawn_size(browser, site_url, tmp_path):
    # (The teacher's guide once grew to 1,181 px: an inline URL that did not break.)
    for name in ["index.html", "search.html", *PROSE, *LESSON_PAGES]:
        page, problems = open_page(browser, f"{site_url}/{name}", width=390, height=844)
        page.screenshot(path=str(tmp_path / f"phone-{name}.png"))
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name}: the page scrolls sideways by {overflow}px on a phone"
        if name == "01_why_duplicates_arrive.html":
            assert_drawn_size(page, name)
        assert problems == []
        page.close()


def assert_drawn_size(page, name):
    """Plots and step-through pictures show at the size they were drawn, in a box that scrolls, which a
    keyboard reaches and which says what it holds."""
    images = page.evaluate("""[...document.querySelectorAll('div.cell_output img')].map(i => {
        const box = i.closest('div.cell_output');
        return {shown: i.getBoundingClientRect().width, drawn: i.naturalWidth,
                scrolls: box.scrollWidth > box.clientWidth + 1, focusable: box.tabIndex === 0,
                label: box.getAttribute('aria-label') || ''};
    })""")
    assert images, f"{name}: no plot"
    for image in images:
        assert abs(image["shown"] - image["drawn"]) <= 1, \
            f"{name}: a plot drawn {image['drawn']}px wide shows at {image['shown']:.0f}px"
        if image["scrolls"]:
            assert image["focusable"] and image["label"].startswith("Figure, scrolls sideways"), (name, image)
    pictures = page.evaluate("""[...document.querySelectorAll('svg.idemlib-frame')].filter(svg => svg.getClientRects().length)
        .map(svg => ({shown: svg.getBoundingClientRect().width, drawn: parseFloat(svg.getAttribute('width')),
                      player: Boolean(svg.closest('.idemlib-player')) && svg.closest('.idemlib-player').tabIndex === 0,
                      rows: [...svg.querySelectorAll('g.idemlib-row rect')]
                        .map(r => [getComputedStyle(r).width, r.getAttribute('width')])}))""")
    for picture in pictures:
        assert abs(picture["shown"] - picture["drawn"]) <= 1 and picture["player"], (name, picture)
        # No site style reaches inside a picture (Bootstrap's .row > * once stretched each row's box to 960 px).
        assert all(float(style.removesuffix("px")) == float(drawn) for style, drawn in picture["rows"]), (name, picture["rows"])


def test_on_a_desktop_plots_and_pictures_keep_their_drawn_size(browser, site_url):
    for name in ("01_why_duplicates_arrive.html", "07_what_brokers_call_exactly_once.html", "09_long_work_in_progress.html"):
        page, problems = open_page(browser, f"{site_url}/{name}")
        page.wait_for_load_state("load")
        assert_drawn_size(page, name)
        assert problems == []
        page.close()


@pytest.mark.parametrize("toggle", ["primary", "secondary"])
def test_on_a_phone_every_page_opens_its_sidebar_by_a_tap_and_follows_a_link_in_it(browser, site_url, toggle):
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    try:
        for name in ["index.html", *PROSE, *LESSON_PAGES]:
            page = context.new_page()
            page.goto(f"{site_url}/{name}", wait_until="load")
            buttons = page.locator(f"button.{toggle}-toggle:visible")
            if toggle == "secondary" and buttons.count() == 0:
                assert name == "index.html", f"{name}: no contents button on a phone"
                page.close()
                continue
            buttons.first.tap()
            dialog = page.locator(f"dialog#pst-{toggle}-sidebar-modal[open]")
            dialog.wait_for(state="visible", timeout=5_000)
            links = dialog.locator("a.reference.internal" if toggle == "primary" else "a.nav-link")
            hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
            # Another page (primary) or a section of this one (secondary): somewhere the tap must take the reader.
            elsewhere = [i for i, href in enumerate(hrefs)
                         if (href.split("#")[0] not in ("", name)) == (toggle == "primary") and href != "#"]
            assert elsewhere, f"{name}: the {toggle} sidebar opened without a link to follow: {hrefs}"
            chosen = elsewhere[-1] if toggle == "primary" else elsewhere[0]  # the last lesson; the first section
            href = hrefs[chosen]
            links.nth(chosen).tap()
            if toggle == "primary":
                wanted = href.split("#")[0].split("/")[-1]
                page.wait_for_function("(wanted) => location.pathname.endsWith('/' + wanted)", arg=wanted, timeout=5_000)
            else:
                page.wait_for_function("(hash) => location.hash === hash", arg=href[href.index("#"):], timeout=5_000)
            page.close()
    finally:
        context.close()


# WCAG 2.0 and 2.1, levels A and AA: what axe-core checks a page against.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# Each state of a page a reader can bring about, and what of it axe checks: a folded page differs from an
# unfolded one only in its folds' summaries (what a fold hides is checked unfolded), so folded runs check those.
STATES = [
    ("light, folded", "", "details > summary"),
    ("light, unfolded", "document.querySelectorAll('details').forEach(d => { d.open = true; });", None),
    ("dark, unfolded", "document.documentElement.dataset.theme = 'dark'; document.documentElement.dataset.mode = 'dark';", None),
    ("dark, folded", "document.querySelectorAll('details').forEach(d => { d.open = false; });", "details > summary"),
]
# No transition half-way between two themes' colours when axe measures a contrast.
STILL = "* { transition: none !important; animation: none !important; }"
SERIOUS = """async ([tags, only]) => {
    const context = only ? {include: [...document.querySelectorAll(only)]} : document;
    if (only && context.include.length === 0) return [];
    const result = await axe.run(context, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
    return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
        .map(v => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map(n => n.target.join(' ')).join('; ')}`);
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_no_page_has_a_serious_accessibility_violation_folded_or_not_light_or_dark(browser, site_url, axe_script, width):
    found = []
    for name in ["index.html", "search.html", *PROSE, *LESSON_PAGES]:
        page, _ = open_page(browser, f"{site_url}/{name}", width=width, height=900 if width > 500 else 844)
        page.add_style_tag(content=STILL)
        page.add_script_tag(content=axe_script)
        for state, change, only in STATES:
            if change:
                page.evaluate(f"() => {{ {change} }}")
            found += [f"{name} at {width}px, {state}: {violation}" for violation in page.evaluate(SERIOUS, [AXE_TAGS, only])]
        page.close()
    assert found == [], "\n".join(found)


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
