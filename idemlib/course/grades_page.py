"""The grades page: one offline, printable table a teacher reads at a glance.

Students down, exercises across in lesson order, each headed with the lesson's own
words for it; every verdict as a symbol and a word (never colour alone), the hint a
wrong answer got written under it, and below the table a note for every hand-in that
failed or could not be graded in full (a check that could not judge, "not judged", is
neither right nor wrong, and shown as its own state).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Protocol

# Verdicts, best first; each shows as a symbol and a word.
SHOWN = {"right": ("✓", "right"), "wrong": ("✗", "wrong"), "blank": ("…", "not answered"),
         "not judged": ("○", "not judged"), "not run": ("∅", "not run")}
NOTED = ("not run", "not judged")
SANDBOXES = {"bubblewrap": "bubblewrap (own file system, processes and network; nothing outside visible)",
             "dedicated user": "a dedicated unprivileged user (no bubblewrap here: the hand-ins could read what "
                               "every user may read, and reach the network)"}
STYLE = ("body{font-family:sans-serif;margin:1.5em;max-width:90em}table{border-collapse:collapse}"
         "th,td{border:1px solid #999;padding:3px 6px;text-align:center;font-size:.9em;vertical-align:top}"
         "thead th{font-weight:normal;text-align:left;max-width:16em}thead th b{display:block}"
         ".right{background:#d6e9f8}.wrong{background:#fbe3c9}.total{font-weight:bold}"
         ".not-judged,.not-run{background:#eee;font-style:italic}"
         ".hint{display:block;font-size:.8em;text-align:left;max-width:22em;font-weight:normal}"
         "li{margin:.3em 0}@media print{body{margin:0}th,td{font-size:8pt}}")


class Row(Protocol):
    """A grade as :class:`idemlib.course.grade.Grade` has it."""

    student: str
    file: str
    lesson: str
    exercise: str
    verdict: str
    hint: str
    note: str
    sandbox: str


def _cell(row: Row | None) -> str:
    if row is None:
        return '<td class="none">–</td>'
    symbol, word = SHOWN.get(row.verdict, ("?", row.verdict))
    hint = f'<span class="hint">{html.escape(row.hint)}</span>' if row.hint else ""
    return f'<td class="{row.verdict.replace(" ", "-")}">{symbol} {word}{hint}</td>'


def _heading(lesson: str, name: str, words: dict[tuple[str, str], str]) -> str:
    said = words.get((lesson, name), "")
    return (f"<th><b>{html.escape(lesson[:2])} · {html.escape(name.removeprefix('check_').replace('_', ' '))}</b>"
            f"{html.escape(said)}</th>")


def write_html(rows: list[Any], exercises: dict[str, list[Any]], target: Path) -> None:
    """Write the page. ``exercises`` maps each lesson's stem to its exercises in order (each with
    ``name`` and ``words``), which orders the columns and heads them with the lesson's words."""
    order = {(stem, exercise.name): (stem, number) for stem, found in exercises.items()
             for number, exercise in enumerate(found)}
    words = {(stem, exercise.name): exercise.words for stem, found in exercises.items() for exercise in found}
    students = sorted({row.student for row in rows})
    columns = sorted({(row.lesson, row.exercise) for row in rows if row.exercise},
                     key=lambda column: order.get(column, (column[0], 999)))
    cell = {(row.student, row.lesson, row.exercise): row for row in rows if row.exercise}
    body = []
    for student in students:
        own = [cell.get((student, *column)) for column in columns]
        total = sum(row is not None and row.verdict == "right" for row in own)
        graded = sum(row is not None for row in own)
        body.append(f"<tr><th>{html.escape(student)}</th>{''.join(_cell(row) for row in own)}"
                    f"<td class='total'>{total} / {graded}</td></tr>")
    per_exercise = "".join(
        f"<td class='total'>{sum(r.verdict == 'right' for (s, *c), r in cell.items() if tuple(c) == column)}"
        f" / {sum(1 for (s, *c) in cell if tuple(c) == column)}</td>" for column in columns)
    legend = " ".join(f"<span>{symbol} {word}</span>" for symbol, word in SHOWN.values())
    modes = sorted({row.sandbox for row in rows if row.sandbox})
    ran = "; ".join(SANDBOXES.get(mode, mode) for mode in modes) or "none (no hand-in ran)"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Grades</title><link rel="icon" href="data:,">'
        f"<style>{STYLE}</style></head><body>"
        f"<h1>Grades</h1><p>{len(students)} students, {len(columns)} exercises. Legend: {legend}. "
        "A wrong answer shows the hint the student saw.</p>"
        f"<p>Each hand-in's answers were run again in: {ran}; the lesson's own checks judged their values "
        "outside it.</p>"
        f"<table><thead><tr><th>student</th>{''.join(_heading(*column, words) for column in columns)}"
        f"<th>right / graded</th></tr></thead><tbody>{''.join(body)}"
        f"<tr><th>right per exercise</th>{per_exercise}<td></td></tr></tbody></table>"
        + _notes(rows) + "</body></html>",
        encoding="utf-8",
    )


def _notes(rows: list[Any]) -> str:
    """A list item per hand-in with a problem, or an exercise not graded as usual; the
    exercises that share a verdict and a note are named together."""
    by_file: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    for row in rows:
        if row.exercise and row.verdict not in NOTED and not row.note:
            continue
        what = SHOWN.get(row.verdict, ("", row.verdict))[1]
        exercise = row.exercise.removeprefix("check_").replace("_", " ")
        by_file.setdefault((row.student, row.file), {}).setdefault((what, row.note), []).append(exercise)
    if not by_file:
        return ""
    items = []
    for (student, file), notes in by_file.items():
        said = "; ".join(f"{', '.join(e for e in exercises if e) + ': ' if any(exercises) else ''}{what}"
                         f"{' — ' + note if note else ''}" for (what, note), exercises in notes.items())
        items.append(f"<li><b>{html.escape(student)}</b> ({html.escape(file)}): {html.escape(said)}</li>")
    return f"<h2>Notes on hand-ins not graded as usual</h2><ul>{''.join(items)}</ul>"
