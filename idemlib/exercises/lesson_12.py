"""Checks for lesson 12, Case study: one loan account."""

from __future__ import annotations

from typing import Any

from idemlib.design_review import Design, five_questions
from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right

__all__ = ["REVIEW_EXERCISE", "check_five_answers", "check_safe_design"]

REVIEW_EXERCISE = Design("check outside the transaction, keys kept 1 h", guard="check outside", key_hours=1)
"""The design exercise 1 asks about: two of the mistakes at once, a check outside the transaction and short-lived keys."""

_WORDS = {"yes": True, "y": True, "true": True, "no": False, "n": False, "false": False}


def _yes_no(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower())
    return None


@exercise
def check_five_answers(answers: Any) -> Feedback:
    """Lesson 12: the five questions answered (yes or no, in order) for :data:`REVIEW_EXERCISE`, checked by running it."""
    if (missing := blank(answers, 'five answers in order, e.g. ["yes", "no", "yes", "yes", "no"]')) is not None:
        return missing
    if isinstance(answers, dict):
        answers = list(answers.values())
    if isinstance(answers, str) or not hasattr(answers, "__len__") or len(answers) != 5:
        return hint("Give a list of five answers, one per question, in the seed's order.")
    given = [_yes_no(answer) for answer in answers]
    if None in given:
        return hint("Answer each question with yes or no (True or False also do).")
    measured = [verdict.startswith("yes") for verdict in five_questions(REVIEW_EXERCISE)]
    wrong = [number for number, (mine, truth) in enumerate(zip(given, measured), start=1) if mine != truth]
    if wrong:
        first = wrong[0]
        clue = {
            1: "run it twice in your head: which guard sees the second delivery, and does it call the payment system?",
            2: "what does the payment system receive as the key on the second attempt of one payout?",
            3: "is the duplicate test in the same transaction as the account it protects?",
            4: "after a crash between the payout and the commit, what key does the retry hours later send?",
            5: "a key is passed on only if it names the message; does this one?",
        }[first]
        return hint(f"{len(wrong)} of the five answers are not what the run shows. Start with question {first}: {clue}")
    return right("every answer matches the run: two mistakes at once fail two questions, each its own.")


@exercise
def check_safe_design(design: Any) -> Feedback:
    """Lesson 12: a :class:`Design` for which the run answers all five questions yes."""
    if (missing := blank(design, 'a Design(...), e.g. Design("mine", guard=..., payout_key=..., key_hours=...)')) is not None:
        return missing
    if not isinstance(design, Design):
        return hint(f"That is a {type(design).__name__}; build a Design(label, guard=..., payout_key=..., key_hours=...).")
    try:
        review = five_questions(design)
    except (ValueError, TypeError) as error:
        return hint(f"That design does not run: {error}")
    failing = [number for number, verdict in enumerate(review, start=1) if not verdict.startswith("yes")]
    if failing:
        return hint(f"The run answers question{'s' * (len(failing) > 1)} {', '.join(map(str, failing))} with no. "
                    f"Read the table's row for your design, change one setting, and check again.")
    return right(f"{design.guard} with a {design.payout_key} key kept {design.key_hours:g} h answers all five questions yes.")
