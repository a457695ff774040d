"""Restart & Run All twice gives the same numbers: every lesson, executed a second time, says the same.

The second run is the lesson's student copy, which the suite executes anyway: every
cell but the exercises' own (the answer and its check) is the lesson's, in a fresh
kernel of its own, so it must print what the first run printed. The only other
exceptions are cells tagged ``varies``, which measure wall-clock time or a server's on-disk sizes and say so in
the lesson. Loopback ports and object addresses are masked.
"""

from __future__ import annotations

import re

import pytest

from idemlib.course.lessons import lesson_paths


def exercise_cells(notebook) -> set[int]:
    """The positions of each solution (or answer) cell and of the check right after it."""
    answers = {i for i, cell in enumerate(notebook.cells) if {"solution", "answer"} & set(cell.metadata.get("tags", []))}
    return answers | {i + 1 for i in answers}


def text_outputs(notebook):
    found = []
    skipped = exercise_cells(notebook)
    for number, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or "varies" in cell.metadata.get("tags", []) or number in skipped:
            continue
        previous = None
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            text = re.sub(r"127\.0\.0\.1:\d+|port \d+|at 0x[0-9a-f]+", "<address>", text)
            stream = output.get("name") if output.get("output_type") == "stream" else None
            if stream is not None and stream == previous:
                # A busy kernel may flush one print in several pieces: they are one output.
                found[-1] = (number, found[-1][1] + text)
            else:
                found.append((number, text))
            previous = stream
    return found


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_a_second_run_of_a_lesson_prints_the_same_numbers(path, executed_lesson, executed_student_copy):
    first, second = text_outputs(executed_lesson(path)), text_outputs(executed_student_copy(path))
    assert first == second
