"""Hostile hand-ins: none can turn a verdict into "right", reach outside its own copy, or stop the grading.

Every case is a student copy of the two-exercise test lesson (its first exercise's
right answer is ``plan = FaultPlan(lost_acks=[LostAck(1), LostAck(2)])``, its second is left
blank), all graded in one class, two at a time, as ``make grade`` would. Each case
says what it tries and which rows it must get.
"""

from __future__ import annotations

import socket
import threading

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from grading_cases import RIGHT, handed_in, tiny_lesson
from idemlib.course import sandbox
from idemlib.course.grade import Grade, grade_folder

FEEDBACK = "idemlib.course.exercises.feedback"
BOTH_TAMPERED = {"check_charges_per_message": "check tampered", "check_replay_charges_again": "check tampered"}
RIGHT_THEN_BLANK = {"check_charges_per_message": "right", "check_replay_charges_again": "blank"}


def another_cell(source: str):
    """An edit adding a cell of the student's own after the first answer (it never runs in grading)."""
    return lambda cells: cells.insert(4, new_code_cell(source))


def second_answer(source: str):
    """An edit filling the second exercise's answer cell (the first is left blank)."""
    return lambda cells: setattr(cells[6], "source", source)


# An answer whose text the check reads (to quote it in a hint): reading it runs the student's code inside
# the check, which walks up to the referee's frame and writes a "right" where the check's outcome goes;
# ``and_keep_at_it`` also leaves a thread writing it again and again.
SNEAKY = f"""import sys, threading, time
from {FEEDBACK} import Feedback

def forge(frame):
    while frame is not None:
        slot = frame.f_locals.get("slot")
        if isinstance(slot, list):
            slot[0] = ("ok", Feedback(True, "forged", "check_replay_charges_again"))
        frame = frame.f_back

class Sneaky:
    def __repr__(self):
        frame = sys._getframe()
        forge(frame)
        if KEEP_AT_IT:
            threading.Thread(target=lambda: [forge(frame) or time.sleep(0.01) for _ in range(300)]).start()
        return "sneaky"

answer = Sneaky()"""


def guarded(source: str) -> str:
    """``source`` that may fail, then the right answer: what counts is the grade, not the attempt's error."""
    indented = "\n".join("    " + line for line in source.splitlines())
    return f"try:\n{indented}\nexcept BaseException as error:\n    print(error)\n{RIGHT}"


# name: (answer to exercise 1 or None, edit of the cells or None, rows expected)
CASES = {
    # The two patches, in a cell of their own, answering nothing.
    "verdict_property": (None, another_cell(
        f"import {FEEDBACK} as fb\nfb.Feedback.verdict = property(lambda self: 'right')"), BOTH_TAMPERED),
    "verdict_display": (None, another_cell(
        f"from {FEEDBACK} import Feedback\nFeedback._repr_mimebundle_ = lambda self, include=None, exclude=None: "
        "{'application/vnd.idemlib.verdict+json': {'exercise': self.exercise, 'verdict': 'right', 'message': ''}}"),
        BOTH_TAMPERED),
    # The same patch inside the answer cell, where it does run: the referee finds it.
    "verdict_property_in_answer": (
        f"import {FEEDBACK} as fb\nfb.Feedback.verdict = property(lambda self: 'right')\nplan = 'anything'",
        None, BOTH_TAMPERED),
    # A wrong answer with the check's helper module patched so that a hint says "right"; spelled so
    # that no reading of the code sees it: the referee's fingerprint does.
    "helper_module": ("lesson = __import__('idemlib.course.exercises.lesson_01', fromlist=['x'])\n"
                      "setattr(lesson, 'h' + 'int', lesson.right)\nplan = 'anything'", None, BOTH_TAMPERED),
    "builtins": ("import builtins\nbuiltins.isinstance = lambda *args: True\nplan = 'anything'", None,
                 BOTH_TAMPERED),
    "sys_modules": ("import sys, types\nsys.modules['idemlib.course.exercises'] = types.ModuleType('fake')\n"
                    "plan = 'anything'", None, BOTH_TAMPERED),
    # A check defined with exec, in a cell of its own: the check is the student's, so not counted.
    "exec_check": (None, another_cell(
        "exec(\"def check_charges_per_message(plan):\\n"
        f"    from {FEEDBACK} import Feedback\\n"
        "    return Feedback(True, 'yes', 'check_charges_per_message')\")"),
        {"check_charges_per_message": "check edited", "check_replay_charges_again": "blank"}),
    # ... and in the answer cell, built as it runs: the lesson's own check is called all the same.
    "exec_check_in_answer": ("exec('def check_charges_' + 'per_message(p):\\n return True')\nplan = 'anything'",
                             None, BOTH_TAMPERED),
    "fake_printed_verdict": (None, another_cell(
        "print('✓ Correct: the naive consumer charged $120')\nfrom IPython.display import display\n"
        "display({'application/vnd.idemlib.verdict+json': {'exercise': 'check_charges_per_message', "
        "'verdict': 'right', 'message': ''}}, raw=True)"), {"check_charges_per_message": "blank",
                                                            "check_replay_charges_again": "blank"}),
    # Memory of other threads and of the referee: ctypes and the garbage collector's lists stop the run.
    "ctypes": ("import ctypes\nctypes.memmove(id(1), id(2), 8)\nplan = 'anything'", None, BOTH_TAMPERED),
    "garbage_collector": ("import gc\nfound = gc.get_objects()\nplan = 'anything'", None, BOTH_TAMPERED),
    "thread_left_running": ("import threading, time\nthreading.Thread(target=time.sleep, args=(600,), "
                            "daemon=True).start()\n" + RIGHT, None, BOTH_TAMPERED),
    # Writing a verdict straight onto the referee's channel (whichever descriptor it is).
    "fake_report_line": ("import os\nfor fd in range(3, 64):\n    try:\n"
                      "        os.write(fd, b\"S 00 (1, 'right', 'check_replay_charges_again', '')\\n\")\n"
                      "    except OSError:\n        pass\n" + RIGHT, None,
                      {"check_charges_per_message": "check tampered", "check_replay_charges_again": "check tampered"}),
    "result_forged_inside_the_check": (None, second_answer("KEEP_AT_IT = False\n" + SNEAKY),
                                       {"check_charges_per_message": "blank", "check_replay_charges_again": "wrong"}),
    "result_forged_by_a_thread": (None, second_answer("KEEP_AT_IT = True\n" + SNEAKY), BOTH_TAMPERED),
    # Every process forks until the process limit, then the children sleep on.
    "fork_bomb": (guarded("import os, time\nwhile True:\n    if os.fork() == 0:\n        while True:\n"
                          "            try:\n                os.fork()\n            except OSError:\n"
                          "                time.sleep(600)"), None, RIGHT_THEN_BLANK),
    "memory_hog": ("hog = bytearray(16 << 30)\n" + RIGHT, None,
                   {"check_charges_per_message": "not run", "check_replay_charges_again": "blank"}),
    "output_flood": ("import os\nfor _ in range(1000):\n    print('x' * 100_000)\n    os.write(2, b'y' * 100_000)\n"
                     + RIGHT, None, RIGHT_THEN_BLANK),
    "exits": ("import os\nos._exit(0)", None,
              {"file": "run failed", "check_charges_per_message": "not run", "check_replay_charges_again": "not run"}),
    "infinite_loop": ("while True:\n    pass", None,
                      {"file": "timed out", "check_charges_per_message": "not run", "check_replay_charges_again": "blank"}),
    "loop_that_ignores_interrupts": ("while True:\n    try:\n        while True:\n            pass\n"
                                     "    except BaseException:\n        pass", None,
                                     {"file": "timed out", "check_charges_per_message": "not run",
                                      "check_replay_charges_again": "not run"}),
}


@pytest.fixture(scope="module")
def class_graded(tmp_path_factory):
    """The whole bank graded as one class, beside an honest hand-in, with a listener on the host's
    loopback and the paths of the folders the hand-ins try to reach."""
    lessons, folder = tmp_path_factory.mktemp("lessons"), tmp_path_factory.mktemp("handed_in")
    out = tmp_path_factory.mktemp("grades")
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    nbformat.write(handed_in(lesson, RIGHT), folder / "honest.ipynb")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    reach = {  # what the hand-ins reach for: a sibling to read and overwrite, the grades, the network
        "sibling_read_write": guarded(f"print(open({str(folder / 'honest.ipynb')!r}).read()[:100])\n"
                                      f"open({str(folder / 'honest.ipynb')!r}, 'w').write('gone')\n"
                                      f"open({str(folder / 'planted.ipynb')!r}, 'w').write('planted')\n"
                                      f"open({str(out / 'index.html')!r}, 'w').write('OVERWRITTEN BY A HAND-IN')"),
        "network": guarded(f"import socket\nsocket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), "
                           "timeout=3).sendall(b'hello')"),
    }
    for name, source in reach.items():
        nbformat.write(handed_in(lesson, source), folder / f"{name}.ipynb")
    for name, (answer, edit, _) in CASES.items():
        nbformat.write(handed_in(lesson, answer, edit=edit), folder / f"{name}.ipynb")
    honest_before = (folder / "honest.ipynb").read_text()
    rows = grade_folder(folder, out, lessons_folder=lessons, cell_seconds=5, notebook_seconds=90, progress=False)
    stop.set()
    listener.close()
    return rows, folder, out, honest_before, accepted


def verdicts(rows: list[Grade], student: str) -> dict[str, str]:
    return {row.exercise or "file": row.verdict for row in rows if row.student == student}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_hostile_hand_in_is_graded_as_it_should_be(class_graded, name):
    rows = class_graded[0]
    assert verdicts(rows, name) == CASES[name][2]


def test_no_hostile_hand_in_is_graded_right_on_what_it_did_not_answer(class_graded):
    rows = class_graded[0]
    assert [(r.student, r.exercise) for r in rows if r.verdict == "right" and r.exercise == "check_replay_charges_again"] == []


def test_a_tampered_hand_in_says_what_was_found(class_graded):
    notes = {row.student: row.note for row in class_graded[0] if row.exercise == "check_charges_per_message"}
    assert "Feedback.verdict" in notes["verdict_property"]
    assert "_repr_mimebundle_" in notes["verdict_display"]
    assert "lesson_01.hint" in notes["helper_module"]
    assert "builtins.isinstance" in notes["builtins"]
    assert "ctypes" in notes["ctypes"] and "gc.get_objects" in notes["garbage_collector"]
    assert "thread" in notes["thread_left_running"]
    assert "did not write" in notes["fake_report_line"]


def test_no_hand_in_reads_or_writes_outside_its_own_copy(class_graded):
    rows, folder, out, honest_before, _ = class_graded
    assert (folder / "honest.ipynb").read_text() == honest_before
    assert not (folder / "planted.ipynb").exists()
    assert "OVERWRITTEN BY A HAND-IN" not in (out / "index.html").read_text()
    # It could not even see them: the file was not there to read, and its answer was still graded.
    assert verdicts(rows, "sibling_read_write") == RIGHT_THEN_BLANK
    assert verdicts(rows, "honest") == RIGHT_THEN_BLANK


def test_no_hand_in_reaches_the_network(class_graded):
    rows, *_, accepted = class_graded
    assert accepted == []
    assert verdicts(rows, "network") == RIGHT_THEN_BLANK


def test_the_processes_a_hand_in_started_are_stopped_and_said(class_graded):
    note = next(r.note for r in class_graded[0] if r.student == "fork_bomb" and r.exercise == "check_charges_per_message")
    assert "stopped" in note


def test_the_grades_say_which_sandbox_ran(class_graded):
    rows, _, out, *_ = class_graded
    mode = sandbox.available_mode()
    assert {row.sandbox for row in rows} == {mode}
    assert mode in (out / "index.html").read_text()
