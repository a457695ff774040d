"""The lessons themselves: where they are, their titles, and the navigation line that opens each.

Everything else in :mod:`idemlib.course` (the site, student copies, grading, the
glossary) starts from this list, so adding or renaming a lesson needs only
``python -m idemlib.course nav``.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nbformat takes seconds to import (its validator's schemas): a check's verdict never needs it
    from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parent.parent.parent
LESSONS = ROOT / "notebooks"
MANIFEST = ".idemlib-lessons.json"
"""In a learner's folder of copies: the file that records which full lessons they came from."""


def lesson_paths(folder: Path = LESSONS) -> list[Path]:
    """The lessons in course order (``NN_slug.ipynb``)."""
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def title_of(notebook: NotebookNode) -> str:
    """The lesson's title: its first level-one heading (``00 · Start here``)."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and (found := re.search(r"^# (.+)$", cell.source, re.MULTILINE)):
            return found.group(1).strip()
    raise ValueError("a lesson needs a '# NN · title' heading")


NAV_LINE = re.compile(r"^\[← .*$|^\[contents\]\(00_start_here\.ipynb\).*$", re.MULTILINE)


def nav_line(lessons: list[Path], index: int) -> str:
    """The navigation line that opens lesson ``index``: the previous lesson, the contents, the next one."""
    titles = [title_of(_nbformat().read(path, as_version=4)) for path in lessons]
    links = ["[contents](00_start_here.ipynb)"]
    if index > 0:
        links.insert(0, f"[← {titles[index - 1]}]({lessons[index - 1].name})")
    if index + 1 < len(lessons):
        links.append(f"[{titles[index + 1]} →]({lessons[index + 1].name})")
    return " · ".join(links)


def write_navigation(lessons: list[Path] | None = None) -> list[Path]:
    """Put the generated navigation line at the top of every lesson after the first; returns the lessons changed.

    The line is made from the lessons' own titles, so adding or renaming a lesson
    needs only ``python -m idemlib.course nav``.
    """
    lessons = lessons or lesson_paths()
    changed = []
    for index, path in enumerate(lessons[1:], start=1):
        notebook = _nbformat().read(path, as_version=4)
        opening = notebook.cells[0]
        wanted = nav_line(lessons, index)
        body = re.sub(r"\n{3,}", "\n\n", NAV_LINE.sub("", opening.source)).strip("\n")
        source = f"{wanted}\n\n{body}"
        if source != opening.source:
            opening.source = source
            _nbformat().write(notebook, path)
            changed.append(path)
    return changed


def fold_solutions(lessons: list[Path] | None = None) -> list[Path]:
    """Fold every solution cell (its source hidden until clicked) in the full lessons, as a teacher opens them
    in JupyterLab; returns the lessons changed. A learner's or student's copy has open blanks instead."""
    changed = []
    for path in lessons or lesson_paths():
        notebook = _nbformat().read(path, as_version=4)
        folded = False
        for cell in notebook.cells:
            if "solution" in cell.metadata.get("tags", []) and not cell.metadata.get("jupyter", {}).get("source_hidden"):
                cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
                folded = True
        if folded:
            _nbformat().write(notebook, path)
            changed.append(path)
    return changed


def _nbformat() -> ModuleType:
    """The nbformat module, imported on first use (a check's verdict reads lesson paths, never notebooks)."""
    import nbformat

    return nbformat
