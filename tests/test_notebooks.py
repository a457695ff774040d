"""Every lesson executed top to bottom on a fresh kernel, the way a learner runs it.

Beyond "no cell raised", this checks what a learner relies on: every exercise check
in the solution notebook says Correct, every lesson draws at least one figure, and
the only errors are in cells tagged ``raises-exception``.
"""

from __future__ import annotations

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
