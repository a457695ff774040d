"""Checks for lesson 12, Case study: one loan account."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from idemlib.case_study.design_review import KEY_HOURS, QUESTIONS, RESENT_42, Design, answer_runs, run
from idemlib.case_study.mortgage import APPLICATION_42, GUARDS, PAYOUT_KEYS
from idemlib.case_study.slow_payout import PAYOUT_SECONDS
from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, one_of, right

__all__ = ["ANSWERS", "GUARDS", "KEEP_IDS", "LONGEST_OUTAGE_HOURS", "PAYOUT_KEYS", "REVIEW_EXERCISE",
           "check_five_answers", "check_safe_design"]

LONGEST_OUTAGE_HOURS = 30.0
"""Both exercises' team: the longest outage it has seen, so the latest a redelivery or a payout retry can come."""

REVIEW_EXERCISE = Design("aggregate version, reconciling, a key made up per call", guard="version",
                         payout_key="per attempt", reconcile=True)
"""The design exercise 1 asks about: the aggregate version guards the account; the payout intent is recorded with
the account and looked up when a delivery finds it unconfirmed; but the payout key is a fresh UUID on every call."""

ANSWERS = ("yes", "no")
"""What each of the five questions is answered with (True and False, or 1 and 0, do too)."""

KEEP_IDS = {"1 hour": 1.0, "1 day": 24.0, "2 days": 48.0, "7 days": 168.0, "forever": math.inf}
"""The retentions exercise 2's team can configure for its processed IDs (the pruning job's setting)."""


def _yes(value: Any) -> bool | Feedback:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):  # 1 and 0, as a spreadsheet writes yes and no
        return bool(value)
    named = one_of(value, ANSWERS, "each answer")
    return named if isinstance(named, Feedback) else named == "yes"


CLUES = {
    1: "a second delivery that comes at once (an ack lost, a restart, two consumers holding it): what does the "
       "version guard find the second time? In question 1's run with two consumers, where is the first one slow: "
       "before its commit, or while its payout call is on its way (section 7 prints the runs; section 5)?",
    2: "the question is about the key itself: when the payout's answer is lost, or the call is rate limited "
       "(a 429, nothing paid), is the payout called again, and with which key? (mistake 2)",
    3: "can a crash at any step leave the account without the version moved on, or the other way round? (section 5)",
    4: "30 hours later the payment system has forgotten every key; what does a reconciling service do before "
       "it sends a payout again? (mistake 4)",
    5: "after a crash just after the payout call, the next delivery finds what this design recorded with the "
       "account. Is the key the only thing between that retry and a second payout here? (mistake 4, the service "
       "that reconciles)",
}


@exercise
def check_five_answers(answers: Any) -> Feedback:
    """Lesson 12: the five questions answered (each "yes" or "no", in order) for :data:`REVIEW_EXERCISE`, with
    question 4's redelivery and retry :data:`LONGEST_OUTAGE_HOURS` late, checked by running it."""
    if (missing := blank(answers, 'five answers in order, e.g. ["yes", "no", "yes", "yes", "no"]')) is not None:
        return missing
    if isinstance(answers, (str, bytes, dict)) or not hasattr(answers, "__len__") or len(answers) != 5:
        return hint('Give a list of five answers, one per question in the lesson\'s order, each "yes" or "no".')
    given = [_yes(answer) for answer in answers]
    for verdict in given:
        if isinstance(verdict, Feedback):
            return verdict
    measured = [ok for ok, _, _ in answer_runs(REVIEW_EXERCISE, LONGEST_OUTAGE_HOURS)]
    wrong = [number for number, (mine, truth) in enumerate(zip(given, measured), start=1) if mine != truth]
    if wrong:
        count = f"{len(wrong)} of the five answers {'is' if len(wrong) == 1 else 'are'}"
        return hint(f"{count} not what the runs show. Start with question {wrong[0]}: {CLUES[wrong[0]]}")
    return right("Every answer matches the runs: the version settles every duplicate of the account (1 and 3), "
                 "and the recorded intent, looked up before any payout is sent again, keeps the money right "
                 f"even {LONGEST_OUTAGE_HOURS:g} h late (4 and 5). Question 2 is still no: a rate-limited call is "
                 "sent again under a new key, harmless here only because nothing was paid; a timeout while the "
                 "lookup cannot yet see the payout would pay twice. And 5's yes rests on the model's lookup seeing "
                 "the payout at once: on Stripe that is a list endpoint, not search, which is not read-after-write "
                 "(mistake 4's note), so a real service keeps a key that stays the same as well.")


DESIGN_CLUES = {
    1: "What does your guard still know when the second delivery comes, after a restart or while a twin works? "
       "(mistakes 1 and 3)",
    2: "Where is the key made, and is it the same on the next call? (mistake 2)",
    3: "Is the record of what was done written in the same transaction as the account? (mistake 1)",
    4: f"{LONGEST_OUTAGE_HOURS:g} h is past the payment system's {KEY_HOURS:g} h key window, and maybe past your own "
       "IDs' retention: which memory is left when the retry comes, and what can the service look up instead of "
       "sending the payout again? (mistake 4)",
    5: "Does the payment system see a key from you at all? (mistake 5)",
}


def _design(answer: Any) -> Design | Feedback:
    keys = {"guard", "payout_key", "keep_ids", "reconcile"}
    example = '{"guard": ..., "payout_key": ..., "keep_ids": ..., "reconcile": ...}'
    if not isinstance(answer, dict):
        return hint(f"Give the design as a dict {example}, not {type(answer).__name__}.")
    if set(answer) != keys:
        return hint(f"The dict needs exactly the keys {sorted(keys)}; got {sorted(map(str, answer))}.")
    guard = one_of(answer["guard"], GUARDS, "the guard")
    key = one_of(answer["payout_key"], PAYOUT_KEYS, "the payout key")
    keep = one_of(answer["keep_ids"], KEEP_IDS, "the time to keep IDs (keep_ids)")
    for named in (guard, key, keep):
        if isinstance(named, Feedback):
            return named
    reconcile = answer["reconcile"]
    # 1 and 0 stand for True and False, as in exercise 1 and lesson 10; "yes" or 2 do not
    if not isinstance(reconcile, (bool, np.bool_)) and not (isinstance(reconcile, (int, np.integer)) and reconcile in (0, 1)):
        return hint(f"reconcile is True or False, not {reconcile!r}.")
    return Design("yours", guard=str(guard), payout_key=str(key), keep_hours=KEEP_IDS[str(keep)],
                  reconcile=bool(reconcile))


@exercise
def check_safe_design(design: Any) -> Feedback:
    """Lesson 12: a design, as a dict of named options, for which the runs answer all five questions yes with
    retries up to :data:`LONGEST_OUTAGE_HOURS` late, and the same approval re-sent under a new message ID opens one
    account and pays once, also when the copy comes while the first is still being paid out."""
    if (missing := blank(design, 'a dict {"guard": ..., "payout_key": ..., "keep_ids": ..., "reconcile": ...}')
            ) is not None:
        return missing
    built = _design(design)
    if isinstance(built, Feedback):
        return built
    failing = [(number, short) for number, (ok, short, _) in
               enumerate(answer_runs(built, LONGEST_OUTAGE_HOURS), start=1) if not ok]
    if failing:
        number, short = failing[0]
        return hint(f"With the retries {LONGEST_OUTAGE_HOURS:g} h late, question {number}, "
                    f"{QUESTIONS[number - 1]!r}, comes out no ({short}). {DESIGN_CLUES[number]}")
    resent = run(built, messages=(APPLICATION_42, RESENT_42))
    if not resent.once:
        return hint(f"The same approval re-sent under a new message ID ends as {resent}: your guard remembers the "
                    "message, not the business fact, and a copy with another ID is new to it (section 5, the runs "
                    "that tell the designs apart).")
    # The re-sent copy while the first is still being paid out: the lookup cannot see a payout
    # still in flight, so only a key both copies share (made from the approval) stops a second one.
    twin = run(built, messages=(APPLICATION_42, RESENT_42), consumers=2, step_seconds={"pay out": PAYOUT_SECONDS})
    if not twin.once:
        return hint(f"The approval re-sent under a new message ID while the first copy is still being paid out (two "
                    f"consumers, a payment system that answers after {PAYOUT_SECONDS:g} s) ends as {twin}: the "
                    "lookup cannot find a payout that is still being made, so the payment system alone can tell "
                    "the two calls are one payout. What payout key would both copies send (mistake 4's note on the "
                    "lookup; section 5, the paragraph after the runs that tell the designs apart)?")
    return right(f"All five questions yes with retries {LONGEST_OUTAGE_HOURS:g} h late, and one account and one "
                 "payout for an approval re-sent under a new ID, even while the first copy is still being paid out. "
                 "The payment system still "
                 f"forgets a key once it is {KEY_HOURS:g} h old: the recorded intent and its lookup, not its "
                 "memory, stop the second payout.")
