"""Every lesson keeps the form a learner relies on (read from the stored notebooks, no kernel needed)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def cells(path):
    return nbformat.read(path, as_version=4).cells


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_opens_with_its_learning_goals(path):
    opening = cells(path)[0]
    assert opening.cell_type == "markdown"
    assert re.search(r"\*\*In this (lesson|notebook) you will\*\*", opening.source)
    assert re.search(r"^# \d\d · ", opening.source, re.MULTILINE), "the title names the lesson's number"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_has_a_solution_cell_then_a_check(path):
    notebook = cells(path)
    starts = [i for i, c in enumerate(notebook) if c.cell_type == "markdown" and c.source.startswith("**Exercise")]
    assert 1 <= len(starts) <= 3
    for i in starts:
        solution, check = notebook[i + 1], notebook[i + 2]
        assert "solution" in solution.metadata.get("tags", [])
        assert re.match(r"check_\w+\(", check.source), f"the cell after the solution must call a check: {check.source}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_draws_a_figure_and_ends_with_a_summary_and_the_way_on(path):
    notebook = cells(path)
    assert any(c.cell_type == "code" and re.search(r"\bplot_\w+\(|plt\.subplots|\.plot\(", c.source) for c in notebook)
    last = notebook[-1]
    assert last.cell_type == "markdown" and last.source.startswith("## Summary")
    following = NOTEBOOKS[NOTEBOOKS.index(path) + 1].name if path != NOTEBOOKS[-1] else None
    if following:
        assert f"({following})" in last.source, f"the summary should link on to {following}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_dollar_amounts_in_prose_are_escaped_so_they_do_not_render_as_math(path):
    # JupyterLab typesets $...$ in rendered markdown as maths, so "$80 for a $40 order" loses its
    # dollars. MathJax honours \$ in the rendered text, and markdown eats one backslash: write \\$.
    for cell in cells(path):
        if cell.cell_type == "markdown":
            stripped = re.sub(r"`[^`]*`", "", cell.source)
            assert not re.search(r"(?<!\\\\)\$\d", stripped), f"write \\\\$ for a dollar amount: {cell.source[:120]}"


@pytest.mark.parametrize("path", NOTEBOOKS[1:], ids=lambda p: p.stem)
def test_a_lesson_opens_with_the_generated_navigation(path):
    from idemlib.course.lessons import nav_line

    opening = cells(path)[0].source
    assert opening.startswith(nav_line(NOTEBOOKS, NOTEBOOKS.index(path)) + "\n\n"), \
        "run `python -m idemlib.course nav` to regenerate the lessons' navigation"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solutions_are_folded_in_the_lesson_a_learner_opens(path):
    unfolded = [cell.source[:60] for cell in cells(path) if "solution" in cell.metadata.get("tags", [])
                and not cell.metadata.get("jupyter", {}).get("source_hidden")]
    assert unfolded == [], "run `python -m idemlib.course nav` to fold the lessons' solutions"


SEED_STILL_SHOWN = {"01"}
"""Lessons whose prose or code still shows the word (``FaultPlan(seed=...)``, "drawn from a seed", "seeded"): each
needs more than a one-line change (its numbers, prose and checks follow the draw). Strict, so a fixed one leaves."""


@pytest.mark.parametrize("path", [
    pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(strict=True, reason="still shows the word")]
                 if path.name[:2] in SEED_STILL_SHOWN else []) for path in NOTEBOOKS])
def test_no_cell_a_learner_sees_names_a_seed(path):
    """A learner reads the prose, every code cell not tagged hide-input and the solutions (folded, but there)."""
    shown = [c.source for c in cells(path) if "hide-input" not in c.metadata.get("tags", [])]
    assert [line for source in shown for line in source.splitlines() if re.search("seed", line, re.IGNORECASE)] == []
