"""Every lesson executed top to bottom on a fresh kernel, the way a learner runs it.

Beyond "no cell raised", this checks what a learner relies on: every exercise check
in the solution notebook says Correct, every lesson draws at least one figure, and
the only errors are in cells tagged ``raises-exception``.
"""

from __future__ import annotations

import re

import pytest

from idemlib.course.lessons import lesson_paths


@pytest.fixture(params=lesson_paths(), ids=lambda path: path.stem)
def executed(request, executed_lesson):
    return executed_lesson(request.param)


def outputs(notebook, kind=None):
    for cell in notebook.cells:
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if kind is None or output.output_type == kind:
                    yield cell, output


def verdicts(notebook):
    return [o["data"]["text/plain"] for _, o in outputs(notebook, "execute_result")
            if "idemlib-feedback" in o.get("data", {}).get("text/html", "")]


def test_only_cells_tagged_raises_exception_raise(executed):
    raised = [cell.source[:80] for cell, _ in outputs(executed, "error")
              if "raises-exception" not in cell.metadata.get("tags", [])]
    assert raised == []
    for cell in executed.cells:
        if "raises-exception" in cell.metadata.get("tags", []):
            assert any(o.output_type == "error" for o in cell.outputs), f"tagged cell did not raise: {cell.source}"


def test_every_exercise_check_passes_with_the_solution(executed):
    found = verdicts(executed)
    assert found, "a lesson needs at least one exercise check"
    assert all(v.startswith("✓ Correct") for v in found), found


def test_every_lesson_draws_a_figure(executed):
    assert any("image/png" in o.get("data", {}) for _, o in outputs(executed, "display_data"))


def test_no_warnings_reach_the_learner(executed):
    streams = [o.text for _, o in outputs(executed, "stream") if o.name == "stderr"]
    assert streams == []


NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A figure in the prose: a number with a unit. Ratios without a unit are written from the cell that computes them.
FIGURE = re.compile(
    rf"(?<![\w.])(\$\s?)?({NUMBER})(?:\s?(?:-|–|to)\s?\$?({NUMBER}))?\s?"
    r"(%|×|x\b|ms\b|s\b|µs\b|seconds?\b|minutes?\b|min\b|hours?\b|h\b|days?\b|times\b|rows/s\b|messages/s\b"
    r"|per cent\b|KiB\b|MiB\b|GiB\b)?",
)
_CODE = re.compile(r"`[^`]*`|\]\([^)]*\)|<[^>]+>|\$\$.*?\$\$", re.DOTALL)


def prose_figures(markdown: str) -> list[str]:
    """The figures of a markdown cell (``$80``, ``43 s``, ``2.5 to 4.3 times``), outside code, links and tags."""
    found = []
    for match in FIGURE.finditer(_CODE.sub(" ", markdown)):
        dollar, first, second, unit = match.groups()
        if dollar or unit:
            found += [number for number in (first, second) if number]
    return found


def number_key(text: str) -> str:
    value = float(text.lstrip("$").replace(",", ""))
    return f"{value:g}"


def shown_numbers(notebook) -> set[str]:
    """Every number any output of the lesson shows, in the same form ``number_key`` gives."""
    texts = []
    for _, output in outputs(notebook):
        texts.append(output.get("text", ""))
        data = output.get("data", {})
        texts += [data.get(kind, "") for kind in ("text/plain", "text/html", "text/markdown", "image/svg+xml")]
    numbers = re.findall(NUMBER, " ".join(t if isinstance(t, str) else "".join(t) for t in texts))
    return {number_key(n) for n in numbers}


def fact_numbers() -> set[str]:
    from idemlib.facts import load_facts

    values = load_facts()["value"].dropna()
    return {number_key(v) for v in values if re.fullmatch(NUMBER, str(v))}


def test_prose_figures_are_shown_by_a_cell_or_held_by_a_fact(executed):
    known = shown_numbers(executed) | fact_numbers()
    missing = sorted({figure for cell in executed.cells if cell.cell_type == "markdown"
                      for figure in prose_figures(cell.source) if number_key(figure) not in known})
    assert missing == [], f"figures in the prose that no output of the lesson shows and no row of data/facts.csv holds: {missing}"


def test_the_figure_finder_reads_units_ranges_and_dollars():
    assert prose_figures("charged $80, a 43 s handler, 2.5 to 4.3 times, 180-420 ms, 20 %") == \
        ["80", "43", "2.5", "4.3", "180", "420", "20"]
    assert prose_figures("lesson 07, step 3, `EX 30` and [RFC 9110](https://x/9110)") == []
