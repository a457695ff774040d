"""The verdict every exercise check returns: right, not yet (with a hint), or not answered yet.

Besides text and HTML for the reader, a verdict is displayed as a small JSON
document of its own MIME type (:data:`VERDICT_MIME`) naming the exercise and the
verdict, for tools that read executed notebooks. Grading believes no displayed
verdict: the grader's judge (``idemlib.course.judge``), a process no student code runs in, calls each
check itself on the answers the sandbox sends and reads the ``Feedback`` it returns, and no grading
depends on the wording of a message.

What an answer may be, so that grading can carry it out of the hand-in's sandbox as data and judge it
in a process no student code ever ran in:

- plain data: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, and ``list``, ``tuple``,
  ``dict``, ``set`` and ``frozenset`` of plain data; a named option (:func:`one_of`) is a ``str``;
  SQL is a ``str``;
- or a function whose arguments and results are plain data. A check only calls it; it never reads its
  source, closure or attributes, and never hands it a live object (a connection, a simulator context).

No check parses free English: a *which* or *what happens* is one of the named options the exercise
prints, a number, a set, SQL or a function.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import html
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

VERDICT_MIME = "application/vnd.idemlib.verdict+json"
NOT_ANSWERED = "Not answered yet"
NOT_JUDGED = "Not judged"


@dataclass(frozen=True)
class Feedback:
    """The verdict of a check: right or not, what to do next, and which exercise it answers."""

    correct: bool
    message: str
    exercise: str = ""

    @property
    def verdict(self) -> str:
        """``right``, ``wrong``, ``blank`` (the answer is still ``...``) or ``not judged`` (the check could
        not run here, a server it needs being down, say: neither right nor wrong)."""
        if self.correct:
            return "right"
        if self.message.startswith(NOT_ANSWERED):
            return "blank"
        return "not judged" if self.message.startswith(NOT_JUDGED) else "wrong"

    def __bool__(self) -> bool:
        return self.correct

    @property
    def _mark(self) -> tuple[str, str]:
        """The verdict's colour and words: a symbol and a word as well as a colour, never colour alone."""
        # Each colour reads at 4.5:1 or more on the box's white, which the box keeps in a dark theme too.
        return {"right": ("#237a36", "✓ Correct"), "not judged": ("#5f6368", "○ Not judged"),
                "blank": ("#5f6368", "… Not answered")}.get(self.verdict, ("#b3541e", "✗ Not yet"))

    def __repr__(self) -> str:
        mark = self._mark[1]
        # The message already says "Not answered yet" / "Not judged"; the mark does not repeat it.
        return self.message if self.verdict in ("blank", "not judged") else f"{mark}: {self.message}"

    def _repr_html_(self) -> str:
        colour, mark = self._mark
        body = html.escape(self.message) if self.verdict in ("blank", "not judged") else (
            f"<b style='color:{colour}'>{mark}:</b> {html.escape(self.message)}")
        return (f'<div class="idemlib-feedback" style="border-left:4px solid {colour};padding:4px 10px;'
                f'background:#ffffff;color:#202124">'
                f"{body}{self._solution()[0]}</div>")

    def _solution(self) -> tuple[str, str]:
        """What a judged verdict offers (HTML, text): its exercise's solution, read from the full lesson
        (:mod:`idemlib.course.solutions`); nothing for a blank or unjudged answer, or in the full lesson."""
        if self.verdict not in ("right", "wrong") or not self.exercise:
            return "", ""
        from idemlib.course.solutions import offer  # only on display: checks and grading never need it

        found = offer(self.exercise, self.correct)
        return (found[0], "\n" + found[1]) if found else ("", "")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/plain": repr(self) + self._solution()[1],
            "text/html": self._repr_html_(),
            VERDICT_MIME: {"exercise": self.exercise, "verdict": self.verdict, "message": self.message},
        }


def exercise(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Mark ``check`` as an exercise check: every verdict it returns names the exercise (the check's name).

    The check runs with Python's cycle collector paused: a check at scale holds 300,000 records while it
    judges, and each full collection meanwhile walks every one of them again (half such a check's time).
    Reference counting still frees what the check drops; cycles it leaves wait for the collector's next run."""

    @functools.wraps(check)
    def named(*args: Any, **kwargs: Any) -> Feedback:
        collecting = gc.isenabled()
        gc.disable()
        try:
            return dataclasses.replace(check(*args, **kwargs), exercise=check.__name__)
        finally:
            if collecting:
                gc.enable()

    return named


def right(message: str) -> Feedback:
    return Feedback(True, message)


def hint(message: str) -> Feedback:
    return Feedback(False, message)


# The grader's stand-in for a hand-in's function (idemlib.course.judge.AnswerFunction): only the grader's judge puts
# its class here, in its own process. A check takes the batched calls and the restart in the sandbox only from an
# object of exactly this class, never from a method an answer carries: an answer's own ``call_each`` or
# ``in_fresh_process`` could answer from its memory.
GRADERS_PROXY: list[type] = []


def graders_proxy(function: Any) -> bool:
    """Whether ``function`` is the grader's stand-in for a hand-in's function (see :data:`GRADERS_PROXY`)."""
    return type(function) in GRADERS_PROXY


CALL_SECONDS = 10.0  # how long one call of an answer's function may take in a notebook before the check gives up


def call_each(function: Any, arguments: Sequence[tuple[Any, ...]]) -> list[Any]:
    """``function`` called on each tuple of ``arguments``, in order. A check that calls an answer's function on
    many inputs calls it through this: while grading, the function is in the hand-in's sandbox, and the grader's
    stand-in for it takes the calls in batches (one trip to the sandbox for thousands of calls, not one each).

    In a notebook each call may take :data:`CALL_SECONDS`; one that takes longer (a loop that never ends) raises
    ``TimeoutError`` saying so. Whichever call raised, :func:`failed_call` gives its arguments."""
    if graders_proxy(function):
        results = list(function.call_each(arguments))
        if len(results) != len(arguments):  # one result per call, or the check would judge fewer than it asked
            raise ValueError(f"{len(results):,} results came back for {len(arguments):,} calls; answer with a plain "
                             "function, one result per call")
        return results
    results = []
    with _time_limited() as calling:
        for args in arguments:
            calling.start()
            try:
                results.append(function(*args))
            except Exception as error:
                blame(error, args)
                raise
    return results


def failed_call(error: BaseException) -> tuple[Any, ...] | None:
    """The arguments of the call that raised ``error`` in :func:`call_each`, if it was raised there."""
    found = error.__dict__.get(_CALL) if hasattr(error, "__dict__") else None
    return found if isinstance(found, tuple) else None


_CALL = "_idemlib_failed_call"


def blame(error: BaseException, args: tuple[Any, ...]) -> None:
    """Mark ``error`` as raised by the call with ``args`` (for :func:`failed_call`)."""
    try:
        error.__dict__.setdefault(_CALL, tuple(args))  # the innermost call_each names it first
    except Exception:  # noqa: BLE001 - an answer's exception class may refuse attributes: then no call is named
        pass


class _time_limited:  # noqa: N801 - used as a context manager, named for the with statement
    """A timer that interrupts a call running longer than :data:`CALL_SECONDS` with ``TimeoutError``.

    A signal every second checks the running call's age, so 300,000 calls cost a handful of signals rather than
    two system calls each. Only in the main thread, and only when no one else uses the process's alarm (the
    grader's sandbox bounds its calls with its own)."""

    def __enter__(self) -> _time_limited:
        self.started, self.armed = time.monotonic(), False
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)):
            signal.signal(signal.SIGALRM, self._check)
            signal.setitimer(signal.ITIMER_REAL, 1.0, 1.0)
            self.armed = True
        return self

    def start(self) -> None:
        self.started = time.monotonic()

    def _check(self, number: int, frame: Any) -> None:
        if time.monotonic() - self.started > CALL_SECONDS:
            self.started = time.monotonic()  # one interrupt per stuck call
            raise TimeoutError(f"it did not return within {CALL_SECONDS:g} s")

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)


def not_judged(why: str) -> Feedback:
    """The check could not judge here (``why``: what was missing, and how to get it); neither right nor wrong."""
    return Feedback(False, f"{NOT_JUDGED}: {why}")


def one_of(answer: Any, options: Iterable[str], what: str = "the answer") -> str | Feedback:
    """``answer`` as one of the named ``options`` the exercise prints, or a hint that lists the valid ones.

    A name is compared whole, in any letter case and with its spaces run together ("B  at Commit" is
    "B at commit"): a typed name differs from the printed one in those ways only by accident. Named
    options replace free English: a check never guesses what a sentence meant."""
    valid = list(options)
    by_spelling = {_spelling(option): option for option in valid}
    if isinstance(answer, str) and len(by_spelling) == len(valid) and _spelling(answer) in by_spelling:
        return by_spelling[_spelling(answer)]
    shown = ", ".join(repr(option) for option in valid)
    # what[:1].upper(), not capitalize(): that would lowercase the names quoted in it, the exercise's own keys
    return hint(f"{what[:1].upper()}{what[1:]} is one of the names the exercise prints: {shown}; {answer!r} is not one of them.")


def _spelling(name: str) -> str:
    """A named option as compared: its words, single-spaced, in one letter case."""
    return " ".join(name.split()).casefold()


def one_each(answer: Any, keys: Iterable[str], options: Iterable[str], what: str,
             keys_named: str = "") -> dict[str, str] | Feedback:
    """``answer`` as a dict from each of ``keys`` to one of the named ``options``, or the hint that says what
    is off: the key that is not one of ``keys`` (``keys_named`` says what they are), the key named twice or
    missing, or ``what`` of the first key whose value is not one of the options. Keys and values are names
    compared as :func:`one_of` compares them, in any letter case and spacing."""
    keys, options = list(keys), list(options)
    shape = f"Answer with a dict whose keys are exactly {keys_named or ''}{keys}, each mapped to one of {options}."
    if not isinstance(answer, dict):
        return hint(shape)
    given: dict[str, str] = {}
    for key, value in answer.items():
        name = one_of(key, keys) if isinstance(key, str) else None
        if not isinstance(name, str):
            return hint(f"{shape} {key!r} is not one of those keys.")
        if name in given:
            return hint(f"{shape} {key!r} names {name!r} a second time.")
        named = one_of(value, options, f"{what} of {name!r}")
        if not isinstance(named, str):
            return named
        given[name] = named
    if missing := [key for key in keys if key not in given]:
        return hint(f"{shape} {missing[0]!r} has no value.")
    return given


def blank(answer: Any, what: str) -> Feedback | None:
    if answer is ... or answer is None:
        return hint(f"{NOT_ANSWERED}: replace ... with {what}, run that cell, then run this check again.")
    return None
