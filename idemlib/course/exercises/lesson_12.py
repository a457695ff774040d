"""Checks for lesson 12, Case study: one loan account."""

from __future__ import annotations

from typing import Any

import numpy as np

from idemlib.case_study.design_review import Design, five_questions
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right

__all__ = ["LONGEST_OUTAGE_HOURS", "REVIEW_EXERCISE", "check_five_answers", "check_safe_design"]

REVIEW_EXERCISE = Design("no guard, keys kept 1 h", guard="none", key_hours=1)
"""The design exercise 1 asks about: section 2's unguarded service, its payout key derived, its keys kept one hour."""

LONGEST_OUTAGE_HOURS = 30.0
"""Exercise 2's team: the longest outage it has seen, so the latest a retry of the payout can come."""

_WORDS = {"yes": True, "y": True, "true": True, "no": False, "n": False, "false": False}


def _yes_no(value: Any) -> bool | None:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower())
    return None


@exercise
def check_five_answers(answers: Any) -> Feedback:
    """Lesson 12: the five questions answered (yes or no, in order) for :data:`REVIEW_EXERCISE`, checked by running it."""
    if (missing := blank(answers, 'five answers in order, e.g. ["yes", "no", "yes", "yes", "no"]')) is not None:
        return missing
    if isinstance(answers, dict):
        # Keys such as "q1".."q5" or 1..5 give the order; other keys keep the order written.
        numbers = ["".join(filter(str.isdigit, str(key))) for key in answers]
        ordered = sorted(numbers) == ["1", "2", "3", "4", "5"]
        answers = [answers[key] for _, key in sorted(zip(numbers, answers))] if ordered else list(answers.values())
    if isinstance(answers, str):
        answers = answers.replace(",", " ").split()  # "no, yes, no, no, yes" reads as five answers
    if not hasattr(answers, "__len__") or len(answers) != 5:
        return hint("Give a list of five answers, one per question, in the seed's order.")
    given = [_yes_no(answer) for answer in answers]
    if None in given:
        return hint("Answer each question with yes or no (True or False also do).")
    measured = [verdict.startswith("yes") for verdict in five_questions(REVIEW_EXERCISE)]
    wrong = [number for number, (mine, truth) in enumerate(zip(given, measured), start=1) if mine != truth]
    if wrong:
        first = wrong[0]
        clue = {
            1: "when the same message is delivered a second time, what in this service notices it?",
            2: "when the payout's answer is lost, the delivery fails and its transaction rolls back; "
               "which key does the repeated call send?",
            3: "think of a crash after the commit and before the ack: what is left to tell the redelivery it was done?",
            4: "the retry after a three-hour outage sends the same key: is it still there to be recognised?",
            5: "after a crash between the payout and the commit, does the payment system recognise the repeated call?",
        }[first]
        count = f"{len(wrong)} of the five answers {'is' if len(wrong) == 1 else 'are'}"
        return hint(f"{count} not what the run shows. Start with question {first}: {clue}")
    return right("every answer matches the run: no guard fails the account's questions (1 and 3), short keys fail "
                 "question 4, and the derived key still makes a repeated payout call harmless (2 and 5).")


@exercise
def check_safe_design(design: Any) -> Feedback:
    """Lesson 12: a :class:`Design` for which the runs answer all five questions yes, retries up to
    :data:`LONGEST_OUTAGE_HOURS` late included."""
    if (missing := blank(design, 'a Design(...), e.g. Design("mine", guard=..., payout_key=..., key_hours=...)')) is not None:
        return missing
    if not isinstance(design, Design):
        return hint(f"That is a {type(design).__name__}; build a Design(label, guard=..., payout_key=..., key_hours=...).")
    try:
        review = five_questions(design, LONGEST_OUTAGE_HOURS)
    except (ValueError, TypeError) as error:
        return hint(f"That design does not run: {error}")
    failing = [number for number, verdict in enumerate(review, start=1) if not verdict.startswith("yes")]
    if failing:
        asked = "; ".join(f"question {number} ({list(review.index)[number - 1]})" for number in failing)
        return hint(f"The run answers no to {asked}. Run review((my_design,), "
                    f"outage_hours={LONGEST_OUTAGE_HOURS:g}) to see what each run measured, change one setting, "
                    f"and check again.")
    return right(f"{design.guard} with a {design.payout_key} key kept {design.key_hours:g} h answers all five "
                 f"questions yes, with a retry {LONGEST_OUTAGE_HOURS:g} h late.")
