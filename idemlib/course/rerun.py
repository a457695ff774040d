"""What the referee runs for one hand-in, what the judge calls, and what the referee's report says.

The steps are the teacher's copy of the lesson with each solution cell replaced by
the hand-in's answer cell and each check cell by its answer arguments: the lesson's
check cell ``check_x(answer, messages=20)`` becomes the expressions the referee
evaluates in the hand-in's sandbox (``answer``) and a call the judge makes with the
lesson's own literals (``messages=20``), so a check's settings never come from the
sandbox. Of the lesson's other cells, only those the answers depend on run (a cell
that binds a name they read, or changes it in place, and so on back), so a hand-in
is graded in seconds rather than the time of the whole lesson; the hand-in's own
extra cells and its check cells never run.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # nbformat is slow to import, and the functions here only read notebooks as given
    from nbformat import NotebookNode

Step = dict[str, Any]


def _code(source: str) -> str:
    """A cell as Python: IPython's ``%magic`` and ``!shell`` lines rewritten as calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


@dataclass
class _Names:
    binds: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    changes: set[str] = field(default_factory=set)  # names whose object the cell changes in place
    imports: set[str] = field(default_factory=set)
    star: bool = False


def names_in(source: str) -> _Names | None:
    """Which names a cell binds, reads, changes in place and imports; None if it does not parse."""
    try:
        tree = ast.parse(_code(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # a hand-in's cell may be anything
        return None
    found = _Names()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (found.binds if isinstance(node.ctx, (ast.Store, ast.Del)) else found.reads).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.star |= any(alias.name == "*" for alias in node.names)
            found.imports |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.changes |= _root(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found.changes |= _root(node.func.value)  # db.execute(...), rows.append(...)
    found.binds |= found.imports
    return found


def _root(node: ast.expr) -> set[str]:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return {node.id} if isinstance(node, ast.Name) else set()


def called_check(source: str) -> str | None:
    """The check a cell calls first (``check_inbox_insert(...)``), if it is a check cell."""
    found = re.match(r"\s*(check_\w+)\(", source)
    return found.group(1) if found else None


def _kept(steps: list[Step]) -> list[Step]:
    """The steps without the lesson cells no answer or check depends on.

    Walking backwards from the last check: a lesson cell is kept when it binds a name a
    kept step reads, or changes such a name's object in place (calls on a module
    excepted), or when its names cannot be known (a star import, a cell that does not
    parse); then its own reads are needed too.
    """
    parsed = [names_in(step["source"]) for step in steps]
    modules = set().union(*(names.imports for names in parsed if names))
    wanted: set[str] = set()
    kept: list[Step] = []
    for step, names in zip(reversed(steps), reversed(parsed)):
        needed = (step["kind"] != "setup" or names is None or names.star or bool(names.binds & wanted)
                  or bool((names.changes - modules) & wanted))
        if needed:
            kept.append(step)
            wanted |= (names.reads | names.changes) if names else set()
    return kept[::-1]


def check_call(source: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[str]] | None:
    """A check cell's call as (positional plan, keyword plan, expressions): each argument either the lesson's
    literal (``{"literal": value}``, carried as :mod:`idemlib.course.carry` data) or the next answer value
    (``{"answer": n}``), whose expression the referee evaluates. None if the cell is not one plain call."""
    from idemlib.course.carry import dump

    try:
        tree = ast.parse(_code(source).strip(), mode="eval")
    except SyntaxError:
        return None
    call = tree.body
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args) or \
            any(k.arg is None for k in call.keywords):
        return None
    expressions: list[str] = []

    def plan(node: ast.expr) -> dict[str, Any]:
        try:
            return {"literal": dump(ast.literal_eval(node))}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            expressions.append(ast.unparse(node))
            return {"answer": len(expressions) - 1}

    positional = [plan(node) for node in call.args]
    keywords = {keyword.arg: plan(keyword.value) for keyword in call.keywords if keyword.arg is not None}
    return positional, keywords, expressions


def modules_of_checks(lesson: NotebookNode) -> dict[str, str]:
    """Each check the lesson's cells import, by the module it is imported from (``from M import check_x``)."""
    found: dict[str, str] = {}
    for cell in lesson.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_code(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {alias.asname or alias.name: node.module for alias in node.names
                          if (alias.asname or alias.name).startswith("check_")}
    return found


EXERCISES = "idemlib.course.exercises"


def stand_ins(modules: set[str]) -> dict[str, dict[str, Any]]:
    """What the sandbox gets in place of the check modules (every module of :data:`EXERCISES` but its
    ``feedback``, and ``modules``): their public plain constants and the names of their checks."""
    from idemlib.course.carry import dump

    package = importlib.import_module(EXERCISES)
    names = {EXERCISES, *modules} | {f"{EXERCISES}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
                                     if info.name != "feedback"}
    found = {}
    for name in sorted(names):
        module = importlib.import_module(name)
        # A package that re-exports its lessons' names on first use (PEP 562) lists them in __all__ only.
        contents = vars(module) | {key: getattr(module, key) for key in getattr(module, "__all__", ())}
        constants, checks = {}, []
        for key, value in contents.items():
            if key.startswith("check_") and callable(value):
                checks.append(key)
            elif not key.startswith("_") and _plain(value):
                constants[key] = dump(value)
        found[name] = {"constants": constants, "checks": checks}
    return found


def _plain(value: Any, depth: int = 0) -> bool:
    """Plain data, as an answer may be: what a stand-in module may carry of its original."""
    if depth > 20:
        return False
    if value is None or type(value) in (bool, int, float, str, bytes):
        return True
    if type(value) in (list, tuple, set, frozenset):
        return all(_plain(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(_plain(key, depth + 1) and _plain(item, depth + 1) for key, item in value.items())
    return False


def steps_for(lesson: NotebookNode, submission: NotebookNode) -> list[Step]:
    """The referee's steps for ``submission``: the lesson's needed cells, the hand-in's answers, the checks.

    The hand-in's answer cells are those ``make student`` tagged ``answer``, in order; an
    answer cell a student deleted leaves the exercise blank (``...``)."""
    answers = [cell.source for cell in submission.cells
               if cell.cell_type == "code" and "answer" in cell.metadata.get("tags", [])]
    code = [cell for cell in lesson.cells if cell.cell_type == "code"]
    steps: list[Step] = []
    for position, cell in enumerate(code):
        after = code[position + 1].source if position + 1 < len(code) else ""
        if "solution" in cell.metadata.get("tags", []):
            number = sum(step["kind"] == "answer" for step in steps)
            steps.append({"kind": "answer", "exercise": called_check(after) or "",
                          "source": answers[number] if number < len(answers) else "..."})
        elif steps and steps[-1]["kind"] == "answer" and (name := called_check(cell.source)):
            planned = check_call(cell.source)
            steps.append({"kind": "check", "exercise": name, "source": cell.source.strip(),
                          "expressions": planned[2] if planned else []})
        else:
            steps.append({"kind": "setup", "source": cell.source})
    last = max((i for i, step in enumerate(steps) if step["kind"] == "check"), default=-1)
    return _kept(steps[: last + 1])


@dataclass
class Report:
    """What the referee said about the hand-in's own run (never a verdict: those come from the judge)."""

    timed_out: list[tuple[str, str]] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (exercise, what happened in its answer)
    finished: bool = False


def read_report(data: bytes) -> Report:
    """Parse the referee's lines, JSON each; what is not one of its records is left out. The hand-in could
    write here too, and gain nothing: these lines only say how its own run went."""
    report = Report()
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if type(record) is not dict:
            continue
        pair = record.get("timed_out") or record.get("answer_failed") or record.get("note")
        exercise, what = (str(pair[0]), str(pair[1])) if type(pair) is list and len(pair) == 2 else ("", "")
        if record.get("done") is True:
            report.finished = True
        elif "timed_out" in record:
            report.timed_out.append((exercise, what))
        elif "answer_failed" in record:
            report.notes.append((exercise, f"its answer raised {what}"))
        elif "note" in record:
            report.notes.append((exercise, what))
    return report
