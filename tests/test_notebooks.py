"""Every lesson executed top to bottom on a fresh kernel, the way a learner runs it.

Beyond "no cell raised", this checks what a learner relies on: every exercise check
in the solution notebook says Correct, every lesson draws at least one figure, and
the only errors are in cells tagged ``raises-exception``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=lambda path: path.stem)
def executed(request):
    notebook = nbformat.read(request.param, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    started = time.perf_counter()
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(request.param.parent)}}).execute()
    print(f"{request.param.name}: {time.perf_counter() - started:.1f} s")
    return notebook


def outputs(notebook, kind=None):
    for cell in notebook.cells:
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if kind is None or output.output_type == kind:
                    yield cell, output


def test_only_cells_tagged_raises_exception_raise(executed):
    raised = [cell.source[:80] for cell, _ in outputs(executed, "error")
              if "raises-exception" not in cell.metadata.get("tags", [])]
    assert raised == []
    for cell in executed.cells:
        if "raises-exception" in cell.metadata.get("tags", []):
            assert any(o.output_type == "error" for o in cell.outputs), f"tagged cell did not raise: {cell.source}"


def test_every_exercise_check_passes_with_the_solution(executed):
    verdicts = [o["data"]["text/plain"] for _, o in outputs(executed, "execute_result")
                if "text/html" in o.get("data", {}) and "idemlib-feedback" in o["data"]["text/html"]]
    assert verdicts, "a lesson needs at least one exercise check"
    assert all(v.startswith("✓ Correct") for v in verdicts), verdicts


def test_every_lesson_draws_a_figure(executed):
    assert any("image/png" in o.get("data", {}) for _, o in outputs(executed, "display_data"))


def test_no_warnings_reach_the_learner(executed):
    streams = [o.text for _, o in outputs(executed, "stream") if o.name == "stderr"]
    assert streams == []
