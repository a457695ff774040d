"""The referee: in a hand-in's sandbox, runs the lesson's needed cells and the hand-in's answer cells,
and sends each exercise's answer values, as data, to the grader's judge (:mod:`idemlib.course.judge`).

``python -m idemlib.course.referee REPORT_FD TO_JUDGE_FD FROM_JUDGE_FD CELL_SECONDS [--stop-others]``;
its job comes on standard input as JSON: the steps (a lesson cell, an answer cell of the hand-in,
or the answer values a check takes: the expressions of the check cell's arguments that are not
literals) and the check modules' stand-ins.

Nothing here is trusted, and nothing needs to be: the referee computes no verdict and holds no
key. A hand-in can change anything in this process (it shares it with the answers) and gain
nothing but a wrong value for its own answers. What it does keep honest hand-ins safe from:

- The lesson's check modules are not here. In their place (in ``sys.modules``, before any cell
  runs) are stand-ins with the modules' plain constants (the named options an answer uses) and,
  for each check, a function that only says the grader judges it: no answer can call a check's
  helpers to work the expected answer out, and their files are not in the sandbox to read.
- Each cell, each argument and each call of an answer's function the judge asks for is bounded
  in time (an alarm interrupts it as Ctrl-C would); one that will not stop ends the run, said.
- After each answer, processes it left running are stopped, where the sandbox's processes are
  its own (a user of its own, a process namespace), and said in a note.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
import threading
import types
from typing import Any

from idemlib.course.carry import Lines, TooLarge, decode, dump, encode, load, write_all

GRACE = 5.0  # seconds past a limit before a step that ignores the interrupt ends the run


class Referee:
    """One hand-in's run: its IPython shell, its answers' functions by handle, and its three pipes."""

    def __init__(self, report: int, to_judge: int, from_judge: int, cell_seconds: float, stop_others: bool) -> None:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        class Shell(InteractiveShell):
            def enable_gui(self, gui: Any = None) -> None:
                """No window to show: ``%matplotlib`` in a cell keeps the Agg backend, drawing nothing."""

        config = Config()
        config.HistoryManager.enabled = False  # no history thread, no database file
        self.shell = Shell.instance(config=config)
        self.report, self.to_judge, self.from_judge = report, to_judge, Lines(from_judge)
        self.cell_seconds, self.stop_others = cell_seconds, stop_others
        self.functions: list[Any] = []
        self.calling = 0  # the call of a batch (the judge's call_each) that is running
        self.watch = threading.Condition()
        self.step: tuple[float, str] | None = None  # (deadline, what) of the step running now
        threading.Thread(target=self._watchdog, daemon=True).start()

    def say(self, **record: Any) -> None:
        write_all(self.report, encode(record))

    def _watchdog(self) -> None:
        """End the run when a step outlives its limit and its interrupt: nothing after it could run."""
        import time

        while True:
            with self.watch:
                step = self.step
                if step is not None and time.monotonic() > step[0]:
                    self.say(timed_out=["", step[1]])
                    os._exit(0)
                self.watch.wait(0.5)

    def bounded(self, what: str, seconds: float, action: Any) -> tuple[str, Any]:
        """``action()`` under an alarm of ``seconds``: ("ok", value), ("timed out", "") or ("error", text)."""
        import time

        with self.watch:
            self.step = (time.monotonic() + seconds + GRACE, f"{what} did not stop when interrupted after {seconds:g} s")
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return "ok", action()
        except TimeoutError as error:
            return ("timed out", "") if str(error) == "the time limit" else ("error", _said(error))
        except BaseException as error:  # noqa: BLE001 - any failure is a row, not a crash
            return "error", _said(error)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            with self.watch:
                self.step = None

    def cell(self, source: str) -> tuple[str, str]:
        def run() -> str:
            history = self.shell.user_ns.get("_ih")
            if isinstance(history, list):  # the cells' text, as a kernel keeps it: the restart rebuilds an answer's
                history.append(self.shell.transform_cell(source))  # globals from it (none was kept: no history)
            outcome = self.shell.run_cell(source, store_history=False, silent=True)
            if "matplotlib.pyplot" in sys.modules:  # figures are drawn for a reader; nobody reads them here
                sys.modules["matplotlib.pyplot"].close("all")
            error = outcome.error_before_exec or outcome.error_in_exec
            if isinstance(error, TimeoutError) and str(error) == "the time limit":
                raise error
            return _said(error) if error else ""

        how, problem = self.bounded("the cell", self.cell_seconds, run)
        return ("error" if how == "ok" and problem else how), problem

    def values(self, exercise: str, expressions: list[str]) -> None:
        """Evaluate the check cell's answer arguments and send them to the judge; serve its calls until it is done."""
        namespace = self.shell.user_ns

        def evaluate() -> list[Any]:
            return [dump(eval(compile(ast.parse(text, mode="eval"), "<check>", "eval"), namespace), self._keep)
                    for text in expressions]

        how, found = self.bounded("the check's arguments", self.cell_seconds, evaluate)
        if how == "ok":
            message = {"answer": exercise, "values": found}
        else:
            message = {"answer": exercise, "failed": "its answer ran over time" if how == "timed out"
                       else f"its answer could not be read: {found}"}
        try:
            write_all(self.to_judge, encode(message))
        except TooLarge as error:
            write_all(self.to_judge, encode({"answer": exercise, "failed": str(error)}))
        self.serve(exercise)

    def _keep(self, function: Any) -> int:
        self.functions.append(function)
        return len(self.functions) - 1

    def serve(self, exercise: str) -> None:
        """Answer the judge's calls of this hand-in's functions until it says the exercise is done."""
        while True:
            try:
                line = self.from_judge.read(None)
            except TooLarge:
                return
            if line is None:
                return
            message = decode(line)
            if "done" in message:
                return
            mode = next((key for key in ("call", "each", "restart") if key in message), "call")
            restart = mode == "restart"
            number = message.get(mode)
            if type(number) is not int or not 0 <= number < len(self.functions):
                continue
            function = self.functions[number]
            args, kwargs = load(message.get("args", [])), load(message.get("kwargs", {}))
            if restart:  # the function started again in a fresh process, here in the sandbox (a restarted consumer)
                how, value = self.bounded("the answer's function, restarted", self.cell_seconds,
                                          lambda: dump(_restarted(function, args, kwargs)))  # noqa: B023 - run now
            elif mode == "each":  # a batch of calls, one trip: the check's call_each
                how, value = self.bounded("the answer's function", self.cell_seconds,
                                          lambda: dump(self.each(function, args), self._keep))  # noqa: B023
            else:
                how, value = self.bounded("the answer's function", self.cell_seconds,
                                          lambda: dump(function(*args, **kwargs), self._keep))  # noqa: B023
            if how == "ok":
                reply = {"result": value}
            elif how == "timed out":
                reply = {"raised": ["TimeoutError", f"the call ran over {self.cell_seconds:g} s"]}
            else:
                name, _, text = value.partition(": ")
                reply = {"raised": [name, text]}
            if mode == "each" and how != "ok":
                reply["at"] = self.calling  # which call of the batch raised or ran over, for the check's hint
            try:
                line = encode(reply)
            except TooLarge as error:
                line = encode({"raised": ["ValueError", str(error)]})
            write_all(self.to_judge, line)

    def each(self, function: Any, calls: list[Any]) -> list[Any]:
        """``function`` called on each of ``calls``; :attr:`calling` is the number of the one running."""
        results = []
        for number, one in enumerate(calls):
            self.calling = number
            results.append(function(*one))
        self.calling = -1  # every call returned: a failure after this (its values cannot be carried) is no call's
        return results

    def stop_the_rest(self, exercise: str) -> None:
        """Stop the processes an answer left running (only this sandbox's: its own user or process namespace)."""
        if not self.stop_others:
            return
        keep, left = {1, os.getpid(), os.getppid()}, []  # a process namespace's first process is bubblewrap's
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in keep and _alive_and_ours(entry):
                left.append(int(entry))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        _reap()
        if left:
            self.say(note=[exercise, "processes it started were still running; they were stopped"])

    def grade(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            kind, exercise = step["kind"], step.get("exercise", "")
            if kind == "check":
                self.values(exercise, step["expressions"])
                continue
            how, problem = self.cell(step["source"])
            if how == "timed out":
                self.say(timed_out=[exercise, f"the {kind} cell ran over {self.cell_seconds:g} s and was interrupted"])
            elif kind == "answer" and how == "error":
                self.say(answer_failed=[exercise, problem])
            if kind == "answer":
                self.stop_the_rest(exercise)
        self.say(done=True)


def _said(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:300]
    except BaseException:  # noqa: BLE001 - its str is the hand-in's code
        return type(error).__name__


def _alive_and_ours(pid: str) -> bool:
    """A process of this user that is not a zombie (an ended process nobody collected is nothing to stop)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
        return os.stat(f"/proc/{pid}").st_uid == os.getuid() and state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


RESTART: list[types.ModuleType] = []  # the real runner, bound before the stand-ins take the checks' module names


def _restarted(function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """What ``function`` returns in a fresh process on another machine
    (:func:`~idemlib.course.exercises.restart.restarted`: rebuilt from the hand-in's text, never by a method the
    answer's object carries)."""
    [restart] = RESTART
    machine = restart.Machine(*kwargs["machine"])
    return restart.restarted(function, [tuple(item) for item in args], machine, int(kwargs["seed"]))


def install_stand_ins(stand_ins: dict[str, dict[str, Any]]) -> None:
    """Put the check modules' stand-ins in ``sys.modules``: their constants, and checks that only say the
    grader judges them; any other name says it stays with the grader."""
    from idemlib.course.exercises.feedback import Feedback

    def stand_in_check(name: str) -> Any:
        def check(*args: Any, **kwargs: Any) -> Feedback:
            return Feedback(False, "Not judged: while grading, the lesson's check runs with the grader", name)

        check.__name__ = name
        return check

    modules: dict[str, types.ModuleType] = {}
    for name, parts in stand_ins.items():
        module = types.ModuleType(name, "A stand-in while grading: the checks' code stays with the grader.")
        module.__dict__.update({key: load(value) for key, value in parts["constants"].items()})
        module.__dict__.update({check: stand_in_check(check) for check in parts["checks"]})
        module.__dict__["__getattr__"] = _kept_with_the_grader(name)
        modules[name] = module
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent in modules:
            setattr(modules[parent], child, module)
        elif parent in sys.modules:
            setattr(sys.modules[parent], child, module)
    feedback = sys.modules.get("idemlib.course.exercises.feedback")
    sys.modules.update(modules)
    if feedback is not None and "idemlib.course.exercises" in modules:
        exported = ("Feedback", "blank", "hint", "not_judged", "one_of", "right")
        modules["idemlib.course.exercises"].__dict__.update({key: getattr(feedback, key) for key in exported})
        modules["idemlib.course.exercises"].__dict__["feedback"] = feedback


def _kept_with_the_grader(module: str) -> Any:
    def missing(name: str) -> Any:
        raise AttributeError(f"{module}.{name} is not available while grading: the checks' own code stays with "
                             "the grader")

    return missing


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    report, to_judge, from_judge, cell_seconds = int(args[0]), int(args[1]), int(args[2]), float(args[3])
    job = json.loads(sys.stdin.buffer.read())

    def alarm(number: int, frame: Any) -> None:
        raise TimeoutError("the time limit")

    signal.signal(signal.SIGALRM, alarm)
    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_IGN)  # an answer may raise these at itself
    import idemlib.course.exercises.feedback  # noqa: F401 - the course modules of the checks' kept here
    import idemlib.course.exercises.restart

    RESTART.append(idemlib.course.exercises.restart)

    install_stand_ins(job["stand_ins"])
    referee = Referee(report, to_judge, from_judge, cell_seconds, "--stop-others" in args and os.getuid() != 0)
    referee.grade(job["steps"])
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
