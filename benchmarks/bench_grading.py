"""How long ``make grade`` takes for a class: 30 hand-ins of lesson 02, graded two at a time.

A third of the class answers both exercises right (the lesson's own solutions), a third
answers wrong, a third hands in the blank copy. Prints the wall time, the sandbox that
ran, and the machine's load before and after (on a shared machine the time depends on it).

    .venv/bin/python benchmarks/bench_grading.py [HAND_INS]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from idemlib.course.grade import grade_folder
from idemlib.course.lessons import LESSONS
from idemlib.course.publish import student_copy

LESSON = "02_save_the_id_with_the_work"
WRONG = {0: 'inbox_insert = "INSERT INTO processed_messages (message_id) VALUES (?)"',
         1: 'early_ack_column = {step: "charged once" for step in ("no fault", "crash before begin", '
            '"crash before charge", "crash before ack", "crash before commit", "ack lost")}'}


def class_of(count: int, folder: Path) -> None:
    """``count`` hand-ins: right, wrong and blank in turn."""
    lesson = nbformat.read(LESSONS / f"{LESSON}.ipynb", as_version=4)
    solutions = [cell.source for cell in lesson.cells if "solution" in cell.metadata.get("tags", [])]
    for number in range(count):
        copy = student_copy(lesson, LESSON)
        answers = [cell for cell in copy.cells if "answer" in cell.metadata.get("tags", [])]
        for index, cell in enumerate(answers):
            if number % 3 == 0:
                cell.source = solutions[index]
            elif number % 3 == 1:
                cell.source = WRONG.get(index, cell.source)
        nbformat.write(copy, folder / f"student_{number:02d}.ipynb")


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory() as scratch:
        folder, out = Path(scratch) / "handed_in", Path(scratch) / "grades"
        folder.mkdir()
        class_of(count, folder)
        before = os.getloadavg()[0]
        started = time.perf_counter()
        rows = grade_folder(folder, out, progress=False)
        took = time.perf_counter() - started
        after = os.getloadavg()[0]
    verdicts = sorted({row.verdict for row in rows})
    print(f"{count} hand-ins of lesson {LESSON[:2]} graded in {took:.0f} s on {os.cpu_count()} cores "
          f"({took / count:.1f} s each; sandbox: {rows[0].sandbox}); load average {before:.1f} before, "
          f"{after:.1f} after; verdicts seen: {', '.join(verdicts)}")


if __name__ == "__main__":
    main()
