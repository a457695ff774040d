"""Grading a class's notebooks: run every submission, read each exercise's verdict, write one table.

A teacher hands out student copies (``make student``), collects them in a folder
(any file names; one file per student, or one folder per student) and runs
``make grade SUBMISSIONS=folder``. Each submission runs in a fresh kernel, in a
temporary copy, with a time limit per cell and per notebook. The verdicts are
read from the structured output every check displays
(:data:`~idemlib.course.exercises.feedback.VERDICT_MIME`), never from printed text, and
each check cell is compared with the lesson's own, so an edited, moved or deleted
check is reported instead of believed. Nothing a student hands in stops the
grading of the others: a file that is not a notebook, a notebook of no lesson, a
syntax error, a loop that never ends, a kernel that dies — each is a row.
"""

from __future__ import annotations

import ast
import csv
import html
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from idemlib.course.exercises.feedback import VERDICT_MIME
from idemlib.course.lessons import LESSONS, lesson_paths, title_of

CELL_SECONDS = 60
NOTEBOOK_SECONDS = 300
# Verdicts, best first; the HTML table shows each as a symbol and a word, never colour alone.
SHOWN = {"right": ("✓", "right"), "wrong": ("✗", "wrong"), "blank": ("…", "not answered"),
         "not run": ("∅", "not run"), "check edited": ("!", "check edited"), "check moved": ("↕", "check moved"),
         "check missing": ("?", "check deleted")}
PROBLEMS = ("not a notebook", "no lesson", "wrong lesson", "timed out", "kernel failed")


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


@dataclass(frozen=True)
class Exercise:
    """An exercise as the lesson sets it: the check's name, its cell's code, and its place among the cells."""

    name: str
    check_source: str


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _called_check(source: str) -> str | None:
    found = re.match(r"\s*(check_\w+)\(", source)
    return found.group(1) if found else None


def exercises_of(lesson: NotebookNode) -> list[Exercise]:
    """The lesson's exercises in order: each check cell that follows a solution cell."""
    found = []
    for before, cell in zip(lesson.cells, lesson.cells[1:]):
        if (cell.cell_type == "code" and "solution" in before.metadata.get("tags", [])
                and (name := _called_check(cell.source))):
            found.append(Exercise(name, _normalised(cell.source)))
    return found


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


def _root_name(node: ast.AST) -> str | None:
    """The name an expression such as ``m.CONSTANT`` or ``m.sub.f`` starts from."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patched_course_code(submission: NotebookNode) -> list[str]:
    """Lines of a submission that change the course's own code: an attribute of something imported from
    idemlib assigned or deleted (``lesson_09.RECOVERY_LIMIT = 1e9``), or changed through setattr, delattr,
    vars() or ``__dict__``. A check that reads a patched constant is no longer the lesson's check."""
    imported: set[str] = set()
    trees = []
    for cell in submission.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        trees.append((cell.source, tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                             if alias.name.split(".")[0] == "idemlib"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "idemlib":
                imported |= {alias.asname or alias.name for alias in node.names}
    found = []
    for source, tree in trees:
        lines = source.splitlines()
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                targets = [t for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("setattr", "delattr", "vars") and node.args):
                targets = [node.args[0]]
            elif isinstance(node, ast.Attribute) and node.attr == "__dict__":
                targets = [node.value]
            if any(_root_name(target) in imported for target in targets):
                found.append(lines[node.lineno - 1].strip())
    return found


def audit_checks(submission: NotebookNode, expected: list[Exercise]) -> dict[str, str]:
    """For each exercise whose check cell is not the lesson's, in its place: deleted, edited or moved."""
    found: dict[str, tuple[int, str]] = {}
    answers = [i for i, cell in enumerate(submission.cells)
               if {"answer", "solution"} & set(cell.metadata.get("tags", []))]
    for index, cell in enumerate(submission.cells):
        if cell.cell_type == "code" and (name := _called_check(cell.source)) and name not in found:
            found[name] = (index, _normalised(cell.source))
    problems: dict[str, str] = {name: "check edited" for name in rebound_checks(submission)}
    if patched_course_code(submission):  # every check may read what was patched
        problems |= {exercise.name: "check edited" for exercise in expected}
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


def verdicts_in(executed: NotebookNode) -> dict[str, dict[str, str]]:
    """The verdict each check displayed, read from its structured output in its own check cell only.

    A verdict shown anywhere else (a cell a student added, printing a fake one) is not a check's.
    """
    seen: dict[str, dict[str, str]] = {}
    for cell in executed.cells:
        name = _called_check(cell.source) if cell.cell_type == "code" else None
        if name is None or name in seen:
            continue
        for output in cell.get("outputs", []):
            verdict = output.get("data", {}).get(VERDICT_MIME)
            if isinstance(verdict, dict) and verdict.get("exercise") == name:
                seen[name] = verdict
    return seen


def rebound_checks(submission: NotebookNode) -> set[str]:
    """Check names a submission binds itself (a ``def``, an assignment, an import under another name):
    a check replaced by the student's own, whatever its cell shows. Importing from idemlib.course.exercises is fine."""
    bound: set[str] = set()
    for cell in submission.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # a cell that does not parse binds nothing; running it reports the error
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


def run_submission(path: Path, out: Path, cell_seconds: int = CELL_SECONDS) -> None:
    """Execute ``path`` into ``out`` in a fresh kernel, errors allowed, a looping cell interrupted."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=cell_seconds, interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    finally:
        nbformat.write(notebook, out)


def _execute_isolated(path: Path, cell_seconds: int, notebook_seconds: int) -> tuple[NotebookNode | None, str]:
    """Run a submission in a child process inside a temporary folder; (executed notebook, problem or '')."""
    with tempfile.TemporaryDirectory(prefix="idemlib-grade-") as folder:
        copy, out = Path(folder) / "submission.ipynb", Path(folder) / "executed.ipynb"
        shutil.copyfile(path, copy)
        command = [sys.executable, "-m", "idemlib.course.grade", "--run-one", str(copy), str(out), str(cell_seconds)]
        # A session of its own, so a notebook that overruns is stopped with every process it started.
        child = subprocess.Popen(command, cwd=folder, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, errors = child.communicate(timeout=notebook_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.communicate()
            executed = nbformat.read(out, as_version=4) if out.exists() else None
            return executed, f"stopped after {notebook_seconds} s"
        if not out.exists():
            return None, (errors.strip().splitlines() or ["the kernel did not start"])[-1]
        return nbformat.read(out, as_version=4), ""


def _interrupted(executed: NotebookNode) -> bool:
    return any(output.get("ename") == "KeyboardInterrupt"
               for cell in executed.cells for output in cell.get("outputs", []))


def student_of(path: Path, folder: Path) -> str:
    """The student a file belongs to: its first folder under the submissions, or its own name."""
    parts = path.relative_to(folder).parts
    return parts[0] if len(parts) > 1 else path.stem


def grade_file(path: Path, folder: Path, lessons: dict[str, NotebookNode], *, expected_lesson: str | None = None,
               cell_seconds: int = CELL_SECONDS, notebook_seconds: int = NOTEBOOK_SECONDS) -> list[Grade]:
    """Every row for one submitted file."""
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
    expected = exercises_of(lessons[stem])
    tampered = audit_checks(submission, expected)
    executed, problem = _execute_isolated(path, cell_seconds, notebook_seconds)
    rows = []
    if executed is None:
        return [Grade(student, name, stem, "", "kernel failed", note=problem)]
    if not problem and _interrupted(executed):
        problem = f"a cell ran over {cell_seconds} s and was interrupted; the cells after it still ran"
    if problem:
        rows.append(Grade(student, name, stem, "", "timed out", note=problem))
    seen = verdicts_in(executed)
    for exercise in expected:
        verdict = seen.get(exercise.name)
        if exercise.name in tampered:
            note = f"its check showed {verdict['verdict']!r}, not counted" if verdict else ""
            rows.append(Grade(student, name, stem, exercise.name, tampered[exercise.name], note=note))
        elif verdict is None:
            rows.append(Grade(student, name, stem, exercise.name, "not run",
                              note="the check cell showed no verdict (an error before it, or it timed out)"))
        else:
            hint = verdict["message"] if verdict["verdict"] == "wrong" else ""
            rows.append(Grade(student, name, stem, exercise.name, verdict["verdict"], hint=hint))
    return rows


def submissions(folder: Path) -> list[Path]:
    """Every file handed in under ``folder``, checkpoints and hidden files left out."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def grade_folder(folder: Path, out: Path, *, lessons_folder: Path = LESSONS, expected_lesson: str | None = None,
                 cell_seconds: int = CELL_SECONDS, notebook_seconds: int = NOTEBOOK_SECONDS,
                 progress: bool = True, workers: int = 2) -> list[Grade]:
    """Grade every file under ``folder``, ``workers`` notebooks at a time; write ``grades.csv`` and
    ``index.html`` into ``out``. Rows come in the order of the files, however the runs interleave."""
    from tqdm import tqdm

    lessons = {path.stem: nbformat.read(path, as_version=4) for path in lesson_paths(lessons_folder)}
    files = submissions(folder)
    graded: dict[Path, list[Grade]] = {}
    # Each submission runs in its own child process and kernel; threads only wait for them.
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=len(files), desc="grading", unit="notebook", disable=not progress, file=sys.stdout) as bar:
        running = {pool.submit(grade_file, path, folder, lessons, expected_lesson=expected_lesson,
                               cell_seconds=cell_seconds, notebook_seconds=notebook_seconds): path for path in files}
        for done in as_completed(running):
            path, found = running[done], done.result()
            graded[path] = found
            right = sum(row.verdict == "right" for row in found)
            bar.write(f"{path.relative_to(folder)}: {right} of {sum(bool(r.exercise) for r in found)} right"
                      + "".join(f"; {r.verdict}" for r in found if r.verdict in PROBLEMS))
            bar.update()
    rows = [row for path in files for row in graded[path]]
    write_csv(rows, out / "grades.csv")
    write_html(rows, out / "index.html")
    return rows


def write_csv(rows: Iterable[Grade], target: Path) -> None:
    """One row per student and exercise (and per problem with a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Grade)])
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def write_html(rows: list[Grade], target: Path) -> None:
    """A printable, offline table: students down, exercises across, totals for each."""
    students = sorted({row.student for row in rows})
    columns = sorted({(row.lesson, row.exercise) for row in rows if row.exercise})
    cell = {(row.student, row.lesson, row.exercise): row for row in rows if row.exercise}
    problems = [row for row in rows if not row.exercise]

    def shown(row: Grade | None) -> str:
        if row is None:
            return '<td class="none">–</td>'
        symbol, word = SHOWN.get(row.verdict, ("?", row.verdict))
        title = html.escape(row.hint or row.note, quote=True)
        return f'<td class="{row.verdict.replace(" ", "-")}" title="{title}">{symbol} {word}</td>'

    head = "".join(f"<th>{html.escape(lesson[:2])}<br>{html.escape(name.removeprefix('check_'))}</th>"
                   for lesson, name in columns)
    body = []
    for student in students:
        own = [cell.get((student, *column)) for column in columns]
        total = sum(row is not None and row.verdict == "right" for row in own)
        answered = sum(row is not None for row in own)
        body.append(f"<tr><th>{html.escape(student)}</th>{''.join(shown(row) for row in own)}"
                    f"<td class='total'>{total} / {answered}</td></tr>")
    per_exercise = "".join(
        f"<td class='total'>{sum(r.verdict == 'right' for (s, *c), r in cell.items() if tuple(c) == column)}"
        f" / {sum(1 for (s, *c) in cell if tuple(c) == column)}</td>" for column in columns)
    problem_rows = "".join(f"<li><b>{html.escape(p.student)}</b> ({html.escape(p.file)}): {html.escape(p.verdict)}"
                           f"{' — ' + html.escape(p.note) if p.note else ''}</li>" for p in problems)
    legend = " ".join(f"<span>{symbol} {word}</span>" for symbol, word in SHOWN.values())
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Grades</title><link rel="icon" href="data:,">'
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "th,td{border:1px solid #999;padding:3px 6px;text-align:center;font-size:.9em}"
        ".right{background:#d6e9f8}.wrong{background:#fbe3c9}.total{font-weight:bold}"
        ".check-edited,.check-moved,.check-missing{background:#eee;font-style:italic}"
        "@media print{body{margin:0}th,td{font-size:8pt}}</style></head><body>"
        f"<h1>Grades</h1><p>{len(students)} students, {len(columns)} exercises. Legend: {legend}. "
        "Hover a cell for the hint the student saw.</p>"
        f"<table><thead><tr><th>student</th>{head}<th>right / graded</th></tr></thead><tbody>{''.join(body)}"
        f"<tr><th>right per exercise</th>{per_exercise}<td></td></tr></tbody></table>"
        + (f"<h2>Files that could not be graded in full</h2><ul>{problem_rows}</ul>" if problems else "")
        + "</body></html>",
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m idemlib.course.grade --run-one`` is the child process that runs one submission."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--run-one"]:
        # SIGTERM from the grader becomes SystemExit, so nbclient shuts its kernel down on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        run_submission(Path(args[1]), Path(args[2]), int(args[3]))
        return
    raise SystemExit("usage: python -m idemlib.course grade FOLDER (see idemlib.course.__main__)")


if __name__ == "__main__":
    main()
