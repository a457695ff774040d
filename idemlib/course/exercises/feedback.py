"""The verdict every exercise check returns: right, not yet (with a hint), or not answered yet.

Besides text and HTML for the reader, a verdict is displayed as a small JSON
document of its own MIME type (:data:`VERDICT_MIME`) naming the exercise and the
verdict, for tools that read executed notebooks. Grading believes no displayed
verdict: ``idemlib.course.referee`` calls each check again itself and reads the
``Feedback`` it returns, and no grading depends on the wording of a message.
"""

from __future__ import annotations

import dataclasses
import functools
import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

VERDICT_MIME = "application/vnd.idemlib.verdict+json"
NOT_ANSWERED = "Not answered yet"


@dataclass(frozen=True)
class Feedback:
    """The verdict of a check: right or not, what to do next, and which exercise it answers."""

    correct: bool
    message: str
    exercise: str = ""

    @property
    def verdict(self) -> str:
        """``right``, ``wrong`` or ``blank`` (the answer is still ``...``)."""
        if self.correct:
            return "right"
        return "blank" if self.message.startswith(NOT_ANSWERED) else "wrong"

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"{'✓ Correct' if self.correct else '✗ Not yet'}: {self.message}"

    def _repr_html_(self) -> str:
        colour, mark = ("#2b8a3e", "✓ Correct") if self.correct else ("#b3541e", "✗ Not yet")
        return (f'<div class="idemlib-feedback" style="border-left:4px solid {colour};padding:4px 10px">'
                f"<b style='color:{colour}'>{mark}:</b> {html.escape(self.message)}</div>")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {
            "text/plain": repr(self),
            "text/html": self._repr_html_(),
            VERDICT_MIME: {"exercise": self.exercise, "verdict": self.verdict, "message": self.message},
        }


def exercise(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Mark ``check`` as an exercise check: every verdict it returns names the exercise (the check's name)."""

    @functools.wraps(check)
    def named(*args: Any, **kwargs: Any) -> Feedback:
        return dataclasses.replace(check(*args, **kwargs), exercise=check.__name__)

    return named


def right(message: str) -> Feedback:
    return Feedback(True, message)


def hint(message: str) -> Feedback:
    return Feedback(False, message)


def blank(answer: Any, what: str) -> Feedback | None:
    if answer is ... or answer is None:
        return hint(f"{NOT_ANSWERED}: replace ... with {what}, run that cell, then run this check again.")
    return None
