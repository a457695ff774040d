"""Grading a class: every kind of hand-in gives exactly the row a teacher needs, and none stops the rest.

Most cases run on a two-exercise lesson made for the test (it calls the real
checks, so its kernels start fast); one case grades a real student copy of lesson 00
end to end, as ``make student`` then ``make grade`` would.
"""

from __future__ import annotations

import copy
import csv

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from idemlib.course.grade import Grade, grade_folder
from idemlib.course.lessons import LESSONS
from idemlib.course.publish import student_copy

SETUP = "from idemlib.course.exercises import check_running_example, check_overcharge\nfrom idemlib import Message"
RIGHT = 'message = Message.charge("m-7f3", 1042, 40)'


def tiny_lesson() -> nbformat.NotebookNode:
    """A lesson with two exercises, in the course's form (goals, solution cells, checks)."""
    def solution(source: str) -> nbformat.NotebookNode:
        cell = new_code_cell(source)
        cell.metadata["tags"] = ["solution"]
        return cell

    return new_notebook(cells=[
        new_markdown_cell("# 90 · Tiny\n\n**In this lesson you will**\n\n- grade"),
        new_code_cell(SETUP),
        new_markdown_cell("**Exercise 1.** The running example."),
        solution(RIGHT),
        new_code_cell("check_running_example(message)"),
        new_markdown_cell("**Exercise 2.** The overcharge."),
        solution("answer = 0"),
        new_code_cell("check_overcharge(answer, messages=20)"),
        new_markdown_cell("## Summary"),
    ])


def handed_in(lesson: nbformat.NotebookNode, answer: str | None = None, *, edit=None) -> nbformat.NotebookNode:
    """A student copy of ``lesson`` with the first blank filled by ``answer``, then ``edit`` applied to its cells."""
    notebook = student_copy(lesson, "90_tiny")
    if answer is not None:
        notebook.cells[3].source = answer
    if edit:
        edit(notebook.cells)
    return notebook


def swap_answer_and_check(cells):
    cells[3], cells[4] = cells[4], cells[3]


CASES: dict[str, tuple[nbformat.NotebookNode | str, list[tuple[str, str]]]] = {}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    lessons, folder = tmp_path_factory.mktemp("lessons"), tmp_path_factory.mktemp("handed_in")
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    cases = {
        "right.ipynb": handed_in(lesson, RIGHT + "  # my answer"),
        "wrong.ipynb": handed_in(lesson, 'message = Message.charge("m-7f3", 1042, 80)'),
        "blank.ipynb": handed_in(lesson),
        "syntax.ipynb": handed_in(lesson, "message = Message.charge(("),
        "unrelated_error.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.insert(2, new_code_cell("1 / 0"))),
        "loops.ipynb": handed_in(lesson, "while True:\n    pass"),
        "edited.ipynb": handed_in(lesson, 'message = "whatever"', edit=lambda c: setattr(
            c[4], "source", 'check_running_example(Message.charge("m-7f3", 1042, 40))')),
        "deleted.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.pop(4)),
        "moved.ipynb": handed_in(lesson, RIGHT, edit=swap_answer_and_check),
        "other.ipynb": new_notebook(cells=[new_markdown_cell("# My holiday notes")]),
        # A fake verdict displayed by a cell of the student's own is not the check's.
        "faked.ipynb": handed_in(lesson, edit=lambda c: c.insert(5, new_code_cell(
            "from IPython.display import display\n"
            "display({'application/vnd.idemlib.verdict+json': {'exercise': 'check_running_example', "
            "'verdict': 'right', 'message': ''}}, raw=True)"))),
        # A check replaced by the student's own function, its cell untouched.
        "rebound.ipynb": handed_in(lesson, edit=lambda c: c.insert(3, new_code_cell(
            "from idemlib.course.exercises.feedback import Feedback\n"
            "def check_running_example(answer):\n    return Feedback(True, 'yes', 'check_running_example')"))),
    }
    for name, notebook in cases.items():
        nbformat.write(notebook, folder / name)
    (folder / "essay.txt").write_text("not a notebook at all")
    (folder / "broken.ipynb").write_text("{ this is not json")
    # One folder per student works too: carol hands in a right answer inside her own folder.
    (folder / "carol").mkdir()
    nbformat.write(cases["right.ipynb"], folder / "carol" / "lesson.ipynb")
    out = tmp_path_factory.mktemp("grades")
    rows = grade_folder(folder, out, lessons_folder=lessons, cell_seconds=4, notebook_seconds=120, progress=False)
    return rows, out


def verdicts(rows: list[Grade], student: str) -> dict[str, str]:
    return {row.exercise or "file": row.verdict for row in rows if row.student == student}


EXPECTED = {
    "right": {"check_running_example": "right", "check_overcharge": "blank"},
    "carol": {"check_running_example": "right", "check_overcharge": "blank"},
    "wrong": {"check_running_example": "wrong", "check_overcharge": "blank"},
    "blank": {"check_running_example": "blank", "check_overcharge": "blank"},
    "syntax": {"check_running_example": "not run", "check_overcharge": "blank"},
    "unrelated_error": {"check_running_example": "right", "check_overcharge": "blank"},
    "loops": {"file": "timed out", "check_running_example": "not run", "check_overcharge": "blank"},
    "edited": {"check_running_example": "check edited", "check_overcharge": "blank"},
    "deleted": {"check_running_example": "check missing", "check_overcharge": "blank"},
    "moved": {"check_running_example": "check moved", "check_overcharge": "blank"},
    "other": {"file": "no lesson"},
    "faked": {"check_running_example": "blank", "check_overcharge": "blank"},
    "rebound": {"check_running_example": "check edited", "check_overcharge": "blank"},
    "essay": {"file": "not a notebook"},
    "broken": {"file": "not a notebook"},
}


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_kind_of_hand_in_gets_the_right_row(graded, student):
    rows, _ = graded
    assert verdicts(rows, student) == EXPECTED[student]


def test_a_wrong_answer_carries_the_hint_the_student_saw(graded):
    rows, _ = graded
    wrong = next(r for r in rows if r.student == "wrong" and r.exercise == "check_running_example")
    assert "amount" in wrong.hint


def test_the_csv_and_the_page_hold_every_row(graded):
    rows, out = graded
    with (out / "grades.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(rows) and {r["student"] for r in written} == set(EXPECTED)
    page = (out / "index.html").read_text()
    assert "✓ right" in page and "! check edited" in page and "not a notebook" in page
    totals = page.split("right per exercise")[1]
    # Per exercise, right / graded, in column order (lesson 90: overcharge, then running example).
    assert "<td class='total'>0 / 12</td><td class='total'>3 / 12</td>" in totals
    # The header, a row per student (those whose files could not be graded too), and the totals.
    assert page.count("<tr><th>") == 1 + len(EXPECTED) + 1


def test_a_notebook_of_another_lesson_is_reported_when_one_lesson_is_assigned(tmp_path):
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    nbformat.write(tiny_lesson(), lessons / "90_tiny.ipynb")
    other = copy.deepcopy(tiny_lesson())
    other.cells[0].source = other.cells[0].source.replace("90 · Tiny", "91 · Other")
    nbformat.write(other, lessons / "91_other.ipynb")
    folder = tmp_path / "in"
    folder.mkdir()
    nbformat.write(student_copy(other, "91_other"), folder / "dave.ipynb")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, expected_lesson="90", progress=False)
    assert [(r.student, r.verdict) for r in rows] == [("dave", "wrong lesson")]


def test_a_notebook_over_its_time_limit_is_stopped_and_reported(tmp_path):
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    nbformat.write(tiny_lesson(), lessons / "90_tiny.ipynb")
    nbformat.write(handed_in(tiny_lesson(), "import time\ntime.sleep(60)"), folder / "slow.ipynb")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, cell_seconds=60, notebook_seconds=8,
                        progress=False)
    assert ("file", "timed out") in [(r.exercise or "file", r.verdict) for r in rows]


def test_a_real_student_copy_of_lesson_00_is_graded_end_to_end(tmp_path):
    lesson = nbformat.read(LESSONS / "00_start_here.ipynb", as_version=4)
    copy_ = student_copy(lesson, "00_start_here")
    solved = student_copy(lesson, "00_start_here")
    for mine, original in zip(solved.cells, lesson.cells):
        if "answer" in mine.metadata.get("tags", []):
            mine.source = original.source
    folder = tmp_path / "in"
    folder.mkdir()
    nbformat.write(copy_, folder / "erin.ipynb")
    nbformat.write(solved, folder / "frank.ipynb")
    rows = grade_folder(folder, tmp_path / "out", progress=False)
    assert {(r.student, r.verdict) for r in rows} == {("erin", "blank"), ("frank", "right")}


def test_the_grade_page_opens_in_a_browser_without_errors(graded, browser):
    _, out = graded
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto((out / "index.html").as_uri())
    assert page.locator("table tr").count() == 1 + len(EXPECTED) + 1
    assert page.locator("td.right").count() >= 3
    assert errors == []
    page.close()


def test_no_lesson_binds_a_check_name_itself_so_no_honest_copy_is_flagged():
    from idemlib.course.grade import rebound_checks
    from idemlib.course.lessons import lesson_paths

    assert {path.stem: rebound_checks(nbformat.read(path, as_version=4)) for path in lesson_paths()} == {
        path.stem: set() for path in lesson_paths()}


@pytest.mark.parametrize("patch", [
    "import idemlib.course.exercises.lesson_09 as m\nm.RECOVERY_LIMIT = float('inf')",
    "from idemlib.course.exercises import lesson_09\nlesson_09.WORK_LENGTHS = (12.0,)",
    "from idemlib.course.exercises import lesson_09\nsetattr(lesson_09, 'RECOVERY_LIMIT', 1e9)",
    "import idemlib\nidemlib.course.exercises.lesson_09.RECOVERY_LIMIT += 1e9",
    "from idemlib.course.exercises import lesson_09\nvars(lesson_09)['RECOVERY_LIMIT'] = 1e9",
    "from idemlib.course.exercises import lesson_09\nlesson_09.__dict__['RECOVERY_LIMIT'] = 1e9",
])
def test_a_submission_that_patches_the_course_code_has_every_check_marked_edited(patch):
    """Lesson 09's check passes a 3600 s lease once its 300 s limit is patched to infinity, its cell untouched."""
    from idemlib.course.grade import audit_checks, exercises_of, patched_course_code

    lesson = tiny_lesson()
    submission = handed_in(lesson, RIGHT, edit=lambda c: c.insert(3, new_code_cell(patch)))
    assert patched_course_code(submission)
    assert audit_checks(submission, exercises_of(lesson)) == {
        "check_running_example": "check edited", "check_overcharge": "check edited"}


def test_reading_the_course_code_is_not_patching_it_and_no_lesson_patches_it():
    from idemlib.course.grade import patched_course_code
    from idemlib.course.lessons import lesson_paths

    reading = handed_in(tiny_lesson(), RIGHT, edit=lambda c: c.insert(3, new_code_cell(
        "from idemlib.course.exercises import lesson_09 as exercise_09\nprint(exercise_09.RECOVERY_LIMIT)\n"
        "limits = {}\nlimits['recovery'] = exercise_09.RECOVERY_LIMIT")))
    assert patched_course_code(reading) == []
    assert {path.stem: patched_course_code(nbformat.read(path, as_version=4)) for path in lesson_paths()} == {
        path.stem: [] for path in lesson_paths()}
