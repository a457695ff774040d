"""Grading a class: every kind of hand-in gives exactly the row a teacher needs, and none stops the rest.

Most cases run on a three-exercise lesson made for the test (its checks, in
tests/grading_checks.py, follow the course's contract: plain data, and a function); one
case grades real student copies of lesson 00 end to end, as ``make student`` then
``make grade`` would. The hostile hand-ins are in tests/test_grade_hostile.py, the
sandbox itself in tests/test_sandbox.py.
"""

from __future__ import annotations

import copy
import csv
import html
import json
import os

import nbformat
import pytest
from grading_cases import KEY_RIGHT, RIGHT, handed_in, swap_answer_and_check, tiny_lesson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from idemlib.course.grade import MAX_BYTES, Grade, grade_folder, plain_text, read_hand_in
from idemlib.course.lessons import LESSONS
from idemlib.course.publish import student_copy

# The tests that read the graded class run on one worker (``--dist loadgroup``, see the Makefile), so the class is
# graded once a run, not once on each worker that draws one of them.
GRADED = pytest.mark.xdist_group("graded")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    lessons, folder = tmp_path_factory.mktemp("lessons"), tmp_path_factory.mktemp("handed_in")
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    cases = {
        "right.ipynb": handed_in(lesson, RIGHT + "  # my answer"),
        "wrong.ipynb": handed_in(lesson, "plan = [1]"),
        "blank.ipynb": handed_in(lesson),
        "syntax.ipynb": handed_in(lesson, "plan = [1, ("),
        "unrelated_error.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.insert(2, new_code_cell("1 / 0"))),
        "loops.ipynb": handed_in(lesson, "while True:\n    pass"),
        "edited.ipynb": handed_in(lesson, 'plan = "whatever"', edit=lambda c: setattr(
            c[4], "source", "check_triple_charge([1, 2])")),
        "deleted.ipynb": handed_in(lesson, RIGHT, edit=lambda c: c.pop(4)),
        "moved.ipynb": handed_in(lesson, RIGHT, edit=swap_answer_and_check),
        "other.ipynb": new_notebook(cells=[new_markdown_cell("# My holiday notes")]),
        # A fake verdict displayed by a cell of the student's own is not the check's.
        "faked.ipynb": handed_in(lesson, edit=lambda c: c.insert(5, new_code_cell(
            "from IPython.display import display\n"
            "display({'application/vnd.idemlib.verdict+json': {'exercise': 'check_triple_charge', "
            "'verdict': 'right', 'message': ''}}, raw=True)"))),
        # A check replaced by the student's own function, its cell untouched.
        "rebound.ipynb": handed_in(lesson, edit=lambda c: c.insert(3, new_code_cell(
            "from idemlib.course.exercises.feedback import Feedback\n"
            "def check_triple_charge(answer):\n    return Feedback(True, 'yes', 'check_triple_charge')"))),
        # A function answer, right on any data; and one right only on the lesson's own messages (it knows
        # their IDs), which the grader's hidden messages find out.
        "key_right.ipynb": handed_in(lesson, edit=lambda c: setattr(c[9], "source", KEY_RIGHT)),
        "key_partial.ipynb": handed_in(lesson, edit=lambda c: setattr(c[9], "source", (
            "from operator import itemgetter\nkey = itemgetter('id')"))),
        "key_learnt_by_heart.ipynb": handed_in(lesson, edit=lambda c: setattr(c[9], "source", (
            f"SEEN = {sorted(m['id'] for m in _public_messages())!r}\n"
            "def key(message):\n    return message['id'] if message['id'] in SEEN else message['amount']"))),
        "key_raises.ipynb": handed_in(lesson, edit=lambda c: setattr(c[9], "source", (
            "def key(message):\n    raise KeyError('no such field')"))),
    }
    for name, notebook in cases.items():
        nbformat.write(notebook, folder / name)
    (folder / "essay.txt").write_text("not a notebook at all")
    (folder / "broken.ipynb").write_text("{ this is not json")
    write_odd_files(folder, lesson)
    # One folder per student works too: carol hands in a right answer inside her own folder.
    (folder / "carol").mkdir()
    nbformat.write(cases["right.ipynb"], folder / "carol" / "lesson.ipynb")
    out = tmp_path_factory.mktemp("grades")
    rows = grade_folder(folder, out, lessons_folder=lessons, cell_seconds=4, notebook_seconds=120, progress=False)
    return rows, out


def write_odd_files(folder, lesson) -> None:
    """Files a student can hand in that are no notebook, or a notebook of odd shape: each must end in its
    own row, and none may stop the rest (the issue's cases: metadata not a dict, a lone surrogate, deep
    nesting, a huge file, a huge number of cells, bytes of no encoding, two files of one stem, a folder of two)."""
    odd = json.loads(nbformat.writes(handed_in(lesson)))
    odd["metadata"] = [1, 2]
    (folder / "metadata_not_a_dict.ipynb").write_text(json.dumps(odd))
    surrogate = json.loads(nbformat.writes(handed_in(lesson, "plan = '\\udcff'")))
    (folder / "lone_surrogate.ipynb").write_text(json.dumps(surrogate))
    (folder / "not_utf8.ipynb").write_bytes(b'{"cells": "\xff\xfe\xfa"}')
    (folder / "deep.ipynb").write_text("[" * 200_000 + "]" * 200_000)
    with (folder / "huge.ipynb").open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: refused by its size, never read
    many = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [], "execution_count": None}]
            * 150_000}
    (folder / "many_cells.ipynb").write_text(json.dumps(many))
    nbformat.write(handed_in(lesson, RIGHT), folder / "s7.ipynb")
    (folder / "s7.json").write_text("{}")
    (folder / "twice").mkdir()
    for name in ("a.ipynb", "b.ipynb"):
        nbformat.write(handed_in(lesson, RIGHT), folder / "twice" / name)
    os.mkfifo(folder / "a_pipe.ipynb")  # reading it would wait forever


ODD = {
    "metadata_not_a_dict": {"check_triple_charge": "blank", "check_overcharge": "blank", "check_message_key": "blank"},
    "lone_surrogate": {"check_triple_charge": "wrong", "check_overcharge": "blank", "check_message_key": "blank"},
    "not_utf8": {"file": "not a notebook"}, "deep": {"file": "not a notebook"}, "huge": {"file": "not a notebook"},
    "many_cells": {"file": "not a notebook"},
    "s7": {"check_triple_charge": "right", "check_overcharge": "blank", "check_message_key": "blank"},
    "s7.json": {"file": "not a notebook"}, "twice": {"file": "more than one hand-in"}, "a_pipe": {"file": "not read"},
}


def _public_messages():
    from grading_checks import _messages

    return _messages(None)


def verdicts(rows: list[Grade], student: str) -> dict[str, str]:
    return {row.exercise or "file": row.verdict for row in rows if row.student == student}


BLANKS = {"check_overcharge": "blank", "check_message_key": "blank"}
EXPECTED = {
    "right": {"check_triple_charge": "right", **BLANKS},
    "carol": {"check_triple_charge": "right", **BLANKS},
    "wrong": {"check_triple_charge": "wrong", **BLANKS},
    "blank": {"check_triple_charge": "blank", **BLANKS},
    "syntax": {"check_triple_charge": "not run", **BLANKS},
    "unrelated_error": {"check_triple_charge": "right", **BLANKS},
    "loops": {"file": "timed out", "check_triple_charge": "not run", **BLANKS},
    # The hand-in's check cells never run: an edited, deleted or moved one changes nothing, and the
    # answer is graded by the lesson's own check with the lesson's own arguments.
    "edited": {"check_triple_charge": "wrong", **BLANKS},
    "deleted": {"check_triple_charge": "right", **BLANKS},
    "moved": {"check_triple_charge": "right", **BLANKS},
    "other": {"file": "no lesson"},
    "faked": {"check_triple_charge": "blank", **BLANKS},
    "rebound": {"check_triple_charge": "blank", **BLANKS},
    "key_right": {"check_triple_charge": "blank", "check_overcharge": "blank", "check_message_key": "right"},
    "key_partial": {"check_triple_charge": "blank", "check_overcharge": "blank", "check_message_key": "right"},
    "key_learnt_by_heart": {"check_triple_charge": "blank", "check_overcharge": "blank",
                            "check_message_key": "wrong"},
    "key_raises": {"check_triple_charge": "blank", "check_overcharge": "blank", "check_message_key": "wrong"},
    "essay.txt": {"file": "not a notebook"},
    "broken": {"file": "not a notebook"},
    **ODD,
}


@GRADED
@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_kind_of_hand_in_gets_the_right_row(graded, student):
    rows, _ = graded
    assert verdicts(rows, student) == EXPECTED[student]


@GRADED
def test_a_wrong_answer_carries_the_hint_the_student_saw(graded):
    rows, _ = graded
    wrong = next(r for r in rows if r.student == "wrong" and r.exercise == "check_triple_charge")
    assert "extra charge" in wrong.hint
    # An error the answer's function raised in its sandbox reaches the check as that error, by name.
    raised = next(r for r in rows if r.student == "key_raises" and r.exercise == "check_message_key")
    assert "KeyError" in raised.hint and "no such field" in raised.hint
    # Right on the lesson's data only: the hint says so.
    learnt = next(r for r in rows if r.student == "key_learnt_by_heart" and r.exercise == "check_message_key")
    assert "other data the grader drew" in learnt.hint


@GRADED
def test_the_csv_and_the_page_hold_every_row(graded):
    rows, out = graded
    with (out / "grades.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(rows) and {r["student"] for r in written} == set(EXPECTED)
    page = (out / "index.html").read_text()
    assert "✓ right" in page and "✗ wrong" in page and "not a notebook" in page
    totals = page.split("right per exercise")[1]
    # Per exercise, right / graded, in the lesson's order (triple charge, overcharge, message key).
    graded_students = [s for s in EXPECTED if "check_triple_charge" in EXPECTED[s]]
    per = [sum(EXPECTED[s][e] == "right" for s in graded_students)
           for e in ("check_triple_charge", "check_overcharge", "check_message_key")]
    assert "".join(f"<td class='total'>{n} / {len(graded_students)}</td>" for n in per) in totals
    # The header, a row per student (those whose files could not be graded too), and the totals.
    assert page.count("<tr><th>") == 1 + len(EXPECTED) + 1
    # Each exercise headed with the lesson's own words; a wrong answer's hint written out, not hidden.
    assert "Exercise 1. A triple charge." in page and html.escape("Exercise 3. A message's key.") in page
    wrong = next(r for r in rows if r.student == "wrong" and r.exercise == "check_triple_charge")
    assert f'<span class="hint">{html.escape(wrong.hint)}</span>' in page
    # A note for each hand-in not graded as usual, and none for those that were.
    notes = page.split("Notes on hand-ins not graded as usual")[1]
    assert "<b>loops</b>" in notes and "<b>syntax</b>" in notes and "<b>right</b>" not in notes


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


def solved_copy(stem: str) -> nbformat.NotebookNode:
    """A lesson's student copy with the lesson's own solutions in its answer cells."""
    lesson = nbformat.read(LESSONS / f"{stem}.ipynb", as_version=4)
    solved = student_copy(lesson, stem)
    for mine, original in zip(solved.cells, lesson.cells):
        if "answer" in mine.metadata.get("tags", []):
            mine.source = original.source
    return solved


def test_real_student_copies_are_graded_end_to_end(tmp_path):
    """Lesson 00 blank and solved, as ``make student`` then ``make grade`` would: its checks, judged by
    the grader's judge on the values the sandbox sends, give the lesson's own solutions right."""
    folder = tmp_path / "in"
    folder.mkdir()
    stem = "00_start_here"
    nbformat.write(solved_copy(stem), folder / "solved_00.ipynb")
    nbformat.write(student_copy(nbformat.read(LESSONS / f"{stem}.ipynb", as_version=4), stem), folder / "blank_00.ipynb")
    rows = grade_folder(folder, tmp_path / "out", progress=False)
    assert {(r.student, r.verdict) for r in rows} == {("blank_00", "blank"), ("solved_00", "right")}


def test_a_function_answer_is_restarted_in_its_own_sandbox_and_graded_right(tmp_path):
    """Lessons 04 and 05 run the answer's function again in a fresh process (a restarted consumer): graded,
    the judge asks the sandbox to do it, since the function and its source never leave the sandbox."""
    folder = tmp_path / "in"
    folder.mkdir()
    for stem in ("04_beyond_your_own_database", "05_choosing_the_id"):
        nbformat.write(solved_copy(stem), folder / f"solved_{stem[:2]}.ipynb")
    rows = grade_folder(folder, tmp_path / "out", progress=False)
    assert rows and all(row.verdict == "right" for row in rows), [(r.student, r.exercise, r.verdict, r.hint) for r in rows]


@GRADED
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


def test_the_referee_runs_the_lesson_cells_an_answer_needs_and_no_other():
    from idemlib.course.rerun import steps_for

    lesson = tiny_lesson()
    lesson.cells[2:2] = [new_code_cell("total = 40"), new_code_cell("plot_something(total)"),
                         new_code_cell("rows = []"), new_code_cell("rows.append(1)")]
    student = student_copy(lesson, "90_tiny")
    next(cell for cell in student.cells if "answer" in cell.metadata.get("tags", [])).source = (
        'plan = [1, total // 40 + len(rows)]')
    steps = steps_for(lesson, student)
    assert [(step["kind"], step["source"][:12]) for step in steps] == [
        ("setup", "from grading"), ("setup", "total = 40"), ("setup", "rows = []"), ("setup", "rows.append("),
        ("answer", "plan = [1, t"), ("check", "check_triple"), ("answer", "# Your answe"), ("check", "check_overch"),
        ("answer", "# Your answe"), ("check", "check_messag")]
    # A check's settings are the lesson's literals, for the judge; only its answer is read in the sandbox.
    assert [step.get("expressions") for step in steps if step["kind"] == "check"] == [["plan"], ["answer"], ["key"]]


def test_a_check_cells_arguments_are_split_into_the_lessons_literals_and_the_answers_values():
    from idemlib.course.rerun import check_call

    positional, keywords, expressions = check_call("check_overcharge(answer, messages=20, rate=0.25)")
    assert positional == [{"answer": 0}] and keywords == {"messages": {"literal": 20}, "rate": {"literal": 0.25}}
    assert expressions == ["answer"]
    assert check_call("check_x(*answers)") is None


def test_a_file_name_cannot_write_into_the_teachers_terminal_or_table(tmp_path, capsys):
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    nbformat.write(tiny_lesson(), lessons / "90_tiny.ipynb")
    forged = "mine\x1b[2K\r\nalice.ipynb: 0 of 2 right; run failed\u202e.ipynb"
    (folder / forged).write_text("not a notebook")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, progress=True)
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\u202e" not in printed
    assert not any(line.startswith("alice") for line in printed.splitlines())
    assert rows[0].student == rows[0].student.strip() and "\n" not in rows[0].file and "\r" not in rows[0].file
    assert "\x1b" not in (tmp_path / "out" / "grades.csv").read_text()


def test_plain_text_keeps_words_and_drops_what_a_terminal_would_obey():
    assert plain_text("a\x1b[31mred\x1b[0m\nline\x07 \udcff \u202eevil") == "a red line \ufffd evil"
    assert plain_text("Ümlaut, 中文, ✓") == "Ümlaut, 中文, ✓"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=2000),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                              lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                                  st.sampled_from(["cells", "metadata", "nbformat", "source", "cell_type", "tags",
                                                   "idemlib", "lesson", "x"]), inner, max_size=5),
                              max_leaves=30).map(lambda value: json.dumps(value).encode())))
def test_any_bytes_read_as_a_notebook_or_a_reason_and_never_an_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "hand_in.ipynb"
    path.write_bytes(data)
    found = read_hand_in(path)
    assert isinstance(found, str) or (isinstance(found["cells"], list) and all(
        cell["kind"] in ("code", "markdown", "raw") and isinstance(cell["source"], str) for cell in found["cells"]))
