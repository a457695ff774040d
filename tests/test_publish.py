"""The static site and the student copies, built from the real lessons."""

from __future__ import annotations

import re

import nbformat
import pytest
from test_notebooks import verdicts

from idemlib.course.lessons import lesson_paths, title_of
from idemlib.course.publish import STUB_NOTE, answer_names, render_site, student_copy

LESSONS = lesson_paths()


@pytest.fixture(scope="module")
def site(tmp_path_factory, executed_lesson):
    out = tmp_path_factory.mktemp("html")
    render_site({path: executed_lesson(path) for path in LESSONS}, out)
    return out


def solutions(path):
    return [c for c in nbformat.read(path, as_version=4).cells if "solution" in c.metadata.get("tags", [])]


def test_the_index_lists_every_lesson_with_one_line_and_a_link(site):
    index = (site / "index.html").read_text()
    for path in LESSONS:
        assert f'href="{path.stem}.html"' in index
        assert re.search(rf'{path.stem}\.html">[^<]+</a>: \w', index)


def test_the_index_renders_markdown_and_numbers_lessons_by_their_own_numbers(site):
    index = (site / "index.html").read_text()
    items = re.findall(r"<li>(.*?)</li>", index)
    assert [re.search(r'">(\d\d) · ', item).group(1) for item in items] == [p.name[:2] for p in LESSONS]
    assert "<ol" not in index, "a numbered list would count 0, 1, 2... past a lesson not yet written"
    text = re.sub(r"<[^>]+>", "", index)
    assert "`" not in text and not re.search(r"(?<!\w)\*\w", text), "raw markdown on the index"
    assert "<code>" in index or "<em>" in index


def test_building_a_lesson_logs_no_kernel_transport_warning(capfd):
    from idemlib.course.publish import execute

    execute(LESSONS[0])
    assert "without encryption" not in capfd.readouterr().err


def test_every_page_links_to_its_neighbours_and_embeds_its_plots(site):
    for number, path in enumerate(LESSONS):
        page = (site / f"{path.stem}.html").read_text()
        assert 'href="index.html"' in page
        if number > 0:
            assert f'href="{LESSONS[number - 1].stem}.html"' in page
        if number + 1 < len(LESSONS):
            assert f'href="{LESSONS[number + 1].stem}.html"' in page
        assert "data:image/png;base64" in page
        assert ".ipynb)" not in page and 'ipynb"' not in page, "lesson links must point at pages"


def test_solutions_are_folded_and_plumbing_shows_output_without_code(site):
    for path in LESSONS:
        page = (site / f"{path.stem}.html").read_text()
        assert page.count('<details class="solution">') == len(solutions(path))
        assert "%matplotlib inline" not in page


def test_dollar_amounts_read_as_dollars_on_the_site(site):
    page = (site / "00_start_here.html").read_text()
    assert "\\$" not in page
    assert "&#36;80" in page or "$80" in page


def test_the_step_through_shows_its_storyboard_on_a_page_without_a_kernel(site):
    page = (site / "01_why_duplicates_arrive.html").read_text()
    assert "idemlib-storyboard" in page
    assert "but it is lost on the way" in page


def test_the_site_needs_no_network(site):
    for page in site.glob("*.html"):
        text = page.read_text()
        assert not re.search(r'<script[^>]+src="https?:', text), page.name
        assert not re.search(r'<link[^>]+href="https?:', text), page.name
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
    assert found and all(v.startswith("✗ Not yet: Not answered yet") for v in found), found


def test_every_figure_has_alt_text_naming_its_lesson_and_section(site):
    page = (site / "02_save_the_id_with_the_work.html").read_text()
    alts = re.findall(r'<img[^>]*\salt="([^"]*)"', page)
    assert alts and all("02 · Save the ID with the work" in alt for alt in alts)
    assert any("3. Why the ID and the charge share one transaction" in alt for alt in alts)
