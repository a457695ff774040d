"""Grading a class's notebooks: re-run every hand-in's answers under the lesson's own checks, write one table.

A teacher hands out student copies (``make student``), collects them in a folder
(any file names; one file per student, or one folder per student) and runs
``make grade SUBMISSIONS=folder``. For each hand-in, a fresh process in a sandbox
(:mod:`idemlib.course.sandbox`) runs the lesson's own cells from the teacher's copy
with the hand-in's answer cells in place of the solutions, and calls each check
itself (:mod:`idemlib.course.referee`): no verdict the student's notebook displayed
is believed, and the hand-in's other cells never run. Each check cell is still
compared with the lesson's own, so an edited, moved or deleted check is reported,
and code that changes the course's own is graded "check tampered", with what was
found (:mod:`idemlib.course.tamper`). Nothing a student hands in stops the grading
of the others: a file that is not a notebook, a notebook of no lesson, a syntax
error, a loop that never ends, a process that dies — each is a row.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import secrets
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from idemlib.course import sandbox
from idemlib.course.grades_page import write_html
from idemlib.course.lessons import LESSONS, lesson_paths, title_of
from idemlib.course.rerun import called_check, read_report, steps_for
from idemlib.course.tamper import defined_in_text, tampering

CELL_SECONDS = 60
NOTEBOOK_SECONDS = 300
# Verdicts, best first; the HTML table shows each as a symbol and a word, never colour alone.
PROBLEMS = ("not a notebook", "no lesson", "wrong lesson", "timed out", "run failed")


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


@dataclass(frozen=True)
class Exercise:
    """An exercise as the lesson sets it: the check's name, its cell's code, and the lesson's words for it."""

    name: str
    check_source: str
    words: str = ""


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def exercises_of(lesson: NotebookNode) -> list[Exercise]:
    """The lesson's exercises in order: each check cell that follows a solution cell, with the
    lesson's words for it (the first sentence of the last text cell before the solution)."""
    found = []
    for position, (before, cell) in enumerate(zip(lesson.cells, lesson.cells[1:])):
        if (cell.cell_type == "code" and "solution" in before.metadata.get("tags", [])
                and (name := called_check(cell.source))):
            prose = [c.source for c in lesson.cells[:position] if c.cell_type == "markdown"]
            found.append(Exercise(name, _normalised(cell.source), _first_sentence(prose[-1] if prose else "")))
    return found


def _first_sentence(markdown: str) -> str:
    """``**Exercise 1.** Write the INSERT ...`` becomes ``Exercise 1. Write the INSERT ...`` (one sentence, plain)."""
    text = " ".join(re.sub(r"[*_`#>]", "", markdown).split())
    sentences = re.findall(r".+?(?:[.?!](?=\s|$)|$)", text)
    words = sentences[0] if sentences else ""
    if re.fullmatch(r"Exercise \d+\.", words) and len(sentences) > 1:
        words += sentences[1]
    return words[:200]


def lesson_of(notebook: NotebookNode, lessons: dict[str, NotebookNode]) -> str | None:
    """Which lesson a submission is: the stem a student copy records, else the lesson with the same title."""
    stem = notebook.metadata.get("idemlib", {}).get("lesson")
    if stem in lessons:
        return stem
    try:
        title = title_of(notebook)
    except ValueError:
        return None
    return next((stem for stem, lesson in lessons.items() if title_of(lesson) == title), None)


def audit_checks(submission: NotebookNode, expected: list[Exercise]) -> dict[str, str]:
    """For each exercise whose check cell is not the lesson's, in its place: deleted, edited or moved."""
    found: dict[str, tuple[int, str]] = {}
    answers = [i for i, cell in enumerate(submission.cells)
               if {"answer", "solution"} & set(cell.metadata.get("tags", []))]
    for index, cell in enumerate(submission.cells):
        if cell.cell_type == "code" and (name := called_check(cell.source)) and name not in found:
            found[name] = (index, _normalised(cell.source))
    problems: dict[str, str] = {name: "check edited" for name in rebound_checks(submission)}
    last = -1
    for number, exercise in enumerate(expected):
        if exercise.name in problems:
            continue
        if exercise.name not in found:
            problems[exercise.name] = "check missing"
            continue
        index, source = found[exercise.name]
        if source != exercise.check_source:
            problems[exercise.name] = "check edited"
        # The check must come after its own answer cell, and after the exercises before it.
        elif index < last or (number < len(answers) and index < answers[number]):
            problems[exercise.name] = "check moved"
        last = max(last, index)
    return problems


def rebound_checks(submission: NotebookNode) -> set[str]:
    """Check names a submission binds itself (a ``def``, an assignment, an import under another name, code
    run by ``exec`` from a string): a check replaced by the student's own, whatever its cell shows.
    Importing from idemlib.course.exercises is fine."""
    bound: set[str] = set()
    for cell in submission.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # a cell that does not parse binds nothing; running it reports the error
        bound |= defined_in_text(cell.source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.module == "idemlib.course.exercises":
                    bound |= {alias.asname for alias in node.names if alias.asname and alias.asname != alias.name}
                else:
                    bound |= {alias.asname or alias.name for alias in node.names}
    return {name for name in bound if name.startswith("check_")}


def _referee(steps: list[dict[str, str]], hidden: list[Path], cell_seconds: float,
             notebook_seconds: float) -> tuple[sandbox.Outcome, bytes, str]:
    """Run the referee on ``steps`` in a sandbox; (how it ended, the key its report is signed with, the mode)."""
    key = secrets.token_bytes(32)
    mode = sandbox.available_mode()
    command = [sys.executable, "-m", "idemlib.course.referee", "{report}", str(cell_seconds), str(notebook_seconds),
               "--stop-others"]
    outcome = sandbox.run(command, key.hex().encode() + b"\n" + json.dumps(steps).encode(),
                          limits=sandbox.Limits(seconds=notebook_seconds), hidden=hidden, mode=mode)
    return outcome, key, mode


def student_of(path: Path, folder: Path) -> str:
    """The student a file belongs to: its first folder under the submissions, or its own name."""
    parts = path.relative_to(folder).parts
    return parts[0] if len(parts) > 1 else path.stem


def grade_file(path: Path, folder: Path, lessons: dict[str, NotebookNode], *, expected_lesson: str | None = None,
               cell_seconds: int = CELL_SECONDS, notebook_seconds: int = NOTEBOOK_SECONDS,
               hidden: Iterable[Path] = ()) -> list[Grade]:
    """Every row for one submitted file. ``hidden`` are folders to keep out of the sandbox should they lie inside one it shows."""
    student, name = student_of(path, folder), str(path.relative_to(folder))
    try:
        submission = nbformat.read(path, as_version=4)
        nbformat.validate(submission)
    except Exception as error:  # noqa: BLE001 - anything unreadable is "not a notebook", whatever the reason
        return [Grade(student, name, "", "", "not a notebook", note=f"{type(error).__name__}: {str(error)[:120]}")]
    stem = lesson_of(submission, lessons)
    if stem is None:
        return [Grade(student, name, "", "", "no lesson", note="its title matches no lesson of the course")]
    if expected_lesson and not stem.startswith(expected_lesson):
        return [Grade(student, name, stem, "", "wrong lesson", note=f"this is {stem}; the assignment is {expected_lesson}")]
    lesson = lessons[stem]
    audited = audit_checks(submission, exercises_of(lesson))
    changes, looks = tampering(submission, lesson)
    outcome, key, mode = _referee(steps_for(lesson, submission), [folder, *hidden], cell_seconds,
                                  notebook_seconds)
    report = read_report(outcome.report, key)
    rows = []

    def row(exercise: str, verdict: str, hint: str = "", note: str = "") -> None:
        rows.append(Grade(student, name, stem, exercise, verdict, hint, note, mode))

    if outcome.returncode is None:
        row("", "timed out", note=f"stopped after {notebook_seconds} s")
    elif report.timed_out:
        row("", "timed out", note="; ".join(f"{what}" for _, what in report.timed_out))
    elif not report.finished and not report.tampered:
        last = outcome.stderr_tail.strip().splitlines()[-1:] or [f"exit status {outcome.returncode}"]
        row("", "run failed", note=f"the run ended before its last check: {last[0][:200]}")
    found = changes + [what for _, what in report.tampered]
    also = "; ".join(looks + report.notes)
    for exercise in exercises_of(lesson):
        verdict, message = report.verdicts.get(exercise.name, ("not run", ""))
        if exercise.name in audited:
            note = f"its check would have said {verdict!r}; not counted" if exercise.name in report.verdicts else ""
            row(exercise.name, audited[exercise.name], note=_joined(note, also))
        elif found:
            row(exercise.name, "check tampered", note=_joined("found: " + "; ".join(found[:6]), also))
        elif exercise.name not in report.verdicts:
            row(exercise.name, "not run", note=_joined("the check gave no verdict: the run ended or ran out of time "
                                                       "before it", also))
        else:
            hint = message if verdict == "wrong" else ""
            row(exercise.name, verdict, hint=hint, note=_joined(message if verdict == "not run" else "", also))
    return rows


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def submissions(folder: Path) -> list[Path]:
    """Every file handed in under ``folder``, checkpoints and hidden files left out."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def grade_folder(folder: Path, out: Path, *, lessons_folder: Path = LESSONS, expected_lesson: str | None = None,
                 cell_seconds: int = CELL_SECONDS, notebook_seconds: int = NOTEBOOK_SECONDS,
                 progress: bool = True, workers: int = 2) -> list[Grade]:
    """Grade every file under ``folder``, ``workers`` hand-ins at a time; write ``grades.csv`` and
    ``index.html`` into ``out``. Rows come in the order of the files, however the runs interleave."""
    from tqdm import tqdm

    sandbox.available_mode()  # no sandbox here: say so now, before grading anything
    lessons = {path.stem: nbformat.read(path, as_version=4) for path in lesson_paths(lessons_folder)}
    files = submissions(folder)
    graded: dict[Path, list[Grade]] = {}

    def one(path: Path) -> list[Grade]:
        return grade_file(path, folder, lessons, expected_lesson=expected_lesson, cell_seconds=cell_seconds,
                          notebook_seconds=notebook_seconds, hidden=[out])

    # Each hand-in runs in its own sandboxed process; threads only wait for them.
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=len(files), desc="grading", unit="notebook", disable=not progress, file=sys.stdout) as bar:
        running = {pool.submit(one, path): path for path in files}
        for done in as_completed(running):
            path, found = running[done], done.result()
            graded[path] = found
            right = sum(row.verdict == "right" for row in found)
            bar.write(f"{path.relative_to(folder)}: {right} of {sum(bool(r.exercise) for r in found)} right"
                      + "".join(f"; {r.verdict}" for r in found if r.verdict in (*PROBLEMS, "check tampered")))
            bar.update()
    rows = [row for path in files for row in graded[path]]
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
