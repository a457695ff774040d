"""Hostile hand-ins: none can turn a verdict into "right", reach outside its own copy, or stop the grading.

Every case is a student copy of the two-exercise test lesson (its first exercise's
right answer is ``plan = FaultPlan(lost_acks=[LostAck(1), LostAck(2)])``, its second is left
blank), all graded in one class, two at a time, as ``make grade`` would. Each case
says what it tries and which rows it must get.
"""

from __future__ import annotations

import csv
import html
import os
import socket
import threading

import nbformat
import pytest
from grading_cases import KEY_RIGHT, RIGHT, handed_in, tiny_lesson
from nbformat.v4 import new_code_cell

from idemlib.course import sandbox
from idemlib.course.grade import Grade, grade_folder

# Every test here reads the one graded class: they run on one worker (``--dist loadgroup``, see the Makefile), so
# the class is graded once a run.
pytestmark = pytest.mark.xdist_group("hostile")

FEEDBACK = "idemlib.course.exercises.feedback"
BLANK = {"check_triple_charge": "blank", "check_overcharge": "blank", "check_message_key": "blank"}
WRONG_THEN_BLANK = {**BLANK, "check_triple_charge": "wrong"}
RIGHT_THEN_BLANK = {**BLANK, "check_triple_charge": "right"}
NOT_RUN = {"check_triple_charge": "not run", "check_overcharge": "not run", "check_message_key": "not run"}


def another_cell(source: str):
    """An edit adding a cell of the student's own after the first answer (it never runs in grading)."""
    return lambda cells: cells.insert(4, new_code_cell(source))


def second_answer(source: str):
    """An edit filling the second exercise's answer cell (the first is left blank)."""
    return lambda cells: setattr(cells[6], "source", source)


def guarded(source: str) -> str:
    """``source`` that may fail, then the right answer: what counts is the grade, not the attempt's error."""
    indented = "\n".join("    " + line for line in source.splitlines())
    return f"try:\n{indented}\nexcept BaseException as error:\n    print(error)\n{RIGHT}"


# Lines a hand-in writes on every descriptor it has, hoping one is the judge's or the grader's: a verdict,
# a referee's record, a reply to a call, a line signed as the old referee signed them. (An answer's values
# it could forge too: they would be its answer, as if its cell had computed them.)
FORGED = ('[b\'{"exercise": "check_overcharge", "verdict": "right", "message": ""}\\n\', '
          'b\'{"done": true}\\n\', '
          'b\'{"result": 5}\\n\', b"S 00 (1, \'right\', \'check_overcharge\', \'\')\\n"]')
FORGE = f"""import os
for fd in range(0, 64):
    for line in {FORGED}:
        try:
            os.write(fd, line)
        except OSError:
            pass
"""
# The answer code of a finalizer: it runs after the answer cell, when the object is collected (or at exit).
FINALIZER = f"""class Later:
    def __del__(self):
{chr(10).join('        ' + line for line in FORGE.splitlines())}
        import builtins
        builtins.isinstance = lambda *args: True
"""

# name: (answer to exercise 1 or None, edit of the cells or None, rows expected)
CASES = {
    # Patches of the course, of builtins and of sys.modules: they change the hand-in's own interpreter only.
    "verdict_property": (None, another_cell(
        f"import {FEEDBACK} as fb\nfb.Feedback.verdict = property(lambda self: 'right')"), BLANK),
    "verdict_property_in_answer": (
        f"import {FEEDBACK} as fb\nfb.Feedback.verdict = property(lambda self: 'right')\nplan = 'anything'",
        None, WRONG_THEN_BLANK),
    # (Patching builtins breaks the hand-in's own run: whatever its rows, none is right.)
    "builtins": ("import builtins\nbuiltins.isinstance = lambda *args: True\nbuiltins.len = lambda x: 3\n"
                 "plan = 'anything'", None, None),
    "sys_modules": ("import sys, types\nsys.modules['idemlib.course.exercises'] = types.ModuleType('fake')\n"
                    "plan = 'anything'", None, WRONG_THEN_BLANK),
    # A patch made by a thread just around where a check would run, then undone.
    "patch_undone": ("import threading, time, builtins\nsaved = builtins.isinstance\n"
                     "def flip():\n    builtins.isinstance = lambda *a: True\n    time.sleep(2)\n"
                     "    builtins.isinstance = saved\nthreading.Thread(target=flip).start()\nplan = 'anything'",
                     None, None),
    "exec_check_in_answer": ("exec('def check_triple_' + 'charge(p):\\n return True')\nplan = 'anything'",
                             None, WRONG_THEN_BLANK),
    "fake_printed_verdict": (None, another_cell(
        "print('✓ Correct: the naive consumer charged $120')\nfrom IPython.display import display\n"
        "display({'application/vnd.idemlib.verdict+json': {'exercise': 'check_triple_charge', "
        "'verdict': 'right', 'message': ''}}, raw=True)"), BLANK),
    # Raw memory and the garbage collector's lists: the hand-in's own process, nothing of the judge's.
    "ctypes": ("import ctypes\nctypes.memmove(id(1) + 24, id(2) + 24, 8)\nplan = 'anything'", None, None),
    "garbage_collector": ("import gc\nfor thing in gc.get_objects():\n    pass\nplan = 'anything'", None,
                          WRONG_THEN_BLANK),
    "thread_left_running": ("import threading, time\nthreading.Thread(target=time.sleep, args=(600,), "
                            "daemon=True).start()\n" + RIGHT, None, RIGHT_THEN_BLANK),
    # Forged lines on every descriptor, from the answer, from a thread, and from finalizers (an object left
    # in a variable, collected when the run ends; one at the thread's exit).
    "forged_lines": (FORGE + RIGHT, None, RIGHT_THEN_BLANK),
    "forged_by_a_thread": ("import threading\ndef forge():\n" + "\n".join("    " + line for line in FORGE.splitlines())
                           + "\nthreading.Thread(target=forge).start()\nplan = 'anything'", None, None),
    "finalizer_in_a_variable": (FINALIZER + "kept = Later()\nplan = 'anything'", None, None),
    "finalizer_at_exit": (FINALIZER + "import atexit\natexit.register(Later().__del__)\nplan = 'anything'", None,
                          None),
    # The check's own helpers, called to work the expected answer out (an oracle), and the checks' files.
    "oracle": (None, lambda cells: setattr(cells[9], "source", (
        "from grading_checks import _messages\nkey = lambda message: message['id']")), None),
    "oracle_course": ("from idemlib.course.exercises.lesson_01 import check_triple_charge as real\n"
                      "plan = 'anything'", None, None),
    "checks_file_read": (guarded("import idemlib, pathlib\n"
                                 "root = pathlib.Path(idemlib.__file__).parent / 'course' / 'exercises'\n"
                                 "print(sorted(p.name for p in root.iterdir()))\n"
                                 "assert not (root / 'lesson_01.py').exists()"), None, RIGHT_THEN_BLANK),
    # A function answer that, called by the check, answers with a value of a kind that cannot be carried.
    "function_returns_an_object": (None, lambda cells: setattr(cells[9], "source", (
        "class Anything:\n    def __eq__(self, other):\n        return True\n    def __hash__(self):\n"
        "        return 1\nkey = lambda message: Anything()")), {**BLANK, "check_message_key": "wrong"}),
    # An object that remembers a fresh UUID per message and answers the check's batched calls and its restart from
    # methods named like the grader's own (call_each, in_fresh_process): its memory came back as a restart's keys.
    "replays_its_memory": (None, lambda cells: setattr(cells[9], "source", (
        "import uuid\nclass Replayed:\n    def __init__(self):\n        self.memo = {}\n"
        "    def __call__(self, message):\n        return self.memo.setdefault(message['id'], str(uuid.uuid4()))\n"
        "    def call_each(self, arguments):\n        return [self(*args) for args in arguments]\n"
        "    def in_fresh_process(self, arguments, machine, seed):\n        return [self(*args) for args in arguments]\n"
        "key = Replayed()")), {**BLANK, "check_message_key": "wrong"}),
    # Every process forks until the process limit, then the children sleep on.
    "fork_bomb": (guarded("import os, time\nwhile True:\n    if os.fork() == 0:\n        while True:\n"
                          "            try:\n                os.fork()\n            except OSError:\n"
                          "                time.sleep(600)"), None, RIGHT_THEN_BLANK),
    "memory_hog": ("hog = bytearray(16 << 30)\n" + RIGHT, None, {**BLANK, "check_triple_charge": "not run"}),
    "shared_memory_filled": (guarded("with open('/dev/shm/fill', 'wb') as f:\n    for _ in range(4096):\n"
                                     "        f.write(b'x' * (1 << 20))"), None, RIGHT_THEN_BLANK),
    "output_flood": ("import os\nfor _ in range(1000):\n    print('x' * 100_000)\n    os.write(2, b'y' * 100_000)\n"
                     + RIGHT, None, RIGHT_THEN_BLANK),
    "exits": ("import os\nos._exit(0)", None, {"file": "run failed", **NOT_RUN}),
    "infinite_loop": ("while True:\n    pass", None, {"file": "timed out", **BLANK, "check_triple_charge": "not run"}),
    "loop_that_ignores_interrupts": ("while True:\n    try:\n        while True:\n            pass\n"
                                     "    except BaseException:\n        pass", None,
                                     {"file": "timed out", **NOT_RUN}),
    # Text that would break a table or a terminal: a lone surrogate and escapes in an error, deep nesting.
    "odd_text_in_an_error": ("raise ValueError('\\udcff \\x1b[2J\\nforged: 2 of 2 right ✓')", None,
                             {**BLANK, "check_triple_charge": "not run"}),
    "deep_nesting": ("plan = " + "[" * 5000 + "]" * 5000, None, {**BLANK, "check_triple_charge": "not run"}),
}
# Cases that race the cell's time limit where nothing but the machine's load bounds them (no root, no control
# group): "timed out" is then as right an outcome as the one expected (issue 40: "stopped at the process limit"
# or "timed out", said plainly). The flood prints 200 MB under a 5 s cell limit.
RACES_THE_CLOCK = {"fork_bomb", "output_flood"}
TIMED_OUT = ({"file": "timed out", **NOT_RUN}, {"file": "timed out", **BLANK, "check_triple_charge": "not run"})
# Where the outcome may be any verdict but right (the process may crash, or carry on with a wrong answer).
NEVER_RIGHT = {name for name, (_, _, expected) in CASES.items() if expected is None}


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
    # A classmate's file, and a file only the teacher may read, handed in as links.
    secret = tmp_path_factory.mktemp("teacher") / "secret.txt"
    secret.write_text("THE TEACHER'S SECRET")
    secret.chmod(0o600)
    (folder / "link_to_a_classmate.ipynb").symlink_to(folder / "honest.ipynb")
    (folder / "link_to_a_secret.ipynb").symlink_to(secret)
    honest_before = (folder / "honest.ipynb").read_text()
    rows = grade_folder(folder, out, lessons_folder=lessons, cell_seconds=5, notebook_seconds=90, progress=False)
    stop.set()
    listener.close()
    return rows, folder, out, honest_before, accepted


def verdicts(rows: list[Grade], student: str) -> dict[str, str]:
    return {row.exercise or "file": row.verdict for row in rows if row.student == student}


ROOT_OR_CGROUP = sandbox.budget_kind() != "per process" or os.geteuid() == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_hostile_hand_in_is_graded_as_it_should_be(class_graded, name):
    rows = class_graded[0]
    expected = CASES[name][2]
    if name in NEVER_RIGHT:
        assert [r.exercise for r in rows if r.student == name and r.verdict == "right"] == []
    elif name in RACES_THE_CLOCK and not ROOT_OR_CGROUP:
        # Without root the process limit counts the teacher's other programs too, and the sandbox has no CPU of
        # its own: the bomb may be stopped at the process limit, the flood may finish, or either may run into the
        # time limit on a busy machine. Either way a row of its own, and never a "right" it did not answer.
        assert verdicts(rows, name) in (expected, *TIMED_OUT)
    else:
        assert verdicts(rows, name) == expected


def test_no_hostile_hand_in_is_graded_right_on_what_it_did_not_answer(class_graded):
    rows = class_graded[0]
    assert [(r.student, r.exercise) for r in rows if r.verdict == "right"
            and r.exercise in ("check_overcharge", "check_message_key")] == []


def test_links_are_not_followed_and_what_they_point_to_is_not_shown(class_graded):
    rows, _, out, *_ = class_graded
    assert verdicts(rows, "link_to_a_classmate") == {"file": "not read"}
    assert verdicts(rows, "link_to_a_secret") == {"file": "not read"}
    assert "SECRET" not in (out / "grades.csv").read_text() + (out / "index.html").read_text()


def test_no_text_of_a_hand_in_carries_control_characters_into_the_table(class_graded):
    rows, _, out, *_ = class_graded
    written = (out / "grades.csv").read_text(encoding="utf-8")
    assert "\x1b" not in written and "\udcff" not in written
    note = next(r.note for r in rows if r.student == "odd_text_in_an_error" and r.exercise == "check_triple_charge")
    assert "ValueError" in note and "\n" not in note


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


def test_the_processes_a_hand_in_started_are_stopped_and_said_and_an_honest_run_has_no_note(class_graded):
    rows = class_graded[0]
    if ROOT_OR_CGROUP:
        note = next(r.note for r in rows if r.student == "fork_bomb" and r.exercise == "check_triple_charge")
        assert "stopped" in note
    assert [r.note for r in rows if r.student == "honest"] == ["", "", ""]


def test_the_grades_say_which_sandbox_ran(class_graded):
    rows, _, out, *_ = class_graded
    mode = sandbox.available_mode()
    assert {row.sandbox for row in rows if row.verdict != "not read"} == {mode}
    assert mode in (out / "index.html").read_text()


@pytest.mark.parametrize("invisible", ["\u200b", "\u00ad", "\ufeff", "\u2060", "\U000e0041"])
def test_a_name_that_looks_like_a_classmates_is_shown_as_another(tmp_path, capsys, invisible):
    """A file named ``honest`` plus a character no screen shows (a zero-width space, a soft hyphen, a byte-order
    mark, a word joiner, a tag) printed as honest's line (``honest.ipynb: 0 of 2 right``) and took honest's name
    in the table; it is shown with that character's number."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "honest.ipynb").write_text("not a notebook")
    (folder / f"hon{invisible}est.ipynb").write_text("not a notebook")
    rows = grade_folder(folder, tmp_path / "out", progress=True)
    printed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if ".ipynb:" in line]
    assert len({row.student for row in rows}) == 2 and f"<U+{ord(invisible):04X}>" in rows[1].student + rows[0].student
    assert sorted(printed) == sorted(row.file for row in rows) and printed.count("honest.ipynb") == 1


def test_the_course_servers_folder_is_empty_to_a_hand_in(tmp_path):
    """The teacher's course servers keep their data and logs in the venv a sandbox reads (``.venv/var``): a hand-in
    saw their logs there. Now a sandbox finds the folder empty (tests/test_server_secrets.py: each log is 0600)."""
    from idemlib.servers.local import servers_dir

    servers = servers_dir()
    if not servers.is_dir() or not os.access(servers, os.W_OK):
        pytest.skip(f"the course's servers' folder {servers} is not here to write a probe into")
    probe = servers / f"probe-{os.getpid()}.log"
    probe.write_text("what a server logged")
    probe.chmod(0o644)
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    nbformat.write(handed_in(lesson, f"import os\n{RIGHT}\nif os.path.exists({str(servers)!r}) and "
                                     f"os.listdir({str(servers)!r}):\n    plan = 'I saw ' + str(os.listdir({str(servers)!r}))"),
                   folder / "looks.ipynb")
    try:
        rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, cell_seconds=20, notebook_seconds=90,
                            progress=False)
    finally:
        probe.unlink()
    assert verdicts(rows, "looks") == RIGHT_THEN_BLANK


def test_an_answer_cut_off_by_the_time_limit_while_its_check_calls_it_is_not_run_rather_than_wrong(tmp_path):
    """A right function answer whose hand-in runs out of time while the check still calls it: the check's hint
    ("calling it failed: TimeoutError") blamed the answer, so a right answer was graded wrong under load
    (lesson 05 on a busy machine). Now the exercise is not run, and the note says the check could not finish."""
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    slow = "import time\ndef key(message):\n    time.sleep(0.5)\n    return message['id']"
    nbformat.write(handed_in(lesson, edit=lambda c: setattr(c[9], "source", slow)), folder / "slow_key.ipynb")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, cell_seconds=60, notebook_seconds=15,
                        progress=False)
    [key] = [row for row in rows if row.exercise == "check_message_key"]
    assert (key.verdict, key.hint) == ("not run", ""), key
    # However far the run got before its time was up (a busy machine gets less far: the check cut off while calling
    # the answer, or the answer's values never sent at all), the note says the same.
    assert key.note == TIME_UP.format(seconds=15), key.note


TIME_UP = "the check could not finish: the hand-in's run reached its time limit ({seconds} s)"


def test_an_answer_whose_run_runs_out_of_time_before_it_is_sent_says_the_check_could_not_finish(tmp_path):
    """The other way a busy machine ends the run above: the hand-in is still working on its answer when its time is
    up, so the judge is still waiting for the values (it said "no answer came: the hand-in's run ended")."""
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    stuck = f"import time\ntime.sleep(120)\n{KEY_RIGHT}"
    nbformat.write(handed_in(lesson, edit=lambda c: setattr(c[9], "source", stuck)), folder / "stuck_key.ipynb")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, cell_seconds=60, notebook_seconds=8,
                        progress=False)
    assert {r.exercise or "file": r.verdict for r in rows} == {"file": "timed out", **BLANK,
                                                               "check_message_key": "not run"}
    [key] = [row for row in rows if row.exercise == "check_message_key"]
    assert (key.note, key.hint) == (TIME_UP.format(seconds=8), ""), key


# Names that look like "honest" (or like each other) on a screen: a Cyrillic "е", a Greek "ο", a fullwidth "ｈ"
# (NFKC makes it "h"), a Cyrillic "Н" in "Honest", "e" and a combining acute against a precomposed "é", and a name
# typed as the number the grader shows for a look-alike letter.
LOOK_ALIKES = {"cyrillic_ie": ("honest", "hon\u0435st"), "greek_omicron": ("honest", "h\u03bfnest"),
               "fullwidth": ("honest", "\uff48onest"), "cyrillic_en": ("Honest", "\u041donest"),
               "combining": ("hon\u00e9st", "hone\u0301st"), "typed_number": ("hon\u0435st", "hon<U+0435>st")}


@pytest.mark.parametrize("case", sorted(LOOK_ALIKES))
def test_a_name_with_a_look_alike_letter_is_shown_as_another(tmp_path, capsys, case):
    """``honеst.ipynb`` (a Cyrillic "е") beside ``honest.ipynb``: both were shown as "honest" on the terminal, in
    the CSV and in the table, where one row could pass for the other. Every character outside ASCII is now shown
    by its number, so the two names differ on any screen, whatever the font."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in LOOK_ALIKES[case]:
        (folder / f"{name}.ipynb").write_text("not a notebook")
    rows = grade_folder(folder, tmp_path / "out", progress=True)
    printed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if ".ipynb:" in line]
    students = [row.student for row in rows]
    assert len(set(students)) == 2 and all(name.isascii() and name.isprintable() for name in students)
    assert sorted(printed) == sorted(row.file for row in rows) and len(set(printed)) == 2
    table = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert all(html.escape(student) in table for student in students)


def test_names_cut_to_the_same_first_characters_still_get_a_row_each(tmp_path):
    """Two long names alike in their first 200 shown characters (a look-alike letter is shown as 8) stay apart."""
    folder = tmp_path / "in"
    folder.mkdir()
    for last in "ab":
        (folder / ("\u0435" * 30 + last + ".ipynb")).write_text("not a notebook")
    rows = grade_folder(folder, tmp_path / "out", progress=False)
    assert len({row.student for row in rows}) == 2 and all(len(row.student) < 220 for row in rows)


def test_a_look_alike_hand_in_neither_hides_nor_takes_a_classmates_grade(tmp_path):
    """The look-alike hands in a wrong answer beside honest's right one: graded as one class, honest keeps its
    right row and the look-alike has its own wrong one, under a name that shows which is which."""
    lessons, folder = tmp_path / "lessons", tmp_path / "in"
    lessons.mkdir()
    folder.mkdir()
    lesson = tiny_lesson()
    nbformat.write(lesson, lessons / "90_tiny.ipynb")
    nbformat.write(handed_in(lesson, RIGHT), folder / "honest.ipynb")
    nbformat.write(handed_in(lesson, "plan = 'anything'"), folder / "hon\u0435st.ipynb")
    rows = grade_folder(folder, tmp_path / "out", lessons_folder=lessons, cell_seconds=20, notebook_seconds=120,
                        progress=False)
    assert verdicts(rows, "honest") == RIGHT_THEN_BLANK
    assert verdicts(rows, "hon<U+0435>st") == WRONG_THEN_BLANK
    with open(tmp_path / "out" / "grades.csv", encoding="utf-8") as table:
        shown = {(row["student"], row["exercise"], row["verdict"]) for row in csv.DictReader(table)}
    assert {("honest", "check_triple_charge", "right"), ("hon<U+0435>st", "check_triple_charge", "wrong")} <= shown
