"""Running a learner's function again in a fresh Python process, as a restarted consumer would.

A restart carries the program's text over, never its memory. The fresh process gets
the function's source, the imports it uses, and the statements that define the other
names it reads, and runs those statements again: a dict of remembered keys starts
empty, a UUID made at start-up is a new one, a namespace constant written in the
source is the same one. It runs as a consumer redeployed onto another machine, a day,
days and more than a year later: another host name (``/etc/hostname`` included),
hardware address (``uuid.getnode()``), time zone and clock, its own process ID and
string-hash seed (``PYTHONHASHSEED``), so a key carrying any of those changes.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import pickle
import signal
import subprocess
import symtable
import sys
import textwrap
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from idemlib.course.exercises.feedback import graders_proxy


@dataclass(frozen=True)
class Machine:
    """Where and when the restarted consumer runs: a host name, a POSIX time zone, and how many seconds later."""

    host: str
    zone: str
    seconds_later: float


# POSIX zones need no tz database. 26.5 hours, 3.6 days and 400 days later: another date, another UTC hour, another
# minute, and (400 days on) another month and year, so a key from a month or year bucket changes too.
OTHER_MACHINES = (Machine("consumer-2", "WEST+12", 26.5 * 3600), Machine("consumer-3", "EAST-14", 3.6 * 86400),
                  Machine("consumer-4", "UTC0", 400 * 86400))

# Put into the fresh process before the learner's code: the other machine's name and clock.
_OTHER_MACHINE = '''
import os as _os, platform as _platform, socket as _socket, time as _time
_later, _host = {seconds!r}, {host!r}
_real = {{name: getattr(_time, name) for name in ("time", "time_ns", "localtime", "gmtime", "ctime", "asctime", "strftime",
                                                 "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                                                 "clock_gettime", "clock_gettime_ns")}}
_time.time = lambda: _real["time"]() + _later
_time.time_ns = lambda: _real["time_ns"]() + int(_later * 1e9)
# Another machine has been up for another time: its monotonic clocks read otherwise too (a shift keeps every interval).
_time.monotonic = lambda: _real["monotonic"]() + _later
_time.monotonic_ns = lambda: _real["monotonic_ns"]() + int(_later * 1e9)
_time.perf_counter = lambda: _real["perf_counter"]() + _later
_time.perf_counter_ns = lambda: _real["perf_counter_ns"]() + int(_later * 1e9)
_time.clock_gettime = lambda clock: _real["clock_gettime"](clock) + _later
_time.clock_gettime_ns = lambda clock: _real["clock_gettime_ns"](clock) + int(_later * 1e9)
_time.localtime = lambda secs=None: _real["localtime"](_time.time() if secs is None else secs)
_time.gmtime = lambda secs=None: _real["gmtime"](_time.time() if secs is None else secs)
_time.ctime = lambda secs=None: _real["ctime"](_time.time() if secs is None else secs)
_time.asctime = lambda t=None: _real["asctime"](_time.localtime() if t is None else t)
_time.strftime = lambda format, t=None: _real["strftime"](format, _time.localtime() if t is None else t)
_socket.gethostname = _platform.node = lambda: _host
_socket.getfqdn = lambda name="": _host
_uname = _os.uname()
_os.uname = lambda: _os.uname_result((_uname.sysname, _host, _uname.release, _uname.version, _uname.machine))
import builtins as _builtins, io as _io, uuid as _uuid, zlib as _zlib
_uuid.getnode = lambda: _zlib.crc32(_host.encode()) | (1 << 40)  # another machine, another hardware address
_open = _io.open
def _open_here(file, *args, **kwargs):
    if isinstance(file, (str, _os.PathLike)) and _os.path.realpath(file) == "/etc/hostname":
        return _io.StringIO(_host + "\\n")
    return _open(file, *args, **kwargs)
_builtins.open = _io.open = _open_here
'''

# Put in after the modules the learner's code imports are loaded (see :func:`_imports_in`) and before the learner's
# statements run: a C extension that checks datetime's size as it loads (pandas, which idemlib.provider needs)
# crashes on a subclass, while a start-up date (``STARTED = date.today()``) must still read the other machine's clock.
_OTHER_MACHINES_DATES = '''
import datetime as _dt, time as _time
class _Date(_dt.date):
    @classmethod
    def today(cls):
        return cls.fromtimestamp(_time.time())
class _DateTime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls.fromtimestamp(_time.time(), tz)
    @classmethod
    def today(cls):
        return cls.fromtimestamp(_time.time())
    @classmethod
    def utcnow(cls):
        return cls.fromtimestamp(_time.time(), _dt.timezone.utc).replace(tzinfo=None)
_dt.date, _dt.datetime = _Date, _DateTime
'''

# Loads each module the learner's code imports anywhere (at the top of a cell or inside a function), before the
# dates are swapped; one that fails to load here fails again where the learner's code imports it, and says why.
_LOADED_FIRST = '''
import importlib as _importlib
for _module in {modules!r}:
    try:
        _importlib.import_module(_module)
    except Exception:
        pass
'''


def _imports_in(texts: Iterable[str]) -> list[str]:
    """The absolute modules the statements ``texts`` import, wherever in them (a function's body included)."""
    modules: dict[str, None] = {}
    for text in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update((alias.name, None) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules[node.module] = None
    return list(modules)


def _source_of(function: Any, name: str = "function_from_lambda") -> str:
    """The text of ``function``, as a definition a fresh interpreter can run (a lambda becomes ``name = lambda ...``).

    A lambda's source line may be part of a larger expression (a dict entry, an
    argument), so it is parsed inside each kind of bracket until one fits.
    """
    source = textwrap.dedent(inspect.getsource(function))
    if function.__name__ != "<lambda>":
        return source
    line = source.strip().rstrip(",")
    # The line may also end inside brackets it never opened (``(lambda e: ...,)],`` in a list of tuples):
    # cut the closing brackets and close what the line itself opened.
    for text, opening, closing in [*((line, opening, closing) for opening, closing in
                                     (("", ""), ("(", ")"), ("{", "}"), ("[", "]"), ("f(", ")"))),
                                   *((line.rstrip(")]},"), "", closing) for closing in ("", ")", "))", ",)"))]:
        try:
            tree = ast.parse(f"{opening}{text}{closing}")
        except SyntaxError:
            continue
        lambdas = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
        if lambdas:
            return f"{name} = {ast.unparse(lambdas[0])}"
    raise SyntaxError("could not read the lambda's source; write the function with def")


def _program_texts(function: Any) -> list[str]:
    """The text the function's module was run from: a notebook's cells in the order they ran, or the module's file."""
    history = function.__globals__.get("_ih")  # IPython keeps every cell it ran, as Python
    if isinstance(history, list):
        return [cell for cell in history if isinstance(cell, str)]
    try:
        return [inspect.getsource(sys.modules[function.__module__])]
    except (KeyError, TypeError, OSError):
        return []


def _bound_names(statement: ast.stmt) -> set[str]:
    """The global names a top-level statement binds."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
    targets = statement.targets if isinstance(statement, ast.Assign) else (
        [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value is not None else [])
    return {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}


def _definition(function: Any, name: str) -> str | None:
    """The source of the last top-level statement that bound ``name`` where ``function`` was written."""
    found = None
    for text in _program_texts(function):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for statement in tree.body:
            if name in _bound_names(statement):
                found = _statement_text(text, statement)
    return found


def _statement_text(text: str, statement: ast.stmt) -> str:
    """The source of ``statement`` in ``text``, with its decorators: a def's own segment starts at ``def``, and
    the function run again without them (``@functools.lru_cache``, a wrapper of the learner's) is another one."""
    decorators = getattr(statement, "decorator_list", [])
    return "".join(f"@{ast.get_source_segment(text, decorator)}\n" for decorator in decorators) + (
        ast.get_source_segment(text, statement) or "")


def _globals_read(text: str) -> list[str]:
    """The global names the statements ``text`` read, in the order they come, in nested functions, lambdas,
    classes and comprehensions too. A parameter, a local, a comprehension's variable or an attribute is not
    one: only a name that would be looked up among the module's globals."""
    names: dict[str, None] = {}
    tables = [symtable.symtable(text, "<restarted>", "exec")]
    while tables:
        table = tables.pop(0)
        names.update((symbol.get_name(), None) for symbol in table.get_symbols()
                     if symbol.is_referenced() and symbol.is_global())
        tables += table.get_children()
    return list(names)


def _at_home(value: Any) -> bool:
    """Whether ``value``'s module holds it under its own name, so ``from module import name`` gives it back."""
    return getattr(sys.modules.get(value.__module__ or ""), value.__name__, None) is value


def _needed(function: Any, names: Iterable[str], done: set[str]) -> list[str]:
    """Lines that give a fresh process the ``names`` ``function`` reads: imports, and the statements defining the rest.

    Values are never copied in: a statement is carried as text and runs again.
    """
    lines: list[str] = []
    for name in names:
        if name in done or name not in function.__globals__:
            continue
        done.add(name)
        value = function.__globals__[name]
        written_here = getattr(value, "__module__", None) in ("__main__", function.__module__)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif (isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) and not written_here
              and _at_home(value)):
            lines.append(f"from {value.__module__} import {value.__name__} as {name}")
        elif (definition := _definition(function, name)) is not None:
            lines += [*_needed(function, _globals_read(definition), done), definition]
        elif isinstance(value, types.FunctionType):
            text = _source_of(value, name)
            lines += [*_needed(function, _globals_read(text), done), text]
        else:
            raise ValueError(f"{name!r} is not defined by any statement a restarted process could run again; "
                             "define it in a cell of its own or inside the function")
    return lines


def _written_where(answer: Any) -> Any:
    """Where a callable that is not a plain function was written: something with that place's
    ``__globals__`` and ``__module__``, as a function has, or None for a callable of a library.

    A ``functools.partial`` was written where its function was (or, for a library's function such as ``sorted``,
    where a function it is given was: ``partial(sorted, key=lambda ...)``); a bound method or a decorated function
    where its def was; a callable object where its class was.
    """
    if isinstance(answer, functools.partial):
        given = [answer.func, *answer.args, *answer.keywords.values()]
        if (inner := next((part for part in given if isinstance(part, types.FunctionType)), None)) is not None:
            return inner
    if isinstance(answer, types.MethodType) and isinstance(answer.__func__, types.FunctionType):
        return answer.__func__  # a bound method (``maker.key``): where its class was written
    if isinstance(wrapped := getattr(answer, "__wrapped__", None), types.FunctionType):
        return wrapped  # a decorated function (``@functools.lru_cache``): where its def was written
    module = sys.modules.get(getattr(type(answer), "__module__", ""))
    if module is None or module.__name__ == "builtins":
        return None
    return types.SimpleNamespace(__globals__=vars(module), __module__=module.__name__)


def _rebuilt(answer: Any) -> tuple[str, list[str]]:
    """The name the fresh process calls, and the lines that make it there.

    A plain function is carried as its text. Any other callable (a ``functools.partial``, a callable
    object, ``operator.itemgetter(...)``, ``"{}:{}".format``) bound to a name where it was written gets
    the statement that bound it run again, as a restart would; one of a library that is bound to no
    name is carried as the library's own reference to it (a pickle), which holds no memory of ours.
    """
    if isinstance(answer, types.FunctionType) and not answer.__closure__:
        name = "function_from_lambda" if answer.__name__ == "<lambda>" else answer.__name__
        text = _source_of(answer)
        return name, [*_needed(answer, _globals_read(text), {name}), text]
    where = answer if isinstance(answer, types.FunctionType) else _written_where(answer)
    namespace = where.__globals__ if where is not None else vars(sys.modules["__main__"])
    name = next((bound for bound, value in namespace.items() if value is answer and not bound.startswith("_")), "")
    if name and where is not None:  # run again the statement that made it (a factory, a partial, an object)
        return name, _needed(where, [name], set())
    try:
        carried = pickle.dumps(answer)
        pickle.loads(carried)
    except Exception:  # noqa: BLE001 - whatever stops the pickle, the answer cannot be carried this way
        carried = b""
    if not carried or b"__main__" in carried:
        if name:  # bound, but to nothing a statement of the program remakes
            raise ValueError(f"{name} is a {type(answer).__name__} a restarted process cannot make again from your "
                             "cells; write it as a def (or a class with __call__) and pass that")
        raise ValueError("it was made in a way a restarted process cannot repeat and is bound to no name; "
                         "assign it to a name in a cell of its own (key = ...) and pass that name")
    return "carried", ["import pickle", f"carried = pickle.loads(bytes.fromhex({carried.hex()!r}))"]


def in_fresh_process(function: Any, arguments: Sequence[Sequence[Any]], machine: Machine, seed: int) -> list[Any]:
    """What ``function`` returns (as ``str``; an iterator read out into a list first) for each tuple of ``arguments``
    (JSON values), in a fresh Python process.

    A consumer that restarts (a redeploy, a crash) must compute the same key or
    message ID for the same message. The fresh interpreter gets only the program's
    text (see the module's docstring) and runs on ``machine``: its host name, time
    zone and clock, with ``seed`` as its string-hash seed. ``function`` is any callable
    (see :func:`_rebuilt`). While grading, the grader's stand-in for a hand-in's function has it restarted in
    the hand-in's sandbox (:func:`restarted`, run there); an answer's own ``in_fresh_process`` is never called.
    """
    if graders_proxy(function):
        return list(function.in_fresh_process(arguments, machine, seed))
    return restarted(function, arguments, machine, seed)


def restarted(function: Any, arguments: Sequence[Sequence[Any]], machine: Machine, seed: int) -> list[Any]:
    """:func:`in_fresh_process` for a function of this process: always rebuilt from the program's text and run in
    a process of its own, whatever the function's object carries."""
    name, definition = _rebuilt(function)
    program = "\n".join([_OTHER_MACHINE.format(seconds=machine.seconds_later, host=machine.host),
                         _LOADED_FIRST.format(modules=_imports_in(definition)), _OTHER_MACHINES_DATES, *definition,
                         "import collections.abc, json, sys",
                         # an iterator's text holds none of its items: read it out, as a caller looping over it would
                         "def _text(made): return str(list(made) if isinstance(made, collections.abc.Iterator) else made)",
                         f"print(json.dumps([_text({name}(*args)) for args in json.loads(sys.stdin.read())]))"])
    try:
        done = subprocess.run([sys.executable, "-c", program], input=json.dumps([list(args) for args in arguments]),
                              capture_output=True, text=True, timeout=RESTART_SECONDS,
                              env={**os.environ, "PYTHONHASHSEED": str(seed), "TZ": machine.zone,
                                   "HOSTNAME": machine.host})
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"it did not finish {len(arguments):,} calls within {RESTART_SECONDS:g} s") from None
    if done.returncode < 0:
        raise RuntimeError(f"the fresh process crashed ({signal.Signals(-done.returncode).name})")
    if done.returncode != 0:
        raise RuntimeError(_last_error(done.stderr) or "no output")
    return json.loads(done.stdout)


RESTART_SECONDS = 60.0  # the fresh process's time for its imports and a sample of calls


def _last_error(stderr: str) -> str:
    """The error a failed run ended on: its traceback's last line, not a warning printed before it."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith((" ", "Traceback")) and "Warning:" not in line]
    return (errors or lines or [""])[-1]
