"""The judge: a fresh process of the grader's that calls the lesson's checks on a hand-in's answers, as data.

It never runs a line of a hand-in's code. The referee, in the hand-in's sandbox, sends
each exercise's answer values as tagged JSON (:mod:`idemlib.course.carry`); the judge
calls the lesson's own check with them and writes the verdict to the grader. Where an
answer is a function, the check gets a :class:`AnswerFunction`: each call's arguments
go back to the sandbox as data, the function runs there, and its result (or the error
it raised, by name and message) comes back as data, each call bounded in time. So
nothing a hand-in does to its own interpreter (a patch, a finalizer, a thread, a write
to raw memory, a forged line) reaches a verdict, and no key is needed to trust one:
the sandbox sends no verdicts, only values.

Hidden cases: a check that is given a function and takes a keyword ``seed`` is also
called with a seed the grader drew, which no hand-in can know; the answer is right only
if it is right on the lesson's data and on the drawn data.

SQL a check runs here runs on DuckDB with file access off (``enable_external_access``
false, the configuration locked) and on SQLite without ``ATTACH``: a hand-in's SQL
reaches no file of the grader's.

``python -m idemlib.course.judge FROM_SANDBOX_FD TO_SANDBOX_FD``; its job comes on stdin, its
verdicts go to stdout, one JSON line each.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import json
import os
import sys
import time
from typing import Any

from idemlib.course.carry import Handle, Lines, TooLarge, decode, dump, encode, load, write_all
from idemlib.course.exercises.feedback import blame


class AnswerRaised(Exception):
    """An answer's function raised an error of its own class (shown by name and message)."""


class SandboxGone(Exception):
    """The hand-in's sandbox stopped answering: its function is not called again."""


class Sandbox:
    """The judge's end of the two pipes to the referee."""

    def __init__(self, incoming: int, outgoing: int, call_seconds: float) -> None:
        self.lines, self.outgoing, self.call_seconds, self.gone = Lines(incoming), outgoing, call_seconds, ""
        self.calls_cut_off = 0  # calls of the answer's functions that got no reply: the run had ended

    def send(self, message: dict[str, Any]) -> None:
        if self.gone:
            return
        try:
            write_all(self.outgoing, encode(message))
        except OSError:
            self.gone = "the hand-in's run had ended"

    def receive(self, seconds: float, wanted: tuple[str, ...]) -> dict[str, Any]:
        """The next message holding one of ``wanted`` (any other line is left out: whatever else a hand-in
        writes here only costs it time); :class:`SandboxGone` if the run ended, ran out of time or sent too much."""
        if self.gone:
            raise SandboxGone(self.gone)
        deadline = time.monotonic() + seconds
        try:
            while True:
                line = self.lines.read(max(0.0, deadline - time.monotonic()))
                if line is None:
                    self.gone = "the hand-in's run ended"
                    break
                try:
                    message = decode(line)
                except TooLarge:
                    raise
                except (ValueError, UnicodeDecodeError):
                    continue
                if any(key in message for key in wanted):
                    return message
        except TimeoutError:
            self.gone = f"the answer did not respond within {seconds:g} s"
        except TooLarge as error:
            self.gone = f"the hand-in's run sent too much ({str(error)[:80]})"
        raise SandboxGone(self.gone)

    def call(self, handle: Handle, args: tuple[Any, ...], kwargs: dict[str, Any], *, mode: str = "call") -> Any:
        """Call the hand-in's function ``handle`` in its sandbox (``mode`` "each": once per tuple in ``args``;
        "restart": in a fresh process there, as a restarted consumer would); its value, or its error raised here."""
        self.send({mode: handle.number, "args": dump(list(args)), "kwargs": dump(kwargs)})
        try:
            reply = self.receive(self.call_seconds, ("result", "raised"))
        except SandboxGone:
            self.calls_cut_off += 1
            raise
        if "result" in reply:
            return wrapped(load(reply["result"]), self)
        raised = reply.get("raised")
        name, message = (raised + ["", ""])[:2] if type(raised) is list else ("", "")
        kind = getattr(builtins, str(name), None)
        if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, Warning):
            error: Exception = kind(str(message)[:300])
        else:
            error = AnswerRaised(f"{str(name)[:60]}: {str(message)[:300]}")
        at = reply.get("at")
        if mode == "each" and type(at) is int and 0 <= at < len(args):  # the call of the batch that raised
            blame(error, tuple(args[at]))
        raise error


BATCH = 20_000  # calls per trip to the sandbox: well inside what one message may carry (carry.ITEMS)


class AnswerFunction:
    """A hand-in's function as the check sees it: call it with plain data, get plain data back."""

    def __init__(self, handle: Handle, sandbox: Sandbox) -> None:
        self._handle, self._sandbox = handle, sandbox

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._sandbox.call(self._handle, args, kwargs)
        except SandboxGone as gone:
            raise TimeoutError(str(gone)) from None

    def call_each(self, arguments: list[tuple[Any, ...]]) -> list[Any]:
        """The function called on each tuple of ``arguments``, in the sandbox, a batch of calls per trip
        (:func:`~idemlib.course.exercises.feedback.call_each`); the first error raised stops it, raised here."""
        results: list[Any] = []
        for start in range(0, len(arguments), BATCH):
            batch = [list(args) for args in arguments[start:start + BATCH]]
            try:
                results += self._sandbox.call(self._handle, tuple(batch), {}, mode="each")
            except SandboxGone as gone:
                raise TimeoutError(str(gone)) from None
        return results

    def in_fresh_process(self, arguments: Any, machine: Any, seed: int) -> list[Any]:
        """The function's answers for ``arguments`` in a fresh process on ``machine``, run in the hand-in's sandbox
        (the check's restart test, :func:`~idemlib.course.exercises.restart.in_fresh_process`)."""
        try:
            return self._sandbox.call(self._handle, tuple(list(item) for item in arguments),
                                      {"machine": [machine.host, machine.zone, machine.seconds_later], "seed": seed},
                                      mode="restart")
        except SandboxGone as gone:
            raise TimeoutError(str(gone)) from None

    def __repr__(self) -> str:
        return "<the answer's function>"


def wrapped(value: Any, sandbox: Sandbox) -> Any:
    """``value`` with every :class:`Handle` in it made an :class:`AnswerFunction` (containers rebuilt)."""
    if type(value) is Handle:
        return AnswerFunction(value, sandbox)
    if type(value) is list:
        return [wrapped(item, sandbox) for item in value]
    if type(value) is tuple:
        return tuple(wrapped(item, sandbox) for item in value)
    if type(value) is dict:
        return {key: wrapped(item, sandbox) for key, item in value.items()}
    return value


def has_function(value: Any) -> bool:
    if type(value) is Handle:
        return True
    if type(value) in (list, tuple):
        return any(has_function(item) for item in value)
    return type(value) is dict and any(has_function(item) for item in value.values())


def closed_databases() -> None:
    """DuckDB without file access and SQLite without ATTACH, for every connection a check opens here."""
    import sqlite3

    import duckdb

    connect = duckdb.connect

    def duckdb_connect(database: Any = ":memory:", read_only: bool = False, config: Any = None, **rest: Any) -> Any:
        settings = {**(config or {}), "enable_external_access": False, "lock_configuration": True}
        return connect(database, read_only, settings, **rest)

    duckdb.connect = duckdb_connect
    sqlite_connect = sqlite3.connect

    def sqlite3_connect(*args: Any, **kwargs: Any) -> Any:
        connection = sqlite_connect(*args, **kwargs)
        connection.set_authorizer(lambda action, *_: sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_ATTACH
                                  else sqlite3.SQLITE_OK)
        return connection

    sqlite3.connect = sqlite3_connect


def verdict_of(feedback: Any) -> tuple[str, str]:
    from idemlib.course.exercises.feedback import Feedback

    if type(feedback) is not Feedback or type(feedback.correct) is not bool or type(feedback.message) is not str:
        return "not run", "the check did not return a verdict"
    return feedback.verdict, feedback.message


def judge(job: dict[str, Any], sandbox: Sandbox, write: Any) -> None:
    """Each exercise of ``job`` in order: wait for its answer's values, call its check, write the verdict."""
    deadline = time.monotonic() + float(job["seconds"])
    for check in job["checks"]:
        exercise = check["exercise"]
        try:
            message = sandbox.receive(max(0.1, deadline - time.monotonic()), ("answer",))
            while message.get("answer") != exercise:  # an exercise it skipped, or a line it forged
                message = sandbox.receive(max(0.1, deadline - time.monotonic()), ("answer",))
        except SandboxGone as gone:
            write({"exercise": exercise, "verdict": "not run", "message": f"no answer came: {gone}", "cut_off": True})
            continue
        verdict, said = "not run", str(message.get("failed", ""))[:300]
        cut_off = False
        if "values" in message:
            calls_cut_off = sandbox.calls_cut_off
            try:
                values = [load(value) for value in message["values"]]
                verdict, said = call_check(check, values, sandbox, int(job["seed"]))
            except Exception as error:  # noqa: BLE001 - a check that breaks on an answer is a row, not a crash
                verdict, said = "not run", f"the check could not run: {type(error).__name__}: {str(error)[:200]}"
            if sandbox.calls_cut_off > calls_cut_off and verdict != "right":  # the check called the answer after
                # its run had ended (its time was up): the check's hint would blame the answer, so it is not run
                verdict, said, cut_off = "not run", f"the check could not finish: {sandbox.gone}", True
        # "cut_off": the hand-in's run was gone before this check was done, which the grader words by how it ended
        write({"exercise": exercise, "verdict": verdict, "message": said, "cut_off": cut_off})
        sandbox.send({"done": exercise})  # the referee goes on to the next answer


def call_check(check: dict[str, Any], values: list[Any], sandbox: Sandbox, seed: int) -> tuple[str, str]:
    """The check called with the lesson's own literal arguments and the hand-in's values in their places;
    then, if it was given a function and takes ``seed``, again on the grader's hidden data."""
    function = getattr(importlib.import_module(check["module"]), check["name"])
    answers = iter(wrapped(value, sandbox) for value in values)
    args = [next(answers) if "answer" in arg else load(arg["literal"]) for arg in check["args"]]
    kwargs = {key: next(answers) if "answer" in arg else load(arg["literal"]) for key, arg in check["kwargs"].items()}
    verdict, said = verdict_of(function(*args, **kwargs))
    hidden = "seed" in inspect.signature(function).parameters and "seed" not in kwargs
    if verdict == "right" and hidden and any(has_function(value) for value in values):
        again, hint = verdict_of(function(*args, **kwargs, seed=seed))
        if again != "right":
            return ("wrong" if again == "wrong" else again,
                    f"right on the lesson's data, not on other data the grader drew: {hint}")
    return verdict, said


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(sys.stdin.buffer.read())
    from idemlib.course.exercises import feedback

    feedback.GRADERS_PROXY.append(AnswerFunction)  # the checks call a hand-in's function through this class only
    closed_databases()
    for check in job["checks"]:  # before the first answer arrives, not in its time (a package imports on first use)
        getattr(importlib.import_module(check["module"]), check["name"], None)
    sandbox = Sandbox(int(args[0]), int(args[1]), float(job["call_seconds"]))
    verdicts = os.dup(1)  # the verdicts' own descriptor: what a check prints goes to stderr instead
    os.dup2(2, 1)

    def write(record: dict[str, Any]) -> None:
        write_all(verdicts, (json.dumps(record, ensure_ascii=True) + "\n").encode())

    judge(job, sandbox, write)


if __name__ == "__main__":
    main()
