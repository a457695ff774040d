"""The standard every exercise check meets, as one reusable set of tests.

A lesson's test module declares ``BANKS = {"check_name": Bank(right=[...], wrong=[...])}``
and ends with ``test_bank = bank_tests(BANKS)``. Each entry of ``right`` and ``wrong``
is a tuple of the check's arguments (wrap a single answer as ``(answer,)``); a
``wrong`` entry may carry the words its hint must contain as ``Wrong(args, "words")``.
``tests/test_exercise_banks.py`` refuses a check that has no bank, or one too thin
to tell right from wrong (three wrong answers and two right ones at the least).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from idemlib.course import exercises

MIN_WRONG = 3
MIN_RIGHT = 2


@dataclass(frozen=True)
class Wrong:
    """A plausible wrong answer, and (optionally) words its hint must contain."""

    args: tuple
    hint_contains: str = ""


@dataclass(frozen=True)
class Bank:
    """Right answers a check must accept and wrong ones it must refuse with a hint."""

    right: list[tuple] = field(default_factory=list)
    wrong: list[tuple | Wrong] = field(default_factory=list)
    # What the check is called with for "not answered yet" (a student copy's blanks).
    blank: tuple = (...,)


def _wrongs(bank: Bank) -> list[Wrong]:
    return [w if isinstance(w, Wrong) else Wrong(w) for w in bank.wrong]


def bank_tests(banks: dict[str, Bank]) -> Callable[..., None]:
    """One parametrised test that runs every right, wrong and blank answer of ``banks``."""
    cases = []
    for name, bank in banks.items():
        cases += [pytest.param(name, "right", args, "", id=f"{name}-right-{i}") for i, args in enumerate(bank.right)]
        cases += [pytest.param(name, "wrong", w.args, w.hint_contains, id=f"{name}-wrong-{i}")
                  for i, w in enumerate(_wrongs(bank))]
        cases.append(pytest.param(name, "blank", bank.blank, "", id=f"{name}-blank"))

    @pytest.mark.parametrize(("name", "kind", "args", "words"), cases)
    def test_bank(name: str, kind: str, args: tuple, words: str) -> None:
        check: Callable[..., Any] = getattr(exercises, name)
        feedback = check(*args)
        if kind == "right":
            assert feedback, f"{name} refused a right answer {args!r}: {feedback.message}"
        elif kind == "blank":
            assert not feedback and "Not answered yet" in feedback.message, feedback
        else:
            assert not feedback, f"{name} accepted a wrong answer {args!r}"
            assert "Not answered yet" not in feedback.message, f"{name} took a wrong answer {args!r} for a blank"
            assert feedback.message.strip(), f"{name} gave no hint for {args!r}"
            assert words.lower() in feedback.message.lower(), f"hint for {args!r} lacks {words!r}: {feedback.message}"

    return test_bank
