"""The verdict every exercise check returns: right, not yet (with a hint), or not answered yet."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Feedback:
    """The verdict of a check: right or not, and what to do next."""

    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"{'✓ Correct' if self.correct else '✗ Not yet'}: {self.message}"

    def _repr_html_(self) -> str:
        colour, mark = ("#2b8a3e", "✓ Correct") if self.correct else ("#b3541e", "✗ Not yet")
        return (f'<div class="idemlib-feedback" style="border-left:4px solid {colour};padding:4px 10px">'
                f"<b style='color:{colour}'>{mark}:</b> {html.escape(self.message)}</div>")


def right(message: str) -> Feedback:
    return Feedback(True, message)


def hint(message: str) -> Feedback:
    return Feedback(False, message)


def blank(answer: Any, what: str) -> Feedback | None:
    if answer is ... or answer is None:
        return hint(f"Not answered yet: replace ... with {what}, run that cell, then run this check again.")
    return None
