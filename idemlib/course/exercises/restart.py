"""Running a learner's function again in a fresh Python process, as a restarted consumer would."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Sequence
from typing import Any

# A restarted consumer may run on another machine, in another time zone: each fresh process gets other ones.
OTHER_MACHINES = (("consumer-2", "WEST+12"), ("consumer-3", "EAST-14"))  # POSIX zones: no tz database needed


def _source_of(function: Any, name: str = "function_from_lambda") -> str:
    """The text of ``function``, as a definition a fresh interpreter can run (a lambda becomes ``name = lambda ...``).

    A lambda's source line may be part of a larger expression (a dict entry, an
    argument), so it is parsed inside each kind of bracket until one fits.
    """
    source = textwrap.dedent(inspect.getsource(function))
    if function.__name__ != "<lambda>":
        return source
    for opening, closing in (("", ""), ("(", ")"), ("{", "}"), ("[", "]"), ("f(", ")")):
        try:
            tree = ast.parse(f"{opening}{source.strip().rstrip(',')}{closing}")
        except SyntaxError:
            continue
        lambdas = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
        if lambdas:
            return f"{name} = {ast.unparse(lambdas[0])}"
    raise SyntaxError("could not read the lambda's source; write the function with def")


def _is_literal(value: Any) -> bool:
    """True for a constant a fresh process can rebuild from its repr (a string, a number, a list of them, ...)."""
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _imports_for(function: Any, seen: set[int] | None = None) -> list[str]:
    """Lines that give ``function`` what it uses from its globals: imports, constants, and helpers defined beside it."""
    seen = {id(function)} if seen is None else seen
    lines = []
    for name in function.__code__.co_names:
        if name not in function.__globals__:  # a builtin, or an attribute name
            continue
        value = function.__globals__[name]
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif isinstance(value, types.FunctionType) and value.__module__ in ("__main__", function.__module__):
            if id(value) not in seen:  # a helper written beside it (in the notebook): its own needs, then its text
                seen.add(id(value))
                lines += [*_imports_for(value, seen), _source_of(value, name)]
        elif callable(value) and getattr(value, "__module__", None) not in (None, "__main__"):
            lines.append(f"from {value.__module__} import {value.__name__} as {name}")
        elif _is_literal(value):
            lines.append(f"{name} = {value!r}")
    return lines


def in_fresh_process(function: Any, arguments: Sequence[Sequence[Any]], seed: int, host: str = "consumer-2",
                     zone: str = "UTC") -> list[Any]:
    """What ``function`` returns (as ``str``) for each tuple of ``arguments`` (JSON values), in a fresh Python process.

    A consumer that restarts (a redeploy, a crash) must compute the same key or
    message ID for the same message, so the learner's function runs again in a new
    interpreter, with its own process ID, its own string-hash seed
    (``PYTHONHASHSEED``), and, as after a redeploy onto another machine, another
    host name and time zone (so a value carrying the local date or hour changes too).
    """
    name = "function_from_lambda" if function.__name__ == "<lambda>" else function.__name__
    other_machine = f"import platform, socket; socket.gethostname = platform.node = lambda: {host!r}"
    program = "\n".join([other_machine, *_imports_for(function), _source_of(function),
                         "import json, sys",
                         f"print(json.dumps([str({name}(*args)) for args in json.loads(sys.argv[1])]))"])
    done = subprocess.run([sys.executable, "-c", program, json.dumps([list(args) for args in arguments])],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONHASHSEED": str(seed), "TZ": zone})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
    return json.loads(done.stdout)
