"""Publishing the course: lessons executed for the site, and student copies for a classroom.

Solutions are written once, in cells tagged ``solution``. The site folds them
into a ``<details>`` a reader opens on purpose; a student copy replaces each one
with a blank to fill in, so its check says *Not answered yet* until the student
answers. Run as ``python -m idemlib.course html|student [folder]``.
"""

from __future__ import annotations

import ast
import copy
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode
from traitlets.config import Config

from idemlib.course.lessons import lesson_paths

# What a lesson links to or reads while it runs, besides the other lessons: a copy without them has
# dead glossary links and figures without the course's palette, so every copy takes them along.
SUPPORT_FILES = ("GLOSSARY.md", "matplotlibrc")
STUB_NOTE = "# Your answer: replace ... below, run this cell, then run the check underneath."


def execute(path: Path, timeout: int = 180) -> NotebookNode:
    """Run a lesson top to bottom on a fresh kernel, in its own folder, and return it with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    # The kernel talks to us over local sockets (IPC) instead of loopback TCP: nothing
    # to eavesdrop on, and no "running over TCP without encryption" warning per lesson.
    # The socket files need an absolute path, since the kernel runs in the lesson's folder.
    with tempfile.TemporaryDirectory(prefix="idemlib-kernel-") as sockets:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(sockets) / "kernel")
        # Every figure's PNG carries its description, which the site makes its alt text.
        NotebookClient(notebook, timeout=timeout, kernel_name="python3", config=config,
                       extra_arguments=["--IPKernelApp.extensions=idemlib.pictures.alt_text"],
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


def first_goal(notebook: NotebookNode) -> str:
    """The lesson's first learning goal, which the site's index shows as its one-line description."""
    found = re.search(r"you will\*\*\s*\n\s*\n- (.+)", notebook.cells[0].source)
    return found.group(1).rstrip(";.") if found else ""


def answer_names(solution: str, check: str) -> list[str]:
    """The names a solution assigns that the following check reads: what a student must fill in."""
    assigned = set()
    for node in ast.parse(solution).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                assigned |= {name.id for name in names if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned.add(node.name)
    read = [node.id for node in ast.walk(ast.parse(check)) if isinstance(node, ast.Name)]
    return [name for name in dict.fromkeys(read) if name in assigned]


def student_copy(notebook: NotebookNode, lesson: str = "") -> NotebookNode:
    """The lesson with every solution replaced by a blank (``name = ...``) and all outputs cleared.

    ``lesson`` (the lesson's file stem) is recorded in the copy's metadata, so grading
    knows which lesson a handed-in copy is, whatever the student renamed it to.
    """
    copied = copy.deepcopy(notebook)
    if lesson:
        copied.metadata["idemlib"] = {"lesson": lesson}
    for position, cell in enumerate(copied.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if "solution" not in cell.metadata.get("tags", []):
            continue
        following = copied.cells[position + 1].source if position + 1 < len(copied.cells) else ""
        names = answer_names(cell.source, following)
        if not names:
            raise ValueError(f"the solution cell {cell.source[:60]!r} assigns nothing its check reads")
        cell.source = "\n".join([STUB_NOTE, *(f"{name} = ..." for name in names)])
        cell.metadata["tags"] = [tag for tag in cell.metadata["tags"] if tag != "solution"] + ["answer"]
        cell.metadata.pop("jupyter", None)  # the full lesson folds its solutions; a blank to fill in stays open
    return copied


def build_student(out: Path, lessons: Iterable[Path] | None = None) -> list[Path]:
    """Write a student copy of every lesson into ``out``, with the files the lessons link or read
    (:data:`SUPPORT_FILES`), so the folder works on its own; returns the copies written."""
    out.mkdir(parents=True, exist_ok=True)
    lessons = list(lessons or lesson_paths())
    written = []
    for path in lessons:
        target = out / path.name
        nbformat.write(student_copy(nbformat.read(path, as_version=4), path.stem), target)
        written.append(target)
    copy_support_files({path.parent for path in lessons}, out)
    return written


def copy_support_files(folders: Iterable[Path], out: Path) -> None:
    """Bring the lessons' :data:`SUPPORT_FILES` from ``folders`` into ``out`` where they differ."""
    for folder in folders:
        for name in SUPPORT_FILES:
            if (folder / name).exists() and not ((out / name).exists()
                                                 and (out / name).read_bytes() == (folder / name).read_bytes()):
                shutil.copyfile(folder / name, out / name)


