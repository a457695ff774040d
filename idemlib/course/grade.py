"""Grading a class's notebooks: re-run every hand-in's answers, judge them with the lesson's own checks
where no hand-in can reach, write one table.

A teacher hands out student copies (``make student``), collects them in a folder
(one file per student, or one folder per student holding one file) and runs
``make grade SUBMISSIONS=folder``. Each hand-in's file is read without following a
link, bounded in size, and parsed in a process of its own (:mod:`idemlib.course.handin`).
A fresh process in a sandbox (:mod:`idemlib.course.sandbox`, :mod:`idemlib.course.referee`)
runs the lesson's own cells from the teacher's copy with the hand-in's answer cells in
place of the solutions, and sends each exercise's answer values, as data, to a judge
of the grader's (:mod:`idemlib.course.judge`), a fresh interpreter that never runs a
hand-in's code, which calls the lesson's check. No verdict the student's notebook
displayed is believed, the hand-in's other cells (its check cells included) never
run, and nothing it does in its sandbox reaches a verdict. Nothing a student hands
in stops the grading of the others: any file, any bytes, a syntax error, a loop that
never ends, a process that dies — each is a row, and every run writes the table.
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import tempfile
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from idemlib.course import handin, sandbox
from idemlib.course.grades_page import write_html
from idemlib.course.lessons import LESSONS, lesson_paths, title_of
from idemlib.course.rerun import called_check, check_call, modules_of_checks, read_report, stand_ins, steps_for
from idemlib.servers.local import servers_dir

CELL_SECONDS = 60
# A whole hand-in, the judge's checks included: lesson 05's check alone took 250 s at a load of 10 on two cores.
NOTEBOOK_SECONDS = 600
MAX_BYTES = 16 << 20  # a hand-in's file; a lesson with its outputs is well under this
# A file's problems (a row of its own); the HTML table shows each verdict as a symbol and a word.
PROBLEMS = ("not a notebook", "no lesson", "wrong lesson", "timed out", "run failed", "not read",
            "more than one hand-in", "could not be graded")
# Control characters (C0, DEL, C1), ANSI escape sequences, and the marks that reorder text on screen.
UNSAFE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
                    r"|[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# What a screen does not show (a zero-width space, a soft hyphen, a byte-order mark, a private or unassigned code
# point, a space other than the plain one): shown by its number, so "ada\u200b" never passes for "ada".
INVISIBLE = ("Cf", "Co", "Cn", "Zs", "Zl", "Zp")


def plain_text(value: str, limit: int = 2000) -> str:
    """``value`` safe for a terminal, a CSV cell and HTML: escape sequences and control characters (newlines
    too) become a space, a character a screen would not show becomes its number (``<U+200B>``), a lone
    surrogate becomes U+FFFD, and it is cut at ``limit`` characters."""
    text = " ".join(UNSAFE.sub(" ", re.sub("[\ud800-\udfff]", "\ufffd", value)).split())
    return "".join(f"<U+{ord(c):04X}>" if c != " " and unicodedata.category(c) in INVISIBLE else c
                   for c in text)[:limit]


NAME_CHARACTERS = 200  # of a name as shown, each character outside ASCII counting as its number's length


def shown_name(name: str) -> str:
    """A file's or a student's name as the terminal, the CSV and the table show it: printable ASCII as itself, any
    other character by its number (``hon<U+0435>st``, whose "е" is Cyrillic, never passes for ``honest``; nor does
    ``hon<U+200B>est``, with a zero-width space). A letter of another script or an accent may look just like a
    Latin letter in any font, so no list of look-alikes is needed, and the names a collection gives (user names)
    are ASCII. ``<`` and a space other than one between two characters are numbered too, so two different names
    are never shown alike (a name typed as ``hon<U+0435>st`` shows as ``hon<U+003C>U+0435>st``), up to
    :data:`NAME_CHARACTERS`."""
    shown = "".join(c if " " < c < "\x7f" and c != "<" or c == " " and 0 < at < len(name) - 1 and name[at - 1] != " "
                    and name[at + 1] != " " else f"<U+{ord(c):04X}>" for at, c in enumerate(name))
    return shown if len(shown) <= NAME_CHARACTERS else shown[:NAME_CHARACTERS - 1] + "~"


@dataclass(frozen=True)
class Grade:
    """One row of ``grades.csv``: a student's verdict on one exercise, or a problem with one file."""

    student: str
    file: str
    lesson: str
    exercise: str
    verdict: str
    hint: str = ""
    note: str = ""
    sandbox: str = ""  # how the hand-in's code was confined (idemlib.course.sandbox), "" if it never ran

    def __post_init__(self) -> None:
        for part in fields(self):  # whatever a file's name or an answer's error holds, a row shows only text
            object.__setattr__(self, part.name, plain_text(str(getattr(self, part.name))))


@dataclass(frozen=True)
class Exercise:
    """An exercise as the lesson sets it: the check's name and the lesson's words for it."""

    name: str
    words: str = ""


def exercises_of(lesson: NotebookNode) -> list[Exercise]:
    """The lesson's exercises in order: each check cell that follows a solution cell, with the
    lesson's words for it (the first sentence of the last text cell before the solution)."""
    found = []
    for position, (before, cell) in enumerate(zip(lesson.cells, lesson.cells[1:])):
        if (cell.cell_type == "code" and "solution" in before.metadata.get("tags", [])
                and (name := called_check(cell.source))):
            prose = [c.source for c in lesson.cells[:position] if c.cell_type == "markdown"]
            found.append(Exercise(name, _first_sentence(prose[-1] if prose else "")))
    return found


def _first_sentence(markdown: str) -> str:
    """``**Exercise 1.** Write the INSERT ...`` becomes ``Exercise 1. Write the INSERT ...`` (one sentence, plain)."""
    text = " ".join(re.sub(r"[*_`#>]", "", markdown).split())
    sentences = re.findall(r".+?(?:[.?!](?=\s|$)|$)", text)
    words = sentences[0] if sentences else ""
    if re.fullmatch(r"Exercise \d+\.", words) and len(sentences) > 1:
        words += sentences[1]
    return words[:200]


def lesson_of(read: dict[str, Any], lessons: dict[str, NotebookNode]) -> str | None:
    """Which lesson a hand-in is (as :func:`read_hand_in` gives it): the stem a student copy records,
    else the lesson with the same title."""
    if read.get("lesson") in lessons:
        return read["lesson"]
    return next((stem for stem, lesson in lessons.items() if title_of(lesson) == read.get("title")), None)


def read_hand_in(path: Path) -> dict[str, Any] | str:
    """A hand-in's cells (``{"cells": [...], "lesson": ..., "title": ...}``), or why it cannot be read.

    Never follows a link (the file is opened with ``O_NOFOLLOW`` and must be the regular file its folder
    listed); refuses a file over :data:`MAX_BYTES` before reading it; parses it in a process of its own
    with bounded memory and time (:mod:`idemlib.course.handin`)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        return f"could not be opened ({error.strerror})"
    try:
        seen = os.fstat(handle)
        if not stat.S_ISREG(seen.st_mode):
            return "not a file"
        if seen.st_size > MAX_BYTES:
            return f"{seen.st_size / 2**20:.0f} MiB, over the {MAX_BYTES >> 20} MiB a hand-in may be"
        try:
            done = subprocess.run(["prlimit", "--as=2147483648", "--cpu=30", "--", sys.executable, "-I", "-S",
                                   handin.__file__], stdin=handle, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "took over a minute to read"
    finally:
        os.close(handle)
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else {"error": "too large or too deep to read"}
    except ValueError:
        found = {"error": "could not be read"}
    return found if "error" not in found else str(found["error"])


def as_notebook(read: dict[str, Any]) -> NotebookNode:
    """The cells :func:`read_hand_in` found, as a notebook the steps can be taken from."""
    return nbformat.from_dict({"cells": [{"cell_type": cell["kind"], "source": cell["source"],
                                          "metadata": {"tags": cell["tags"]}} for cell in read["cells"]],
                               "metadata": {}})


def _judged(steps: list[dict[str, Any]], lesson: NotebookNode, class_: Class, *, cell_seconds: float,
            notebook_seconds: float) -> tuple[sandbox.Outcome, dict[str, tuple[str, str, bool]], str]:
    """Run the referee on ``steps`` in a sandbox, its answers judged by a judge of the grader's;
    (how the sandbox ended, each exercise's (verdict, message, whether the run was gone before its check was done),
    the sandbox's mode)."""
    modules = modules_of_checks(lesson)
    checks = []
    for step in steps:
        if step["kind"] == "check":
            planned = check_call(step["source"]) or ([], {}, [])
            checks.append({"exercise": step["exercise"], "name": step["exercise"],
                           "module": modules.get(step["exercise"], "idemlib.course.exercises"),
                           "args": planned[0], "kwargs": planned[1]})
    job = {"checks": checks, "seed": secrets.randbelow(2**31), "call_seconds": cell_seconds,
           "seconds": notebook_seconds}
    to_judge_read, to_judge_write = os.pipe()
    from_judge_read, from_judge_write = os.pipe()
    search = os.pathsep.join(entry for entry in sys.path if entry and Path(entry).is_dir())
    judge = subprocess.Popen([sys.executable, "-m", "idemlib.course.judge", str(to_judge_read), str(from_judge_write)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             pass_fds=(to_judge_read, from_judge_write), env={**os.environ, "PYTHONPATH": search})
    assert judge.stdin is not None and judge.stdout is not None  # both are pipes, asked for above
    os.close(to_judge_read)
    os.close(from_judge_write)
    said = bytearray()
    reader = threading.Thread(target=sandbox._drain, args=(judge.stdout.fileno(), said, 4 << 20), daemon=True)
    reader.start()
    judge.stdin.write(json.dumps(job).encode())
    judge.stdin.close()
    command = [sys.executable, "-m", "idemlib.course.referee", "{report}", "{to_judge}", "{from_judge}",
               str(cell_seconds), "--stop-others"]
    job_for_referee = json.dumps({"steps": steps, "stand_ins": class_.stand_ins}).encode()
    outcome = sandbox.run(command, job_for_referee, limits=sandbox.Limits(seconds=notebook_seconds),
                          hidden=class_.hidden, mode=class_.mode, course=class_.course,
                          fds={"to_judge": to_judge_write, "from_judge": from_judge_read})
    try:
        judge.wait(timeout=30)  # the sandbox is gone: the judge finishes what it was given, or says not run
    except subprocess.TimeoutExpired:
        judge.kill()
        judge.wait()
    reader.join(timeout=10)
    verdicts = {}
    for line in bytes(said).splitlines():
        try:
            record = json.loads(line)
            verdicts[str(record["exercise"])] = (str(record["verdict"]), str(record["message"]),
                                                 record.get("cut_off") is True)
        except (ValueError, KeyError, TypeError):
            continue
    return outcome, verdicts, class_.mode


@dataclass(frozen=True)
class Class:
    """What every hand-in of one grading run shares: the sandbox's mode, the course as the sandbox sees it,
    the check modules' stand-ins, and the folders no sandbox may see."""

    mode: str
    course: Path
    stand_ins: dict[str, Any]
    hidden: list[Path]


def grade_file(path: Path, student: str, name: str, lessons: dict[str, NotebookNode], class_: Class, *,
               expected_lesson: str | None = None, cell_seconds: float = CELL_SECONDS,
               notebook_seconds: float = NOTEBOOK_SECONDS) -> list[Grade]:
    """Every row for one handed-in file, of ``student``, named ``name`` in the submissions."""
    read = read_hand_in(path)
    if isinstance(read, str):
        return [Grade(student, name, "", "", "not a notebook", note=read)]
    stem = lesson_of(read, lessons)
    if stem is None:
        return [Grade(student, name, "", "", "no lesson", note="its title matches no lesson of the course")]
    if expected_lesson and not stem.startswith(expected_lesson):
        return [Grade(student, name, stem, "", "wrong lesson", note=f"this is {stem}; the assignment is {expected_lesson}")]
    lesson = lessons[stem]
    outcome, verdicts, mode = _judged(steps_for(lesson, as_notebook(read)), lesson, class_,
                                      cell_seconds=cell_seconds, notebook_seconds=notebook_seconds)
    report = read_report(outcome.report)
    rows = []

    def row(exercise: str, verdict: str, hint: str = "", note: str = "") -> None:
        rows.append(Grade(student, name, stem, exercise, verdict, hint, note, mode))

    if outcome.returncode is None:
        row("", "timed out", note=f"stopped after {notebook_seconds:g} s")
    elif report.timed_out:
        row("", "timed out", note="; ".join(what for _, what in report.timed_out))
    elif not report.finished:
        row("", "run failed", note=f"the run ended before its last check: {_last_words(outcome)}")
    for exercise in exercises_of(lesson):
        also = "; ".join(what for name, what in report.notes if name in (exercise.name, ""))
        verdict, message, cut_off = verdicts.get(exercise.name, ("not run", "the check gave no verdict: the run ended "
                                                                            "or ran out of time before it", True))
        if verdict == "not run" and cut_off and outcome.returncode is None:
            # The run stopped at its time limit before this check was done: said so, one way, whether the check was
            # cut off while calling the answer or the answer never came (which of the two depends on the load).
            message = f"the check could not finish: the hand-in's run reached its time limit ({notebook_seconds:g} s)"
        hint = message if verdict == "wrong" else ""
        row(exercise.name, verdict, hint=hint, note=_joined(message if verdict in ("not run", "not judged") else "",
                                                              also))
    return rows


def _last_words(outcome: sandbox.Outcome) -> str:
    last = outcome.stderr_tail.strip().splitlines()[-1:]
    return last[0][:200] if last else f"exit status {outcome.returncode}"


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def submissions(folder: Path) -> list[tuple[str, str, Path | None, str]]:
    """Every hand-in under ``folder`` as (student, its name in the folder, its file, a problem or "").

    A file of the folder's own is a student's (named by its stem for ``.ipynb``); a folder
    is one student's, and should hold one file: one holding more, or none, is a single row saying so.
    Links are never followed (a row says one was not read), nor are hidden files and
    checkpoints read. Students whose names would collide are named by their paths."""
    found: list[tuple[str, str, Path | None, str]] = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            found.append((_stem(entry.name), entry.name, None, "a link, not followed: only files handed in are read"))
        elif entry.is_dir(follow_symlinks=False):
            files = _files_in(Path(entry.path), entry.name)
            if len(files) == 1:
                name, path, problem = files[0]
                found.append((entry.name, name, path, problem))
            elif len(files) > 1:
                found.append((entry.name, entry.name + "/", None,
                              f"the folder holds {len(files)} files ({', '.join(n for n, *_ in files)[:300]}); "
                              "none graded: hand in one"))
            else:  # a learner with nothing to collect still has a row, not a silent gap in the table
                found.append((entry.name, entry.name + "/", None, "the folder is empty: nothing was handed in"))
        elif entry.is_file(follow_symlinks=False):
            found.append((_stem(entry.name), entry.name, Path(entry.path), ""))
        else:
            found.append((_stem(entry.name), entry.name, None, "not a file"))
    names = [student for student, *_ in found]
    return _told_apart([(name if names.count(student) > 1 else student, name, path, problem)
                        for student, name, path, problem in found])


def _told_apart(found: list[tuple[str, str, Path | None, str]]) -> list[tuple[str, str, Path | None, str]]:
    """``found`` with each student and file name as :func:`shown_name` shows it; two names cut to the same
    first characters get a number each (``<2>``, which no shown name holds), so no row hides another's."""
    shown = [(shown_name(student), shown_name(name), path, problem) for student, name, path, problem in found]
    alike = Counter(student for student, *_ in shown)
    counted: Counter[str] = Counter()
    told: list[tuple[str, str, Path | None, str]] = []
    for student, name, path, problem in shown:
        if alike[student] > 1:
            counted[student] += 1
            student = f"{student}<{counted[student]}>"
        told.append((student, name, path, problem))
    return told


def _files_in(folder: Path, under: str) -> list[tuple[str, Path | None, str]]:
    """The files of one student's folder, at any depth, links and hidden ones not followed."""
    found: list[tuple[str, Path | None, str]] = []
    for top, folders, files in os.walk(folder, followlinks=False):
        linked = [name for name in folders if os.path.islink(os.path.join(top, name))]
        folders[:] = sorted(name for name in folders if not name.startswith(".") and name not in linked)
        for name in sorted(files + linked):
            if name.startswith("."):
                continue
            path = Path(top) / name
            shown = f"{under}/{path.relative_to(folder)}"
            if path.is_symlink():
                found.append((shown, None, "a link, not followed: only files handed in are read"))
            elif path.is_file():
                found.append((shown, path, ""))
            else:
                found.append((shown, None, "not a file"))
    return found


def _stem(name: str) -> str:
    return name[: -len(".ipynb")] if name.endswith(".ipynb") and len(name) > len(".ipynb") else name


def grade_folder(folder: Path, out: Path, *, lessons_folder: Path = LESSONS, expected_lesson: str | None = None,
                 cell_seconds: float = CELL_SECONDS, notebook_seconds: float = NOTEBOOK_SECONDS,
                 progress: bool = True, workers: int = 2) -> list[Grade]:
    """Grade every hand-in under ``folder``, ``workers`` at a time; write ``grades.csv`` and ``index.html``
    into ``out``, always (a hand-in that cannot be graded is a row). Rows come in the order of the files."""
    from tqdm import tqdm

    mode = sandbox.available_mode()  # no sandbox here: say so now, before grading anything
    lessons = {path.stem: nbformat.read(path, as_version=4) for path in lesson_paths(lessons_folder)}
    hand_ins = submissions(folder)
    graded: dict[int, list[Grade]] = {}
    with tempfile.TemporaryDirectory(prefix="idemlib-course-") as shared:
        Path(shared).chmod(0o755)
        course = sandbox.course_copy(Path(shared) / "course")
        modules = {module for lesson in lessons.values() for module in modules_of_checks(lesson).values()}
        unreadable = [folder.resolve(), out.resolve(), lessons_folder.resolve()]
        # The teacher's course servers (their logs and data, in the venv the sandbox reads) are no hand-in's to see
        # either (as a dedicated user: their files are the servers' owner's alone, mode 0600).
        servers = servers_dir().resolve()
        class_ = Class(mode, course, stand_ins(modules), unreadable + ([servers] if servers.is_dir() else []))
        if mode == sandbox.DEDICATED_USER:
            package = Path(__file__).resolve().parent / "exercises"
            sandbox.check_dedicated_user(sys.executable, [*unreadable, package])

        def one(student: str, name: str, path: Path | None, problem: str) -> list[Grade]:
            if problem or path is None:  # a hand-in without a problem has its one notebook
                verdict = "more than one hand-in" if problem.startswith("the folder holds") else "not read"
                return [Grade(student, name, "", "", verdict, note=problem)]
            try:
                return grade_file(path, student, name, lessons, class_, expected_lesson=expected_lesson,
                                  cell_seconds=cell_seconds, notebook_seconds=notebook_seconds)
            except Exception as error:  # noqa: BLE001 - one hand-in never stops the others
                return [Grade(student, name, "", "", "could not be graded", note=f"{type(error).__name__}: {error}")]

        # Each hand-in runs in its own sandboxed process; threads only wait for them.
        with ThreadPoolExecutor(max_workers=workers) as pool, \
                tqdm(total=len(hand_ins), desc="grading", unit="notebook", disable=not progress,
                     file=sys.stdout) as bar:
            running = {pool.submit(one, *hand_in): number for number, hand_in in enumerate(hand_ins)}
            for done in as_completed(running):
                found = done.result()
                graded[running[done]] = found
                right = sum(row.verdict == "right" for row in found)
                bar.write(f"{found[0].file if found else '?'}: {right} of {sum(bool(r.exercise) for r in found)} "
                          "right" + "".join(f"; {r.verdict}" for r in found if r.verdict in PROBLEMS))
                bar.update()
    rows = [row for number in range(len(hand_ins)) for row in graded[number]]
    write_csv(rows, out / "grades.csv")
    write_html(rows, {stem: exercises_of(lesson) for stem, lesson in lessons.items()}, out / "index.html")
    return rows


def write_csv(rows: Iterable[Grade], target: Path) -> None:
    """One row per student and exercise (and per problem with a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Grade)])
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)
