"""What the referee runs for one hand-in, and what its signed report says.

The steps are the teacher's copy of the lesson with each solution cell replaced by
the hand-in's answer cell and each check cell by a call of the lesson's own check.
Of the lesson's other cells, only those the answers and checks depend on run (a
cell that binds a name they read, or changes it in place, and so on back), so a
hand-in is graded in seconds rather than the time of the whole lesson; the hand-in's
own extra cells never run.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import re
from dataclasses import dataclass, field

from nbformat import NotebookNode

Step = dict[str, str]


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
    except SyntaxError:
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
            steps.append({"kind": "check", "exercise": name, "source": cell.source.strip()})
        else:
            steps.append({"kind": "setup", "source": cell.source})
    last = max((i for i, step in enumerate(steps) if step["kind"] == "check"), default=-1)
    return _kept(steps[: last + 1])


@dataclass
class Report:
    """What the referee said, in order, each line's signature checked."""

    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # exercise -> (verdict, message)
    tampered: list[tuple[str, str]] = field(default_factory=list)  # (exercise or "", what was found)
    timed_out: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    finished: bool = False


def read_report(data: bytes, key: bytes) -> Report:
    """Parse the referee's lines. A signed line is believed only with the right signature and the next
    number; a line without one is what the audit hook wrote as it stopped the run (tampering, which only
    counts against the hand-in), or something forged, which is tampering too."""
    report, expected = Report(), 1
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("T "):
            report.tampered.append(("", f"it used {line[2:].strip()}"))
            continue
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[0] != "S":
            continue  # only the referee writes here; anything else is noise from a run cut short
        signature, payload = parts[1], parts[2].encode()
        good = hmac.compare_digest(signature, hmac.new(key, payload, hashlib.sha256).hexdigest())
        record = ast.literal_eval(parts[2]) if good else None
        if not good or record[0] != expected:
            report.tampered.append(("", "a line on the referee's channel it did not write"))
            continue
        expected += 1
        kind, rest = record[1], record[2:]
        if kind == "done":
            report.finished = True
        elif kind == "check tampered":
            report.tampered.append((rest[0], rest[1]))
        elif kind == "timed out":
            report.timed_out.append((rest[0], rest[1]))
        elif kind == "note":
            report.notes.append(rest[1])
        elif kind in ("right", "wrong", "blank", "not run"):
            report.verdicts[rest[0]] = (kind, rest[1])
        elif kind == "answer failed":
            report.notes.append(f"the answer to {rest[0]} raised {rest[1]}")
    return report
