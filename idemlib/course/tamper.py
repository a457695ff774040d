"""Reading a hand-in's code for tampering with the course: what a teacher should see named.

The verdicts never depend on this: the referee runs only answer cells, and finds
tampering in them as it happens. This reads every code cell of the hand-in (the ones
that never run in grading too, and code handed to ``exec`` as a string), so a grade
says what a student tried, in which cell.
"""

from __future__ import annotations

import ast

from nbformat import NotebookNode

# Modules whose insides a hand-in has no business changing.
GUARDED_MODULES = ("idemlib", "builtins", "sys", "IPython")
# Attributes that reach into the machinery of functions, classes and frames.
INNARDS = frozenset({"__code__", "__globals__", "__closure__", "__class__", "__dict__", "__builtins__",
                     "__subclasses__", "__bases__", "__mro__", "f_back", "f_globals", "f_locals", "tb_frame",
                     "gi_frame", "cr_frame", "cell_contents", "__defaults__", "__kwdefaults__"})
# Modules and attributes that read or write the process's raw memory or its object graph: inside the
# process that runs the checks, nothing else could stop them, so their mere use counts as tampering.
RAW_MEMORY = frozenset({"ctypes", "_ctypes", "gc", "_testcapi", "ctypeslib", "as_strided", "_xxsubinterpreters"})
REACHING = frozenset({"importlib", "inspect", "_thread", "threading", "signal", "sys"})
RUNNING_TEXT = frozenset({"exec", "eval", "compile", "__import__"})


def _guarded_names(tree: ast.AST) -> set[str]:
    """Names a cell binds to the course's modules and objects, ``builtins`` and ``sys``."""
    names = {"__builtins__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                      if alias.name.startswith(GUARDED_MODULES)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(GUARDED_MODULES):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _spelled(node: ast.expr) -> str:
    return ast.unparse(node)[:60]


SERIOUS = ("replaces", "sets", "setattr", "delattr", "uses")  # changes and raw memory, as against reading


def findings_in(source: str, guarded: set[str] | None = None) -> list[str]:
    """What in ``source`` changes the course's code or reaches past it; code in ``exec("...")`` included.

    A finding starting with a word of :data:`SERIOUS` (or such a finding inside ``exec``) is a change."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    guarded = (guarded or set()) | _guarded_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root(target) in guarded:
                found.append(f"replaces {_spelled(target)}")
            elif isinstance(target, ast.Attribute) and target.attr in INNARDS:
                found.append(f"sets {_spelled(target)}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called, args = node.func.id, node.args
            if called in ("setattr", "delattr") and args and _root(args[0]) in guarded:
                found.append(f"{called}() on {_spelled(args[0])}")
            elif called in RUNNING_TEXT and args:
                if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                    found += [f"{finding} (in {called}())" for finding in findings_in(args[0].value, guarded)]
                else:
                    found.append(f"{called}() of code built as it runs")
        if isinstance(node, ast.Attribute) and node.attr in INNARDS and isinstance(node.ctx, ast.Load):
            found.append(f"reads {_spelled(node)}")
        if isinstance(node, ast.Attribute) and node.attr in RAW_MEMORY:
            found.append(f"uses {_spelled(node)}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RAW_MEMORY:
            found.append(f"uses {node.value!r} by name")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            names = [alias.name for alias in node.names]
            found += [f"uses {name}" for name in [*modules, *names] if name.split(".")[-1] in RAW_MEMORY
                      or name.split(".")[0] in RAW_MEMORY]
            found += [f"imports {module}" for module in modules if module.split(".")[0] in REACHING]
    return list(dict.fromkeys(found))


def defined_in_text(source: str) -> set[str]:
    """Names bound by code a cell runs from a string constant (``exec("def check_x(...): ...")``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in RUNNING_TEXT
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            try:
                inner = ast.parse(node.args[0].value)
            except SyntaxError:
                continue
            for part in ast.walk(inner):
                if isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    bound.add(part.name)
                elif isinstance(part, ast.Name) and isinstance(part.ctx, ast.Store):
                    bound.add(part.id)
            bound |= defined_in_text(node.args[0].value)
    return bound


def tampering(submission: NotebookNode, lesson: NotebookNode) -> tuple[list[str], list[str]]:
    """(changes, other findings) in the hand-in's own code, each as ``cell N: ...`` (N counts every cell
    from 1). Cells exactly as the lesson has them are the lesson's, not the student's, and are skipped."""
    lesson_cells = {_normalised(cell.source) for cell in lesson.cells if cell.cell_type == "code"}
    changes: list[str] = []
    others: list[str] = []
    for number, cell in enumerate(submission.cells, start=1):
        if cell.cell_type != "code" or _normalised(cell.source) in lesson_cells:
            continue
        for finding in findings_in(_python(cell.source)):
            (changes if finding.startswith(SERIOUS) else others).append(f"cell {number}: {finding}")
    return changes, others


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)
