"""The static site and the student copies, built from the real lessons."""

from __future__ import annotations

import html
import re

import nbformat
import pytest
from test_notebooks import verdicts

from idemlib.course.lessons import ROOT, lesson_paths, title_of
from idemlib.course.publish import STUB_NOTE, answer_names, student_copy

LESSONS = lesson_paths()


def solutions(path):
    return [c for c in nbformat.read(path, as_version=4).cells if "solution" in c.metadata.get("tags", [])]


def test_the_index_lists_every_lesson_with_its_first_goal_and_a_link(site):
    out, _ = site
    index = (out / "index.html").read_text()
    article = index.split('<article class="bd-article"')[1].split("</article>")[0]
    items = re.findall(r"<li><p>(.*?)</p>", article, re.DOTALL)
    assert [re.search(r'href="(\d\d)_\w+\.html"', item).group(1) for item in items] == [p.name[:2] for p in LESSONS]
    assert all(re.search(r"</a>: \w", item) for item in items), "each lesson needs its one-line goal"
    text = re.sub(r"<[^>]+>", "", article)
    assert "`" not in text and not re.search(r"(?<!\w)\*\w", text), "raw markdown on the index"


def test_every_page_has_its_own_title_a_viewport_and_no_warning_in_the_build(site):
    out, warnings = site
    assert warnings == []
    for path in LESSONS:
        page = (out / f"{path.stem}.html").read_text()
        assert f"<title>{html.escape(title_of(nbformat.read(path, as_version=4)))} &#8212; The Idempotent Consumer" in page
        assert '<meta name="viewport" content="width=device-width' in page
    for name in ("index.html", "glossary.html", "teaching.html", "search.html"):
        assert '<meta name="viewport" content="width=device-width' in (out / name).read_text(), name


def test_building_a_lesson_logs_no_kernel_transport_warning(capfd):
    from idemlib.course.publish import execute

    execute(LESSONS[0])
    assert "without encryption" not in capfd.readouterr().err


def test_every_page_links_to_its_neighbours_and_shows_its_plots(site):
    out, _ = site
    for number, path in enumerate(LESSONS):
        page = (out / f"{path.stem}.html").read_text()
        if number > 0:
            assert re.search(rf'class="left-prev"\s+href="{LESSONS[number - 1].stem}.html"', page)
        if number + 1 < len(LESSONS):
            assert re.search(rf'class="right-next"\s+href="{LESSONS[number + 1].stem}.html"', page)
        images = re.findall(r'<img[^>]+src="(_images/[^"]+\.png)"', page)
        assert images and all((out / image).exists() for image in images)
        assert not re.search(r'href="[^"]*\.ipynb', page), "lesson links must point at pages"


def test_solutions_are_folded_with_their_confirmation_and_plumbing_is_folded_too(site):
    out, _ = site
    for path in LESSONS:
        page = (out / f"{path.stem}.html").read_text()
        folds = re.findall(r'<details class="solution">(.*?)</details>', page, re.DOTALL)
        assert len(folds) == len(solutions(path))
        assert all("✓ Correct" in fold for fold in folds), f"{path.name}: a fold lacks its check's confirmation"
        outside = re.sub(r'<details class="solution">.*?</details>', "", page, flags=re.DOTALL)
        assert "✓ Correct" not in outside, f"{path.name}: a confirmation shows outside its fold"
        plumbing = sum("hide-input" in cell.metadata.get("tags", [])
                       for cell in nbformat.read(path, as_version=4).cells)
        assert page.count("tag_hide-input") == plumbing


def test_deliberate_errors_show_one_line_and_no_page_shows_a_local_path(site):
    out, _ = site
    for page in out.glob("*.html"):
        text = page.read_text()
        assert str(ROOT) not in text and "/tmp/" not in text and "site-packages" not in text, page.name
        assert "Traceback" not in text and "most recent call last" not in text, page.name
    for path in LESSONS:
        raising = [cell for cell in nbformat.read(path, as_version=4).cells
                   if "raises-exception" in cell.metadata.get("tags", [])]
        shown = re.findall(r'class="output stderr[^"]*"><div class="highlight"><pre><span></span>(\w+): ',
                           (out / f"{path.stem}.html").read_text())
        assert len(shown) >= len(raising), f"{path.name}: a deliberate error is not shown as its one line"


def test_dollar_amounts_read_as_dollars_on_the_site(site):
    out, _ = site
    page = (out / "00_start_here.html").read_text()
    assert "\\$" not in page and "$80" in page


def test_the_step_through_shows_its_storyboard_on_a_page_without_a_kernel(site):
    out, _ = site
    page = (out / "01_why_duplicates_arrive.html").read_text()
    assert "idemlib-storyboard" in page
    assert "but it is lost on the way" in page
    player = page.split("idemlib-player")[1]
    assert "1042 · $40 · m-7f3" in player and "? · $40" not in player, "the payment row names order 1042"


def test_the_site_needs_no_network(site):
    out, _ = site
    for page in [*out.glob("*.html"), *out.glob("_static/**/*.css")]:
        text = page.read_text()
        assert not re.search(r'<script[^>]+src="https?:', text), page.name
        assert not re.search(r'<link[^>]+href="https?:', text), page.name
        assert not re.search(r"url\(['\"]?https?:", text), page.name
        assert "unpkg.com" not in text and "cdn.jsdelivr" not in text, page.name


def test_a_student_copy_keeps_everything_but_the_solutions():
    for path in LESSONS:
        original = nbformat.read(path, as_version=4)
        copy = student_copy(original)
        assert len(copy.cells) == len(original.cells)
        for position, (before, after) in enumerate(zip(original.cells, copy.cells)):
            if "solution" in before.metadata.get("tags", []):
                names = answer_names(before.source, original.cells[position + 1].source)
                assert names
                assert after.source == "\n".join([STUB_NOTE, *(f"{name} = ..." for name in names)])
                assert "answer" in after.metadata["tags"] and "solution" not in after.metadata["tags"]
                assert before.source not in after.source
            else:
                assert after.source == before.source
        assert title_of(copy) == title_of(original)


def test_the_blank_is_exactly_what_the_check_reads():
    assert answer_names("run = simulate(x)\novercharge = run.total - 1", "check_overcharge(overcharge)") == ["overcharge"]
    assert answer_names("def charge_key(m):\n    return m", "check_key_function(charge_key)") == ["charge_key"]
    assert answer_names('store, crash = "a", "b"', "check_store_window(store, crash)") == ["store", "crash"]


def test_a_solution_that_assigns_nothing_its_check_reads_is_refused():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("check_something(y)"),
    ])
    with pytest.raises(ValueError, match="assigns nothing"):
        student_copy(notebook)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_in_a_student_copy_every_check_says_not_answered_yet(path, executed_student_copy):
    found = verdicts(executed_student_copy(path))
    assert found and all(v.startswith("Not answered yet") for v in found), found


def test_every_figure_has_alt_text_that_says_what_it_shows(site):
    out, _ = site
    for path in LESSONS:
        page = (out / f"{path.stem}.html").read_text()
        alts = [html.unescape(alt) for alt in re.findall(r'<img[^>]*\salt="([^"]*)"', page)]
        # Said from the figure itself (its title states the finding; its axes and key what is drawn), not where it is.
        assert all(not alt.startswith("Figure in") and len(alt) > 20 for alt in alts), (path.name, alts)
    alts = re.findall(r'<img[^>]*\salt="([^"]*)"', (out / "01_why_duplicates_arrive.html").read_text())
    assert any("charged twice" in html.unescape(alt) and " against " in alt for alt in alts), alts


def test_a_figure_is_described_by_its_title_axes_and_key():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from idemlib.pictures.alt_text import describe

    figure, axes = plt.subplots()
    axes.plot([0, 1], [40, 80], label="without an inbox")
    axes.plot([0, 1], [40, 40], label="with an inbox")
    axes.set(title="A lost ack charges \\$40 again", xlabel="ack-loss rate", ylabel="total charged ($)")
    axes.legend()
    figure.suptitle("The inbox keeps the total at $40")
    assert describe(figure) == ("The inbox keeps the total at $40. A lost ack charges $40 again; total charged ($) "
                                "against ack-loss rate; key: without an inbox, with an inbox.")
    plt.close(figure)


def test_no_table_a_reader_sees_shows_pandas_nothing_or_a_facts_key(site):
    from idemlib.facts import load_facts

    out, _ = site
    keys = set(load_facts().index)
    for path in LESSONS:
        page = (out / f"{path.stem}.html").read_text()
        cells = [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", page, re.DOTALL)]
        assert not {"None", "NaN", "nan", "<NA>", "NaT"} & set(cells), path.name
        assert not keys & set(cells), f"{path.name} shows a facts key: {sorted(keys & set(cells))}"


def test_a_second_build_with_nothing_changed_executes_nothing(tmp_path, monkeypatch):
    from idemlib.course import site as site_module

    lesson = [LESSONS[0]]
    first = site_module.build_html(tmp_path / "html", lesson)
    assert (tmp_path / "html" / f"{LESSONS[0].stem}.html").exists()

    def refuse(path):
        raise AssertionError(f"{path.name} was executed again although nothing changed")

    monkeypatch.setattr(site_module, "execute", refuse)
    assert site_module.build_html(tmp_path / "html", lesson) == first
    assert len(list((tmp_path / ".executed").glob("*.ipynb"))) == 1


def test_a_lesson_page_carries_the_launch_buttons_the_teacher_set(tmp_path):
    """Binder and the class's JupyterHub (nbgitpuller), both opening the learner's own copy of the lesson
    (binder/start's ``lessons/``), never the full lesson; the prose pages have none."""
    from urllib.parse import parse_qs, urlsplit

    from idemlib.course.site import Launch, render_site

    path = LESSONS[0]
    launch = Launch(repository="https://github.com/example-org/idempotent-course", binderhub="https://mybinder.org",
                    jupyterhub="https://hub.example.edu/")
    warnings = render_site({path: nbformat.read(path, as_version=4)}, tmp_path / "html", launch=launch)
    assert [w for w in warnings if "xref_missing" not in w] == []  # one lesson alone links to absent neighbours
    page = html.unescape((tmp_path / "html" / f"{path.stem}.html").read_text())
    links = re.findall(r'href="(https://[^"]+)"', page)
    assert (f"https://mybinder.org/v2/gh/example-org/idempotent-course/main?urlpath=lab/tree/lessons/{path.name}"
            in links), links
    [pull] = [link for link in links if link.startswith("https://hub.example.edu/hub/user-redirect/git-pull?")]
    assert parse_qs(urlsplit(pull).query) == {"repo": ["https://github.com/example-org/idempotent-course"],
                                              "branch": ["main"], "urlpath": [f"lab/tree/lessons/{path.name}"]}
    assert "git-pull" not in (tmp_path / "html" / "glossary.html").read_text()


def test_the_launch_buttons_are_set_in_one_table_of_pyproject(tmp_path):
    from idemlib.course.site import Launch, launch_settings

    assert Launch().theme_options() == {}  # nothing to launch without a repository
    assert Launch(repository="https://github.com/o/r").theme_options() == {}
    settings = tmp_path / "pyproject.toml"
    settings.write_text('[tool.idemlib.launch]\nrepository = "https://github.com/o/r"\njupyterhub = "https://hub.x"\n')
    chosen = launch_settings(settings)
    assert chosen == Launch(repository="https://github.com/o/r", jupyterhub="https://hub.x")
    assert chosen.theme_options()["launch_buttons"]["jupyterhub_url"] == "https://hub.x"
    settings.write_text('[tool.idemlib.launch]\nrepositroy = "https://github.com/o/r"\n')
    with pytest.raises(ValueError, match="repositroy"):
        launch_settings(settings)
    assert launch_settings() == Launch(binderhub="https://mybinder.org")  # the course's own: no repository yet
