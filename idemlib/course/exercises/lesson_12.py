"""Checks for lesson 12, Case study: one loan account."""

from __future__ import annotations

from typing import Any

import numpy as np

from idemlib.case_study.design_review import KEY_HOURS, QUESTIONS, Design, five_questions, review
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right

__all__ = ["LONGEST_OUTAGE_HOURS", "REVIEW_EXERCISE", "check_five_answers", "check_safe_design"]

REVIEW_EXERCISE = Design("inbox pruned after 2 h, reconciling", keep_hours=2, reconcile=True)
"""The design exercise 1 asks about: the inbox, its IDs deleted after two hours, its payout intent recorded with the
account and looked up when a delivery finds it unconfirmed."""

LONGEST_OUTAGE_HOURS = 30.0
"""Exercise 2's team: the longest outage it has seen, so the latest a redelivery or a payout retry can come."""

_WORDS = {"yes": True, "y": True, "true": True, "1": True, "no": False, "n": False, "false": False, "0": False}


def _yes_no(value: Any) -> bool | None:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):  # 1 and 0, as a spreadsheet writes yes and no
        return bool(value)
    if isinstance(value, str):
        return _WORDS.get(value.strip().rstrip(".!").strip().lower())
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
        return hint("Give a list of five answers, one per question, in the article's order.")
    given = [_yes_no(answer) for answer in answers]
    if None in given:
        return hint("Answer each question with yes or no (True or False, 1 or 0 also do).")
    measured = [verdict.startswith("yes") for verdict in five_questions(REVIEW_EXERCISE)]
    wrong = [number for number, (mine, truth) in enumerate(zip(given, measured), start=1) if mine != truth]
    if wrong:
        first = wrong[0]
        clue = {
            1: "a second delivery that comes at once (an ack lost, a restart, a twin): is the ID still in the inbox?",
            2: "when the payout's answer is lost, or the call is rate limited, the delivery fails and comes again; "
               "if the payout is sent again, which key does the repeated call carry?",
            3: "the account and the ID are saved in one transaction: can a crash at any step leave one without the other?",
            4: "three hours later, which memory does the redelivery meet: the service's own IDs, or the payment "
               "system's keys? How long is each kept?",
            5: "after a crash just after the payout call, what stops the next delivery from paying the loan out "
               "again, and does the payment system ever see a key from this service?",
        }[first]
        count = f"{len(wrong)} of the five answers {'is' if len(wrong) == 1 else 'are'}"
        return hint(f"{count} not what the run shows. Start with question {first}: {clue}")
    return right("every answer matches the run: the inbox settles every prompt duplicate (1 and 3), the derived key "
                 "and the lookup of an unconfirmed intent make a repeated payout harmless (2 and 5), but the service "
                 "forgets its own IDs after two hours, so a redelivery three hours late opens a second account (4): "
                 "the recorded intent protects the money, not the account.")


@exercise
def check_safe_design(design: Any) -> Feedback:
    """Lesson 12: a :class:`Design` for which the runs answer all five questions yes, retries up to
    :data:`LONGEST_OUTAGE_HOURS` late included."""
    example = 'Design("mine", guard=..., payout_key=..., keep_hours=..., reconcile=...)'
    if (missing := blank(design, f"a Design(...), e.g. {example}")) is not None:
        return missing
    if not isinstance(design, Design):
        return hint(f"That is a {type(design).__name__}; build a {example}.")
    try:
        answers = review((design,), outage_hours=LONGEST_OUTAGE_HOURS).iloc[0]
    except (ValueError, TypeError) as error:
        return hint(f"That design does not run: {error}")
    failing = [(number, answer) for number, answer in enumerate(answers, start=1) if answer != "yes"]
    if failing:
        asked = "; ".join(f"question {number}, {QUESTIONS[number - 1]!r} ({answer})" for number, answer in failing)
        return hint(f"The runs answer {asked}. five_questions(my_design, {LONGEST_OUTAGE_HOURS:g}) shows what "
                    "each run measured; change one setting and check again.")
    if design.guard == "inbox" and design.keep_hours <= LONGEST_OUTAGE_HOURS:
        # At exactly the outage the run passes only because the ID was saved a few simulated seconds after
        # the first delivery began: a boundary, not a margin.
        return hint(f"Your inbox keeps its IDs {design.keep_hours:g} h and the longest outage is "
                    f"{LONGEST_OUTAGE_HOURS:g} h: the runs pass only by the few seconds between the first delivery "
                    "and the moment its ID was saved. The reference article: the retention period must be longer "
                    "than the longest possible retry. Is yours?")
    kept = "forever" if design.keep_hours == float("inf") else f"{design.keep_hours:g} h"
    # Only the inbox keeps processed IDs; the constraint and the version keep the business fact itself.
    memory = f"its own IDs kept {kept}" if design.guard == "inbox" else "no table of IDs to prune"
    return right(f"{design.guard} with a {design.payout_key} key, {memory}, its payout intent recorded and "
                 f"looked up when unconfirmed, answers all five questions yes with a redelivery and a retry "
                 f"{LONGEST_OUTAGE_HOURS:g} h late. The payment system may still forget a key once it is "
                 f"{KEY_HOURS:g} h old; your recorded intent and its lookup, not its memory, stop the second payout.")
