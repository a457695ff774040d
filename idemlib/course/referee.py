"""The referee: a fresh process that re-runs a hand-in's answers after the lesson's own cells and
reports what each check says, on a channel the answers cannot forge.

It runs inside the sandbox (:mod:`idemlib.course.sandbox`) as
``python -m idemlib.course.referee REPORT_FD CELL_SECONDS SETUP_SECONDS [--stop-others]``
and reads its job on standard input: a first line with the key that signs its reports, then the steps
as JSON (each a lesson cell, an answer cell of the hand-in, or a check). Only the
teacher's cells and the hand-in's answer cells run here; its other cells never do.

How the answers are kept away from the verdicts:

- Every cell and check runs in a thread of its own, started for it and gone before
  its outcome is read; the main thread only starts them and reads, and binds every
  function it uses before any answer runs, so patching a module, ``builtins`` or
  ``sys.modules`` changes nothing it calls. Signal handlers can only be set from the
  main thread, and the garbage collector is off, so no answer's code runs there.
- An audit hook (Python has no way to remove one) ends the process, reporting what
  was tried, when a thread other than the main one reaches for what could touch the
  referee's memory: ctypes, the garbage collector's object lists, other threads'
  frames, new audit hooks, trace functions, a function's code.
- After each answer and each check, the referee compares the functions and classes
  of every module loaded before the first answer (the course's classes whole),
  ``builtins`` and ``sys.modules`` with how they were, and looks for threads and
  processes left running and for the garbage collector switched back on: anything
  found is reported as tampering and ends the run.
- Each check is called as the lesson's module defines it (never through a name the
  answer could rebind); its verdict is read only from the course's own ``Feedback``
  with plain ``bool`` and ``str`` fields; every report is signed with the key,
  which no answer can read.
"""

from __future__ import annotations

import _hashlib
import _thread
import ast
import gc
import json
import os
import signal
import sys
import threading
import time
import types
from typing import Any

# Audit events that tampering needs and no answer does (checked outside the main thread only).
FORBIDDEN = ("ctypes.", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
             "sys.addaudithook", "sys.settrace", "sys.setprofile")
# Setting these on any object swaps a function's code or an object's class. (Libraries set others as they
# build classes and functions, a namedtuple its defaults for one; the fingerprint covers the course's.)
INNARDS = frozenset({"__code__", "__class__", "__bases__"})
TAMPERED_EXIT = 70
# What the fingerprint follows in a module or class: the kinds of object a patch replaces.
TRACKED = frozenset({types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
                     property, classmethod, staticmethod, types.MethodDescriptorType, types.WrapperDescriptorType,
                     types.GetSetDescriptorType, types.MemberDescriptorType, types.ClassMethodDescriptorType})
COURSE = "idemlib"
# Set by Python whenever a cell fails, and swapped by IPython while a cell runs: not patches, and
# nothing the main thread calls.
CHANGING = frozenset({("sys", "last_type"), ("sys", "last_value"), ("sys", "last_traceback"), ("builtins", "_"),
                      ("sys", "displayhook"), ("sys", "excepthook"), ("builtins", "exit"), ("builtins", "quit")})


def _audit_hook(main: int, strict: list[bool], report: int) -> Any:
    """The audit hook: in strict mode, a forbidden event outside the main thread ends the process."""
    get_ident, write, leave, kind, size = threading.get_ident, os.write, os._exit, type, len
    forbidden, innards, code = FORBIDDEN, INNARDS, TAMPERED_EXIT
    setting = ("object.__setattr__", "object.__delattr__")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not strict[0] or get_ident() == main:
            return
        name = args[1] if event in setting and size(args) > 1 and kind(args[1]) is str else ""
        if event.startswith(forbidden) or name in innards:
            write(report, f"T {event} {name}\n".encode())
            leave(code)

    return hook



_MISSING = object()
CONTENTS, SIZE = "<contents>", "<size>"  # pseudo-names: a container's items, a class's number of attributes
Entry = tuple[Any, str, Any, str]  # (where it lives, its name there, the object it held, how a teacher names it)


def fingerprint() -> list[Entry]:
    """Each thing a patch could replace, with the object it holds now (kept, so its id is never reused).

    Every module's functions, classes and submodules, ``builtins`` whole, ``sys.modules``,
    every class's methods and descriptors (the course's classes whole), and each course
    function's code, defaults and closure cells (a decorated check keeps the check in a cell).
    """
    found: list[Entry] = []
    classes: dict[int, tuple[type, str]] = {}
    for name, module in list(sys.modules.items()):
        if type(name) is not str or type(module) is not types.ModuleType:
            continue
        found.append((sys.modules, name, module, f"sys.modules[{name!r}]"))
        namespace = vars(module)
        for key, value in list(namespace.items()):
            if type(key) is not str or (name, key) in CHANGING or (name == "__main__" and not key.startswith("check_")):
                continue  # the notebook's own names are the answers' to bind, all but the checks
            course = name.startswith(COURSE)
            if course or name == "builtins" or type(value) in TRACKED or isinstance(value, type):
                found.append((namespace, key, value, f"{name}.{key}"))
            if course and type(value) in (list, dict, set) and key != "__builtins__":
                found.append((value, CONTENTS, _contents(value), f"{name}.{key} (its contents)"))
            if isinstance(value, type) and id(value) not in classes:
                classes[id(value)] = (value, f"{name}.{key}")
            if name.startswith(COURSE) and type(value) is types.FunctionType:
                found += _function_parts(value, f"{name}.{key}")
    for cls, label in classes.values():
        whole = str(cls.__dict__.get("__module__", "")).startswith(COURSE)
        for key, value in list(cls.__dict__.items()):
            if type(key) is str and (whole or type(value) in TRACKED):
                found.append((cls.__dict__, key, value, f"{label}.{key}"))
        if whole:
            found.append((cls.__dict__, SIZE, len(cls.__dict__), f"{label} (a new attribute)"))
    return found


def _contents(container: list[Any] | dict[Any, Any] | set[Any], *, type: Any = type, dict: Any = dict,
              tuple: Any = tuple, id: Any = id, sorted: Any = sorted) -> tuple[int, ...]:
    """The ids of what a plain list, dict or set holds (its items' own insides are not followed)."""
    if type(container) is dict:
        return tuple(id(part) for pair in container.items() for part in pair)
    return tuple(sorted(id(item) for item in container))


def _function_parts(function: types.FunctionType, label: str) -> list[Entry]:
    parts: list[Entry] = [(function, part, getattr(function, part), f"{label}.{part}")
                          for part in ("__code__", "__defaults__", "__kwdefaults__")]
    for cell in function.__closure__ or ():
        try:
            parts.append((cell, "cell_contents", cell.cell_contents, f"{label} (a variable it closes over)"))
        except ValueError:  # an empty cell holds nothing to replace
            continue
    return parts




def changed(found: list[Entry], *, getattr: Any = getattr, type: Any = type, dict: Any = dict, len: Any = len,
            proxy: Any = types.MappingProxyType, contents: Any = _contents, missing: Any = _MISSING,
            marks: tuple[str, str] = (CONTENTS, SIZE)) -> list[str]:
    """The labels of entries that no longer hold what they held. Uses only what was bound when the
    referee was imported (builtins themselves may have been replaced) and runs no code of an answer:
    it reads plain dicts, class dicts, function attributes and closure cells, and compares identities."""
    labels = []
    for where, name, held, label in found:
        kind = type(where)
        try:
            if name is marks[0]:
                same = contents(where) == held
            elif name is marks[1]:
                same = len(where) == held
            else:
                now = where.get(name, missing) if kind is dict or kind is proxy else getattr(where, name, missing)
                same = now is held
        except ValueError:  # a closure cell emptied
            same = False
        if not same:
            labels.append(label)
    return labels


def _job(slot: list[Any], done: Any, keep: list[Any], shell: Any, kind: str, source: str, check: Any,
         name: str) -> None:
    """Run one job in a thread of its own: a cell, or a check's call. Its outcome goes into ``slot`` last of
    all (so nothing the job's code wrote there counts), and everything it made is kept alive in ``keep``
    (so no answer's finalizer runs after it, while the main thread reads)."""
    from matplotlib.pyplot import close as close_figures

    try:
        if kind == "check":
            namespace = dict(shell.user_ns)
            namespace[name] = check  # the lesson's own check, whatever the answers bound to its name
            keep.append(namespace)
            value = eval(compile(ast.parse(source, mode="eval"), "<check>", "eval"), namespace)
            keep.append(value)
            slot[0] = ("ok", value)
        else:
            outcome = shell.run_cell(source, store_history=False, silent=True)
            close_figures("all")  # figures are drawn for a reader; nobody reads them here
            error = outcome.error_before_exec or outcome.error_in_exec
            keep.append(outcome)
            slot[0] = ("error", f"{type(error).__name__}: {error}"[:300]) if error else ("ok", "")
    except BaseException as error:  # noqa: BLE001 - any failure is a row, not a crash
        keep.append(error)
        slot[0] = ("error", f"{type(error).__name__}: {error}"[:300])
    finally:
        done.release()


def referee(key: bytes, report: int, cell_seconds: float, setup_seconds: float, stop_others: bool) -> Any:
    """The main thread's side, as closures: run each step in a thread, inspect after each, sign and send.

    Closures, not a class: a class's methods are looked up at each call, and an answer
    could replace them; these inner functions reach each other, and everything they
    call, through cells bound here, before any answer runs.
    """
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from idemlib.course.exercises.feedback import NOT_ANSWERED, Feedback

    class Shell(InteractiveShell):
        def enable_gui(self, gui: Any = None) -> None:
            """No window to show: ``%matplotlib`` in a cell keeps the Agg backend, drawing nothing."""

    config = Config()
    config.HistoryManager.enabled = False  # no history thread, no database file
    shell = Shell.instance(config=config)
    main, strict, keep = threading.get_ident(), [False], []
    start_thread, new_lock, pause = _thread.start_new_thread, _thread.allocate_lock, time.sleep
    state: dict[str, Any] = {"found": [], "checks": {}, "sequence": 0}
    write, sign, frames, kill, leave, is_collecting, stop_collecting = (
        os.write, _hashlib.hmac_digest, sys._current_frames, os.kill, os._exit, gc.isenabled, gc.disable)
    kind_of, text, count, compare, fields_of = type, repr, len, changed, Feedback.__dict__["__dict__"].__get__
    sigkill, no_process, tampered_exit = signal.SIGKILL, ProcessLookupError, TAMPERED_EXIT
    wait_any, no_hang, no_child = os.waitpid, os.WNOHANG, ChildProcessError
    job, a_tuple, a_str, a_bool, a_dict, counting = _job, tuple, str, bool, dict, range
    interrupt = _thread_interrupter()
    sys.addaudithook(_audit_hook(main, strict, report))

    def send(*record: Any) -> None:
        """One signed line: its number, then the record, so none can be added, dropped or replayed."""
        state["sequence"] += 1
        payload = text((state["sequence"], *record)).encode()
        write(report, b"S " + sign(key, payload, "sha256").hex().encode() + b" " + payload + b"\n")

    def run(kind: str, source: str, check: Any = None, name: str = "",
            seconds: float = cell_seconds) -> tuple[str, list[Any]]:
        """Run one job in a thread of its own and wait for that thread to be gone; a job over time is
        interrupted, then given up on. Returns how it ended and its slot, to be read after :func:`inspect`.
        A new thread per job: no queue or thread outlives a job for an answer to write into."""
        slot: list[Any] = [("error", "")]
        done = new_lock()
        done.acquire()
        ident = start_thread(job, (slot, done, keep, shell, kind, source, check, name))
        ended = "ok" if done.acquire(True, seconds) else ""
        if not ended:
            interrupt(ident)()
            ended = "timed out" if done.acquire(True, 5) else "stuck"
        for _ in counting(200):  # the thread's last moments, after it said it was done
            if ident not in frames():
                break
            pause(0.01)
        return ended, slot

    def inspect(exercise: str) -> None:
        """After any code ran in a job's thread: report tampering found and stop, else carry on."""
        found = compare(state["found"])
        extra = count(frames()) - 1  # but the main thread
        if extra > 0:
            found.append(f"{extra} thread(s) it started still running")
        if is_collecting():
            found.append("the garbage collector switched back on")
        if found:
            send("check tampered", exercise, "; ".join(found[:6]))
            leave(tampered_exit)
        if stop_others:
            reap()
            try:
                kill(-1, sigkill)  # only this sandbox's processes: its own user, or its own pid namespace
            except no_process:
                return
            reap()
            send("note", exercise, "processes it started were still running; they were stopped")

    def reap() -> None:
        """Collect the exit status of every child that has ended, so none lingers as a zombie."""
        try:
            while wait_any(-1, no_hang)[0] > 0:
                pass
        except no_child:
            pass

    def verdict(exercise: str, value: Any) -> None:
        """Send the check's verdict, read only from the course's own Feedback and plain fields."""
        fields = fields_of(value) if kind_of(value) is Feedback else None
        correct, message = (fields.get("correct"), fields.get("message")) if kind_of(fields) is a_dict else (0, 0)
        if kind_of(correct) is not a_bool or kind_of(message) is not a_str:
            send("not run", exercise, "the check did not return a verdict")
        elif correct:
            send("right", exercise, message)
        else:
            send("blank" if message.startswith(NOT_ANSWERED) else "wrong", exercise, message)

    def begin_strict(exercises: list[str]) -> None:
        """Before the first answer: take the checks as the lesson imported them, fingerprint, turn strict."""
        run("cell", "raise TimeoutError('a first traceback loads what showing one needs')")
        import idemlib.course.exercises as every_check  # for a check the lesson's cells did not import

        state["checks"] = {name: shell.user_ns.get(name) or getattr(every_check, name, None) for name in exercises}
        state["found"] = fingerprint()
        gc.collect()
        stop_collecting()  # a collection could run an answer's finalizer in the main thread
        strict[0] = True

    def grade(steps: list[dict[str, str]]) -> None:
        """Every step in order: lesson cells, the hand-in's answers, the lesson's checks."""
        for step in steps:
            kind, exercise = step["kind"], step.get("exercise", "")
            if kind == "answer" and not strict[0]:
                begin_strict([s["exercise"] for s in steps if s["kind"] == "check"])
            seconds = setup_seconds if kind == "setup" else cell_seconds
            if kind == "check":
                ended, slot = run("check", step["source"], state["checks"].get(exercise), exercise)
            else:
                ended, slot = run("cell", step["source"], seconds=seconds)
            if ended == "stuck":  # its thread runs on: nothing after it can be trusted, or needs to be
                send("timed out", exercise, f"the {kind} cell did not stop when interrupted after {seconds:g} s")
                leave(0)
            if strict[0]:
                inspect(exercise)
            # Read only now, with no other thread left: (how it went, the check's value or what went wrong).
            entry = slot[0]
            plain = kind_of(entry) is a_tuple and count(entry) == 2 and kind_of(entry[0]) is a_str
            outcome, value = (entry if plain else ("error", "")) if ended == "ok" else (ended, "")
            problem = value if kind_of(value) is a_str else ""
            if outcome == "timed out":
                send("timed out", exercise, f"the {kind} cell ran over {seconds:g} s and was interrupted")
            elif kind == "check":
                verdict(exercise, value) if outcome == "ok" else send("not run", exercise, problem)
            elif kind == "answer" and outcome == "error":
                send("answer failed", exercise, problem)
        send("done")

    return grade


def _thread_interrupter() -> Any:
    """``interrupt(ident)`` gives a function raising TimeoutError in that thread, as Ctrl-C would in a notebook.

    Its own handle on the C function and ready-made arguments: nothing an answer can reach or replace."""
    import ctypes

    set_async = ctypes.PyDLL(None).PyThreadState_SetAsyncExc
    error = ctypes.py_object(TimeoutError)

    def interrupt(ident: int | None) -> Any:
        thread = ctypes.c_ulong(ident or 0)
        return lambda: set_async(thread, error)

    return interrupt


def _undumpable() -> None:
    """No other process of the same user may trace this one or read its memory (a program an answer starts)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def main(argv: list[str] | None = None) -> None:
    """``python -m idemlib.course.referee REPORT_FD CELL_SECONDS SETUP_SECONDS [--stop-others]``;
    the job comes on stdin."""
    args = sys.argv[1:] if argv is None else argv
    report, cell_seconds, setup_seconds = int(args[0]), float(args[1]), float(args[2])
    stop_others = "--stop-others" in args
    stdin = sys.stdin.buffer
    key = bytes.fromhex(stdin.readline().decode().strip())
    steps = json.loads(stdin.read().decode())
    for number in (signal.SIGINT, signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_IGN)  # an answer may raise these; only the main thread could handle them
    _undumpable()
    referee(key, report, cell_seconds, setup_seconds, stop_others and os.getuid() != 0)(steps)
    os._exit(0)


if __name__ == "__main__":
    main()
