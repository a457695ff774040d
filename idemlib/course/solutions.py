"""An exercise's solution, opened on purpose once the learner has answered: read from the full lesson.

A learner's copy has no solutions in it. Once a check has judged an answer (right or wrong, not
blank), its verdict offers the course's solution, which this module reads from the full lesson:
the cell tagged ``solution`` before the cell that calls the check. Where the full lessons cannot
be read (a copy handed out with the package alone, or a grading sandbox), the verdict says the
teacher has the solutions instead; in the full lesson itself, where the solution sits just above,
it offers nothing.
"""

from __future__ import annotations

import functools
import html
import json
import os
from pathlib import Path

from idemlib.course.lessons import LESSONS, MANIFEST, lesson_paths
from idemlib.course.rerun import called_check

# The exercises this kernel has judged an answer of (right or wrong): their solutions may be opened.
_answered: set[str] = set()

WITH_THE_TEACHER = "The solutions are with your teacher: this copy has no access to the course's full lessons."


def solutions_folder(here: Path | None = None) -> Path | None:
    """Where the full lessons are, for a kernel running in ``here`` (its working folder, by default):
    ``IDEMLIB_LESSONS``, else the folder the learner's copies were made from, else the course's
    ``notebooks/``; None when none can be read, or when ``IDEMLIB_SOLUTIONS=teacher`` withholds them."""
    if os.environ.get("IDEMLIB_SOLUTIONS") == "teacher":
        return None
    here = here or Path.cwd()
    candidates = [os.environ.get("IDEMLIB_LESSONS")]
    try:
        candidates.append(json.loads((here / MANIFEST).read_text())["lessons"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not a learner's folder, or its record is unreadable: the other places remain
    candidates.append(str(LESSONS))
    for candidate in candidates:
        try:
            if candidate and lesson_paths(Path(candidate)):
                return Path(candidate).resolve()
        except (OSError, TypeError):
            continue
    return None


def solution_of(check: str, lessons: Path | None = None) -> str | None:
    """The source of the solution cell that ``check`` (``"check_inbox_insert"``) judges in the full
    lessons, or None if they cannot be read or hold no such exercise."""
    folder = lessons or solutions_folder()
    if folder is None:
        return None
    try:
        versions = tuple((path.name, path.stat().st_mtime_ns) for path in lesson_paths(folder))
    except OSError:
        return None
    return _solutions(folder, versions).get(check)


@functools.lru_cache(maxsize=4)
def _solutions(folder: Path, versions: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """Every exercise's solution in the lessons of ``folder`` (as they were at ``versions``), by its check:
    the nearest code cell tagged ``solution`` above the cell that calls the check, with no other check between."""
    found: dict[str, str] = {}
    for name, _ in versions:
        try:
            with open(folder / name, encoding="utf-8") as notebook:
                cells = json.load(notebook)["cells"]
        except (OSError, ValueError, KeyError):
            continue
        solution = None
        for cell in cells:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if "solution" in cell.get("metadata", {}).get("tags", []):
                solution = source
            elif check := called_check(source):
                if solution is not None:
                    found.setdefault(check, solution)
                solution = None
    return found


def _in_full_lesson(folder: Path) -> bool:
    """Whether the kernel runs in the full lessons' own folder, i.e. in a lesson whose solutions are in it."""
    try:
        return Path.cwd().resolve() == folder
    except OSError:
        return False


def offer(check: str, right: bool) -> tuple[str, str] | None:
    """What a judged verdict of ``check`` (``right`` or wrong) adds, as (HTML, text): the solution to
    open, or the note that the teacher has it; None in the full lesson itself."""
    _answered.add(check)
    folder = solutions_folder()
    if folder is not None and _in_full_lesson(folder):
        return None
    solution = solution_of(check, folder) if folder is not None else None
    if solution is None:
        return (f"<p style='margin:4px 0 0'><i>{html.escape(WITH_THE_TEACHER)}</i></p>", WITH_THE_TEACHER)
    summary = ("The course's solution, to compare with yours" if right else
               "The course's solution, when you are done trying (the hint may be enough for another try)")
    text = (f"{summary}: from idemlib.course.solutions import show_solution; show_solution({check!r})")
    page = (f"<details style='margin-top:4px'><summary>{summary}</summary>"
            f"<pre><code>{html.escape(solution)}</code></pre></details>")
    return page, text


def show_solution(check: str) -> None:
    """Print the course's solution of the exercise ``check`` judges (``"check_inbox_insert"``), once this
    kernel's check has judged an answer of the learner's."""
    if check not in _answered:
        print(f"Answer first: {check}'s solution opens once the check has judged an answer of yours, "
              "right or wrong (an answer left as ... does not count).")
        return
    print(solution_of(check) or WITH_THE_TEACHER)
