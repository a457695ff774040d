"""Hand-ins for the grading tests: a three-exercise lesson made for them (its checks, in grading_checks.py,
follow the course's contract: two take plain data, one a function) and student copies of it with answers
and edits."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from idemlib.course.publish import student_copy

SETUP = "from grading_checks import check_message_key, check_overcharge, check_triple_charge"
RIGHT = "plan = [1, 2]"
KEY_RIGHT = "def key(message):\n    return message['id']"


def tiny_lesson() -> nbformat.NotebookNode:
    """A lesson with three exercises, in the course's form (goals, solution cells, checks)."""
    def solution(source: str) -> nbformat.NotebookNode:
        cell = new_code_cell(source)
        cell.metadata["tags"] = ["solution"]
        return cell

    return new_notebook(cells=[
        new_markdown_cell("# 90 · Tiny\n\n**In this lesson you will**\n\n- grade"),
        new_code_cell(SETUP),
        new_markdown_cell("**Exercise 1.** A triple charge."),
        solution(RIGHT),
        new_code_cell("check_triple_charge(plan)"),
        new_markdown_cell("**Exercise 2.** The overcharge."),
        solution("answer = 0"),
        new_code_cell("check_overcharge(answer, messages=20)"),
        new_markdown_cell("**Exercise 3.** A message's key."),
        solution(KEY_RIGHT),
        new_code_cell("check_message_key(key)"),
        new_markdown_cell("## Summary"),
    ])


def handed_in(lesson: nbformat.NotebookNode, answer: str | None = None, *, edit=None) -> nbformat.NotebookNode:
    """A student copy of ``lesson`` with the first blank filled by ``answer``, then ``edit`` applied to its cells."""
    notebook = student_copy(lesson, "90_tiny")
    if answer is not None:
        notebook.cells[3].source = answer
    if edit:
        edit(notebook.cells)
    return notebook


def swap_answer_and_check(cells):
    cells[3], cells[4] = cells[4], cells[3]
