"""Grading a class: every kind of hand-in gives exactly the row a teacher needs, and none stops the rest.

Most cases run on a two-exercise lesson made for the test (it calls the real
checks, so its runs start fast); one case grades real student copies of lessons 00, 04
and 08 end to end, as ``make student`` then ``make grade`` would. The hostile hand-ins are
in tests/test_grade_hostile.py, the sandbox itself in tests/test_sandbox.py.
"""

from __future__ import annotations

import copy
import csv
import html

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grading_cases import RIGHT, handed_in, swap_answer_and_check, tiny_lesson
from idemlib.course.grade import Grade, grade_folder
from idemlib.course.lessons import LESSONS
from idemlib.course.publish import student_copy


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    lessons, folder = tmp_path_factory.mktemp("lessons"), tmp_path_factory.mktemp("handed_in")
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    cases = {
        "right.ipynb": handed_in(lesson, RIGHT + "  # my answer"),
        "wrong.ipynb": handed_in(lesson, RIGHT.replace('"p-103": 2', '"p-103": 1')),
        "blank.ipynb": handed_in(lesson),
        "syntax.ipynb": handed_in(lesson, "plan = FaultPlan(("),
        "unrelated_error.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.insert(2, new_code_cell("1 / 0"))),
        "loops.ipynb": handed_in(lesson, "while True:\n    pass"),
        "edited.ipynb": handed_in(lesson, 'plan = "whatever"', edit=lambda c: setattr(
            c[4], "source", "check_charges_per_message(FaultPlan(lost_acks=[LostAck(1), LostAck(2)]))")),
        "deleted.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.pop(4)),
        "moved.ipynb": handed_in(lesson, RIGHT, edit=swap_answer_and_check),
        "other.ipynb": new_notebook(cells=[new_markdown_cell("# My holiday notes")]),
        # A fake verdict displayed by a cell of the student's own is not the check's.
        "faked.ipynb": handed_in(lesson, edit=lambda c: c.insert(5, new_code_cell(
            "from IPython.display import display\n"
            "display({'application/vnd.idemlib.verdict+json': {'exercise': 'check_charges_per_message', "
            "'verdict': 'right', 'message': ''}}, raw=True)"))),
        # A check replaced by the student's own function, its cell untouched.
        "rebound.ipynb": handed_in(lesson, edit=lambda c: c.insert(3, new_code_cell(
            "from idemlib.course.exercises.feedback import Feedback\n"
            "def check_charges_per_message(answer):\n    return Feedback(True, 'yes', 'check_charges_per_message')"))),
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
    "right": {"check_charges_per_message": "right", "check_replay_charges_again": "blank"},
    "carol": {"check_charges_per_message": "right", "check_replay_charges_again": "blank"},
    "wrong": {"check_charges_per_message": "wrong", "check_replay_charges_again": "blank"},
    "blank": {"check_charges_per_message": "blank", "check_replay_charges_again": "blank"},
    "syntax": {"check_charges_per_message": "not run", "check_replay_charges_again": "blank"},
    "unrelated_error": {"check_charges_per_message": "right", "check_replay_charges_again": "blank"},
    "loops": {"file": "timed out", "check_charges_per_message": "not run", "check_replay_charges_again": "blank"},
    "edited": {"check_charges_per_message": "check edited", "check_replay_charges_again": "blank"},
    "deleted": {"check_charges_per_message": "check missing", "check_replay_charges_again": "blank"},
    "moved": {"check_charges_per_message": "check moved", "check_replay_charges_again": "blank"},
    "other": {"file": "no lesson"},
    "faked": {"check_charges_per_message": "blank", "check_replay_charges_again": "blank"},
    "rebound": {"check_charges_per_message": "check edited", "check_replay_charges_again": "blank"},
    "essay": {"file": "not a notebook"},
    "broken": {"file": "not a notebook"},
}


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_kind_of_hand_in_gets_the_right_row(graded, student):
    rows, _ = graded
    assert verdicts(rows, student) == EXPECTED[student]


def test_a_wrong_answer_carries_the_hint_the_student_saw(graded):
    rows, _ = graded
    wrong = next(r for r in rows if r.student == "wrong" and r.exercise == "check_charges_per_message")
    assert "after the commit" in wrong.hint


def test_the_csv_and_the_page_hold_every_row(graded):
    rows, out = graded
    with (out / "grades.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(rows) and {r["student"] for r in written} == set(EXPECTED)
    page = (out / "index.html").read_text()
    assert "✓ right" in page and "! check edited" in page and "not a notebook" in page
    totals = page.split("right per exercise")[1]
    # Per exercise, right / graded, in the lesson's order (triple charge, then overcharge).
    assert "<td class='total'>3 / 12</td><td class='total'>0 / 12</td>" in totals
    # The header, a row per student (those whose files could not be graded too), and the totals.
    assert page.count("<tr><th>") == 1 + len(EXPECTED) + 1
    # Each exercise headed with the lesson's own words; a wrong answer's hint written out, not hidden.
    assert "Exercise 1. A triple charge." in page and "Exercise 2. The overcharge." in page
    wrong = next(r for r in rows if r.student == "wrong" and r.exercise == "check_charges_per_message")
    assert f'<span class="hint">{html.escape(wrong.hint)}</span>' in page
    # A note for each hand-in not graded as usual, and none for those that were.
    notes = page.split("Notes on hand-ins not graded as usual")[1]
    assert "<b>loops</b>" in notes and "<b>edited</b>" in notes and "<b>right</b>" not in notes


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


def test_real_student_copies_are_graded_end_to_end_and_an_honest_solution_is_never_tampering(tmp_path):
    """Lesson 00 blank and solved, as ``make student`` then ``make grade`` would; and the lesson's own
    solutions of lessons 04 (its check runs the answer again in a fresh process) and 08 (its check
    runs a server in threads), which the referee must not take for tampering."""
    folder = tmp_path / "in"
    folder.mkdir()
    for stem, blank_too in (("00_start_here", True), ("04_beyond_your_own_database", False),
                            ("08_the_idempotency_key_header", False)):
        lesson = nbformat.read(LESSONS / f"{stem}.ipynb", as_version=4)
        solved = student_copy(lesson, stem)
        for mine, original in zip(solved.cells, lesson.cells):
            if "answer" in mine.metadata.get("tags", []):
                mine.source = original.source
        nbformat.write(solved, folder / f"solved_{stem[:2]}.ipynb")
        if blank_too:
            nbformat.write(student_copy(lesson, stem), folder / f"blank_{stem[:2]}.ipynb")
    rows = grade_folder(folder, tmp_path / "out", progress=False)
    assert {(r.student, r.verdict) for r in rows} == {
        ("blank_00", "blank"), ("solved_00", "right"), ("solved_04", "right"), ("solved_08", "right")}


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


def test_the_referee_runs_the_lesson_cells_an_answer_needs_and_no_other():
    from idemlib.course.rerun import steps_for

    lesson = tiny_lesson()
    lesson.cells[2:2] = [new_code_cell("total = 40"), new_code_cell("plot_something(total)"),
                         new_code_cell("rows = []"), new_code_cell("rows.append(1)")]
    student = student_copy(lesson, "90_tiny")
    next(cell for cell in student.cells if "answer" in cell.metadata.get("tags", [])).source = (
        'plan = FaultPlan(lost_acks=[LostAck(1), LostAck(total // 40 + len(rows))])')
    steps = steps_for(lesson, student)
    assert [(step["kind"], step["source"][:12]) for step in steps] == [
        ("setup", "from idemlib"), ("setup", "total = 40"), ("setup", "rows = []"), ("setup", "rows.append("),
        ("answer", "plan = Fault"), ("check", "check_charge"), ("answer", "# Your answe"), ("check", "check_replay")]


def test_reading_a_hand_in_names_what_changes_the_course_and_notes_what_reaches_past_it():
    from idemlib.course.tamper import findings_in

    assert findings_in("import idemlib.course.exercises.feedback as fb\nfb.Feedback.verdict = 1") == [
        "replaces fb.Feedback.verdict"]
    assert findings_in("from idemlib.course.exercises import lesson_00\nsetattr(lesson_00, 'hint', print)") == [
        "setattr() on lesson_00"]
    assert findings_in('exec("import builtins\\nbuiltins.len = max")') == ["replaces builtins.len (in exec())"]
    assert findings_in("import pandas.errors\npandas.errors.ctypes.memmove(1, 2, 3)") == [
        "uses pandas.errors.ctypes"]
    assert findings_in("exec(text)") == ["exec() of code built as it runs"]
    # An honest answer finds nothing, whatever it imports or computes.
    assert findings_in("import numpy as np\nanswer = sorted({'a': 1}.items())\nresult = np.mean([1, 2])") == []
