"""The teacher's guide's at-a-glance table, made from the lessons and the README.

How long a lesson takes in class, by the guide's rule: one minute per 60 words of prose,
read or talked through; one minute per code cell run; ten minutes per exercise; the sum
rounded to five minutes. Executing the cells adds nothing countable: every lesson runs in
under 20 seconds on two cores, as ``make bench`` (``benchmarks/bench_lessons.py``) measures.
The servers a lesson uses are the README's (its table of servers, "used by").

``python -m idemlib.course.class_time`` prints the table; ``tests/test_stated_facts.py``
fails when TEACHING.md's copy of it has drifted from the lessons.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from idemlib.course.grade import exercises_of
from idemlib.course.lessons import NAV_LINE, ROOT, lesson_paths, title_of

WORDS_A_MINUTE = 60
MINUTES_A_CELL = 1
MINUTES_AN_EXERCISE = 10
ROUNDED_TO = 5

_LINK_TARGET = re.compile(r"\]\([^)]*\)")


def prose_words(lesson: NotebookNode) -> int:
    """The words of the lesson's text cells, without the navigation line and links' addresses (not read out)."""
    text = "\n".join(cell.source for cell in lesson.cells if cell.cell_type == "markdown")
    return len(_LINK_TARGET.sub("]", NAV_LINE.sub("", text)).split())


def code_cells(lesson: NotebookNode) -> int:
    """The code cells a class runs (every one that holds code)."""
    return sum(1 for cell in lesson.cells if cell.cell_type == "code" and cell.source.strip())


def class_minutes(lesson: NotebookNode) -> int:
    """The guide's estimate for the lesson, in minutes (see the module's rule)."""
    minutes = (prose_words(lesson) / WORDS_A_MINUTE + code_cells(lesson) * MINUTES_A_CELL
               + len(exercises_of(lesson)) * MINUTES_AN_EXERCISE)
    # Half-way rounds up, as a teacher plans: 62.5 minutes is 65, not Python's banker's 60.
    return int(math.floor(minutes / ROUNDED_TO + 0.5)) * ROUNDED_TO


def servers_by_lesson(readme: str) -> dict[str, list[str]]:
    """Each lesson's number (``"02"``) and the servers the README's table of servers says it uses, in that
    table's order; a server's name is its first word (``NATS JetStream`` is ``NATS``)."""
    header = next(line for line in readme.splitlines() if line.startswith("| server |"))
    column = [part.strip() for part in header.split("|")].index("used by")
    used: dict[str, list[str]] = {}
    rows = readme.split(header, 1)[1].splitlines()[2:]
    for row in rows:
        if not row.startswith("|"):
            break
        cells = [part.strip() for part in row.split("|")]
        for number in re.findall(r"\d\d", cells[column]):
            used.setdefault(number, []).append(cells[1].split()[0])
    return used


def glance_table(lessons: list[Path] | None = None, readme: Path = ROOT / "README.md") -> str:
    """TEACHING.md's at-a-glance sentence and table, as the lessons and the README make them today."""
    used = servers_by_lesson(readme.read_text(encoding="utf-8"))
    rows, total = [], 0
    for path in lessons or lesson_paths():
        lesson = nbformat.read(path, as_version=4)
        minutes, total = class_minutes(lesson), total + class_minutes(lesson)
        servers = ", ".join(used.get(path.name[:2], [])) or "none"
        rows.append(f"| {title_of(lesson)} | {minutes} | {len(exercises_of(lesson))} | {servers} |")
    return "\n".join([f"**At a glance.** About {total:,} minutes in all, some {round(total / 60)} hours of class (estimates):",
                      "", "| lesson | minutes (estimate) | exercises | real servers it uses when they run |",
                      "|---|---|---|---|", *rows])


if __name__ == "__main__":
    print(glance_table())
