"""The learner's own copies of the lessons: made once, never overwritten, refreshed on request.

``make lab`` (``python -m idemlib.course copy my-lessons``) makes a student copy of each lesson
(solutions blanked, :func:`idemlib.course.publish.student_copy`) into a folder of the learner's,
next to what the lessons link or read as they run (the glossary, ``matplotlibrc``). A copy that
exists is never written again, so the learner's answers survive ``git pull``, ``make clean`` and
any number of ``make lab``. Each copy records which version of its lesson it was made from;
when the course's lesson changes, :func:`older_copies` names the copies made from an earlier
version, and :func:`refresh` takes the new version with the learner's answers carried over,
keeping the old copy in a backup folder.

A JupyterHub image calls the same command to put copies in each learner's home; it needs only
the full lessons' folder (``--from``), never a writable package.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from idemlib.course.lessons import LESSONS, MANIFEST, lesson_paths
from idemlib.course.publish import STUB_NOTE, copy_support_files, student_copy
from idemlib.course.rerun import called_check

# In the learner's folder: which full lessons the copies came from (read by idemlib.course.solutions).
BACKUPS = "older-copies"


def version_of(copy: NotebookNode) -> str:
    """A short digest of a fresh copy's cells (kind, source, tags), the same for the same lesson text:
    outputs, cell IDs and the learner's later edits do not enter it."""
    cells = [[cell.cell_type, cell.source, sorted(cell.metadata.get("tags", []))] for cell in copy.cells]
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()[:16]


def fresh_copy(lesson: Path) -> NotebookNode:
    """The learner's copy of ``lesson`` as it would be made now, with the version it was made from."""
    copy = student_copy(nbformat.read(lesson, as_version=4), lesson.stem)
    copy.metadata["idemlib"]["made_from"] = version_of(copy)
    return copy


def full_lessons(given: Path | None = None) -> Path:
    """The folder of the full lessons: ``given``, else ``IDEMLIB_LESSONS``, else the course's ``notebooks/``."""
    folder = given or Path(os.environ.get("IDEMLIB_LESSONS") or LESSONS)
    if not lesson_paths(folder):
        raise FileNotFoundError(f"no lessons (NN_name.ipynb) in {folder}: say where the course's full lessons are, "
                                "with --from FOLDER or IDEMLIB_LESSONS=FOLDER")
    return folder.resolve()


@dataclass(frozen=True)
class CopyState:
    """One lesson's copy in the learner's folder: ``made`` now, ``current``, ``older`` than its lesson,
    or ``unreadable`` (not a notebook any more)."""

    name: str
    state: str


def make_copies(folder: Path, lessons: Path | None = None) -> list[CopyState]:
    """Make the copy of every lesson ``folder`` lacks; leave every existing copy as it is.

    The support files are the course's, not the learner's: they are brought up to date each time.
    Returns each lesson's state, in course order.
    """
    source = full_lessons(lessons)
    folder.mkdir(parents=True, exist_ok=True)
    copy_support_files([source], folder)
    (folder / MANIFEST).write_text(json.dumps({"lessons": str(source)}, indent=1) + "\n")
    states = []
    for lesson in lesson_paths(source):
        target = folder / lesson.name
        if target.exists():
            states.append(CopyState(lesson.name, _state(target, lesson)))
            continue
        _write_new(fresh_copy(lesson), target)
        states.append(CopyState(lesson.name, "made"))
    return states


def _write_new(notebook: NotebookNode, target: Path) -> None:
    """Write ``notebook`` to ``target`` only if no file is there (exclusive create): a learner's copy
    made by a command running at the same time is never overwritten."""
    with open(target, "x", encoding="utf-8") as out:
        nbformat.write(notebook, out)


def _state(copy_path: Path, lesson: Path) -> str:
    try:
        made_from = nbformat.read(copy_path, as_version=4).metadata.get("idemlib", {}).get("made_from")
    except (OSError, ValueError, nbformat.ValidationError):  # a file the learner broke, or not a notebook
        return "unreadable"
    return "current" if made_from == version_of(fresh_copy(lesson)) else "older"


def older_copies(folder: Path, lessons: Path | None = None) -> list[str]:
    """The copies in ``folder`` made from an earlier version of their lesson (or before copies recorded one)."""
    source = full_lessons(lessons)
    return [lesson.name for lesson in lesson_paths(source)
            if (folder / lesson.name).exists() and _state(folder / lesson.name, lesson) == "older"]


def learner_cells(notebook: NotebookNode) -> dict[str, NotebookNode]:
    """The answer cells of a copy by the check that reads each (the next code cell's ``check_...(...)``),
    which identifies an exercise across versions of its lesson."""
    found: dict[str, NotebookNode] = {}
    for position, cell in enumerate(notebook.cells):
        if "answer" in cell.metadata.get("tags", []):
            following = next((c for c in notebook.cells[position + 1:] if c.cell_type == "code"), None)
            if following is not None and (check := called_check(following.source)):
                found[check] = cell
    return found


def is_blank(cell: NotebookNode) -> bool:
    """Whether an answer cell is still as the copy made it: the note, then ``name = ...`` lines."""
    lines = [line.strip() for line in cell.source.strip().splitlines()]
    return all(line == STUB_NOTE or line.endswith("= ...") for line in lines)


@dataclass(frozen=True)
class Refreshed:
    """A copy replaced by its lesson's new version: where the old one went, and what was carried over."""

    name: str
    backup: Path
    carried: list[str]
    left_behind: list[str]  # answers whose exercise the new version no longer has (they stay in the backup)


def refresh(folder: Path, names: list[str] | None = None, lessons: Path | None = None) -> list[Refreshed]:
    """Replace the named copies (``01`` or ``01_why_duplicates_arrive.ipynb``; by default every older one)
    by a copy of the lesson's current version, carrying the learner's answers over (each exercise's
    by its check). The old copy is moved to ``folder/older-copies/`` first, with the
    time in its name, so nothing the learner wrote is lost."""
    source = full_lessons(lessons)
    wanted = older_copies(folder, source) if not names else [_lesson_name(source, name) for name in names]
    done = []
    for name in wanted:
        target = folder / name
        if not target.exists():
            continue  # no copy, nothing to carry over: make_copies makes it
        old = nbformat.read(target, as_version=4)
        new = fresh_copy(source / name)
        kept, new_cells = learner_cells(old), learner_cells(new)
        carried = [key for key, cell in kept.items()
                   if key in new_cells and not (cell.cell_type == "code" and is_blank(cell))]
        for key in carried:
            new_cells[key].source = kept[key].source
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        backup = folder / BACKUPS / f"{target.stem}.{stamp}.ipynb"
        backup.parent.mkdir(exist_ok=True)
        for second in range(2, 1000):  # refreshed twice within a second: a backup is never replaced
            if not backup.exists():
                break
            backup = backup.with_name(f"{target.stem}.{stamp}-{second}.ipynb")
        target.replace(backup)
        _write_new(new, target)
        left = [key for key, cell in kept.items() if key not in new_cells and not is_blank(cell)]
        done.append(Refreshed(name, backup, carried, left))
    return done


def _lesson_name(source: Path, name: str) -> str:
    """``01``, ``01_why_duplicates_arrive`` or its file name, as the lesson's file name."""
    matches = [path.name for path in lesson_paths(source) if path.name == name or path.stem == name
               or path.name[:2] == name.zfill(2)]
    if len(matches) != 1:
        raise ValueError(f"{name!r} names no lesson; the lessons are " + ", ".join(p.stem for p in lesson_paths(source)))
    return matches[0]


def python_command() -> str:
    """How to call this Python from the current folder: ``.venv/bin/python`` under make, else ``python``."""
    try:
        here = os.path.relpath(sys.executable)
    except ValueError:  # another drive (Windows)
        here = sys.executable
    on_path = shutil.which("python")
    return "python" if on_path and Path(on_path).resolve() == Path(sys.executable).resolve() else here


def status_report(folder: Path, states: list[CopyState]) -> str:
    """What ``make lab`` tells the learner: where the copies are, which were just made, which are older."""
    made = [s.name[:2] for s in states if s.state == "made"]
    lines = [f"Your copies of the lessons are in {folder}/ (yours: no command overwrites them)."]
    if made:
        lines.append(f"Made now, with every answer blank: lesson{'s' if len(made) > 1 else ''} {', '.join(made)}.")
    lines += [f"{s.name} cannot be read as a notebook: rename it, and the next run makes a fresh copy."
              for s in states if s.state == "unreadable"]
    return "\n".join(lines + _refresh_advice(folder, [s.name for s in states if s.state == "older"]))


def _refresh_advice(folder: Path, older: list[str]) -> list[str]:
    if not older:
        return []
    return [f"{len(older)} of the course's lessons changed since your copy was made: {', '.join(older)}.",
            f"To take the new version with your answers carried over (your copy moves to {folder / BACKUPS}/), "
            "close its tab and run in a terminal:",
            f"    {python_command()} -m idemlib.course refresh {folder} {' '.join(name[:2] for name in older)}"]


def report_older_copies(here: Path | None = None) -> None:
    """For lesson 00's environment check: in a learner's folder (``here``, the kernel's by default), print
    which copies are older than the course's lessons and how to take the new ones. Prints nothing
    where there is nothing to do: every copy current, the full lesson, or a copy handed out on its own."""
    here = here or Path.cwd()
    try:
        older = older_copies(here, Path(json.loads((here / MANIFEST).read_text())["lessons"]))
    except (OSError, ValueError, KeyError, TypeError):
        return  # not a learner's folder, or the lessons it came from are gone: nothing to compare with
    if older:
        print("\n".join(_refresh_advice(Path("."), older)))
