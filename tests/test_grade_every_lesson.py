"""Every lesson with exercises, graded as ``make grade`` grades a class: each lesson's solved copy
(its own solutions in the answer cells) is graded right on every exercise, and each student copy
as handed out (``make student``) is graded blank on every exercise.

All 26 hand-ins go through ONE grading run, as a teacher's class would, so the suite pays for
one class's set-up (the sandbox's copy of the course, the checks' stand-ins) and not one per
lesson. A lesson whose checks cannot judge here (a server missing) would say "not judged",
which this test counts as a failure: grading must judge every lesson's solutions.
"""

from __future__ import annotations

import nbformat
import pytest

from idemlib.course.grade import exercises_of, grade_folder
from idemlib.course.lessons import LESSONS, lesson_paths
from idemlib.course.publish import student_copy


def solved_copy(lesson: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """A lesson's student copy with the lesson's own solutions put back into its answer cells."""
    solved = student_copy(lesson, stem)
    for mine, original in zip(solved.cells, lesson.cells, strict=True):
        if "answer" in mine.metadata.get("tags", []):
            mine.source = original.source
    return solved


@pytest.fixture(scope="module")
def class_of_every_lesson(tmp_path_factory):
    """One class: a solved and a blank hand-in of every lesson with exercises, graded in one run."""
    folder, out = tmp_path_factory.mktemp("every_lesson_in"), tmp_path_factory.mktemp("every_lesson_out")
    expected: dict[str, tuple[str, list[str]]] = {}
    for path in lesson_paths(LESSONS):
        lesson = nbformat.read(path, as_version=4)
        names = [exercise.name for exercise in exercises_of(lesson)]
        if not names:
            continue
        number = path.stem[:2]
        nbformat.write(solved_copy(lesson, path.stem), folder / f"solved_{number}.ipynb")
        nbformat.write(student_copy(lesson, path.stem), folder / f"blank_{number}.ipynb")
        expected[f"solved_{number}"] = ("right", names)
        expected[f"blank_{number}"] = ("blank", names)
    # Lesson 05's check draws 300,000 events and calls the answer on all 363,211 copies, twice (the lesson's data and
    # the grader's own): 250 s for that one hand-in at a load of 10 on two cores, near make grade's 300 s a hand-in.
    # The test is about verdicts, not that limit (tests/test_grade.py tests it), so it gives each hand-in 900 s.
    rows = grade_folder(folder, out, progress=False, notebook_seconds=900)
    return expected, rows, out


def test_every_lesson_has_exercises_to_grade(class_of_every_lesson):
    expected, _, _ = class_of_every_lesson
    assert len(expected) == 2 * len(lesson_paths(LESSONS)), sorted(expected)


def test_every_solved_copy_is_right_and_every_student_copy_blank(class_of_every_lesson):
    expected, rows, out = class_of_every_lesson
    got: dict[str, dict[str, str]] = {}
    for row in rows:  # a row without an exercise (timed out, run failed) is a problem of the whole hand-in
        got.setdefault(row.student, {})[row.exercise] = row.verdict
    why = [(row.student, row.exercise, row.verdict, row.hint or row.note) for row in rows
           if row.verdict != expected.get(row.student, ("", []))[0]]
    assert got == {student: {name: verdict for name in names} for student, (verdict, names) in expected.items()}, why
    assert (out / "grades.csv").exists() and (out / "index.html").exists()
