"""Checks for lesson 03, Redelivery and races."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.races import RaceOutcome, postgres_at, race
from idemlib.stores import DuckDBPayments, postgres_unavailable, require_servers

__all__ = ["check_race_loser", "check_repeatable_read"]


def _swap_roles(failed: str) -> str:
    return failed.translate(str.maketrans("AB", "BA"))


_STEP_WORDS = {"begin": "begin", "begins": "begin", "insert": "record id", "inserts": "record id",
               "record": "record id", "charge": "charge", "charges": "charge", "commit": "commit",
               "commits": "commit", "ack": "ack", "acks": "ack"}
"""The inbox's steps (begin, record id, charge, commit, ack), as a learner may word them."""

_FILLER = {"consumer", "fails", "failed", "fail", "loses", "lost", "at", "its", "the", "on", "in", "step",
           "id", "is", "refused", "when", "it", "tries", "to", "with", "error", "an", "time", "second",
           # the error a learner may name beside the step: DuckDB's words for the failed commit
           "transactionexception", "conflict", "duplicate", "key", "constraint", "violation", "unique", "primary"}


def _read_loser(answer: str) -> str:
    """Read a loser the way a learner may write it.

    ``"B at commit"``, ``"consumer B fails at its COMMIT"``, ``"B's commit"`` and ``"b, commit"``
    all read as ``"B at commit"``; ``"nobody"``, ``"none"`` and ``"neither"`` as ``"nobody"``; a
    consumer named without a step as ``"B at ?"``. Anything else comes back as it was given.
    """
    words = re.sub(r"'s\b|[,.:;!()\"]", " ", answer.strip().lower()).split()
    if words in (["nobody"], ["none"], ["neither"], ["no", "one"]):
        return "nobody"
    words = [word for word in words if word not in _FILLER]
    who = [word for word in words if word in ("a", "b")]
    steps = list(dict.fromkeys(_STEP_WORDS[word] for word in words if word in _STEP_WORDS))
    rest = [word for word in words if word not in ("a", "b") and word not in _STEP_WORDS]
    if len(who) == 1 and words[0] == who[0] and len(steps) <= 1 and not rest:
        return f"{who[0].upper()} at {steps[0] if steps else '?'}"
    return answer.strip()


@cache
def duckdb_race_loser() -> str:
    """Who fails in the lesson's DuckDB race (A holds its transaction open while B runs the whole handler).

    The race lets A go on only once B has finished, so the answer is the same however busy the machine is.
    """
    return race(DuckDBPayments(), hold_seconds=0.1).failed


@exercise
def check_race_loser(answer: Any) -> Feedback:
    """Lesson 03: DuckDB, roles swapped: B holds its transaction open while A runs the whole handler.

    The check runs the lesson's real race (A holds, B runs) on DuckDB and swaps the
    names, since the two consumers run the same code.
    """
    if (missing := blank(answer, 'a string such as "A at record id" or "nobody"')) is not None:
        return missing
    if not isinstance(answer, str):
        return hint('Answer with a string such as "A at record id", "B at begin" or "nobody".')
    truth = _swap_roles(duckdb_race_loser())
    given = _read_loser(answer)
    if given == truth:
        return right(f"{truth}: DuckDB lets both insert, nobody waits, and whoever commits second fails.")
    if given == _swap_roles(truth):
        return hint("That is the race of section 3, where A was the slow one. Here B holds its transaction open "
                     "and A runs the whole handler. Who reaches COMMIT second now?")
    if given == "nobody":
        return hint("Both transactions wrote the same message_id, and only one of them can keep it. DuckDB does not "
                     "make anyone wait: so one of them must fail. Which one, and when does DuckDB find out?")
    if given.endswith(" at ?"):
        return hint("Say at which step too: the inbox's steps are begin, record id, charge, commit and ack.")
    if given.endswith(("record id", "begin", "charge")):
        return hint("DuckDB is optimistic: it lets both inserts through, since neither can see the other's "
                    "uncommitted row. The clash is found later. When?")
    if given.endswith(" at ack"):
        return hint("A consumer acks only after its commit has succeeded, so nothing fails at the ack. "
                    "Which earlier step does DuckDB refuse?")
    return hint('Answer with a consumer and a step of the inbox (begin, record id, charge, commit, ack), '
                'in the form "A at record id", or with "nobody".')


SIGNALS = ("one row", "zero rows", "serialization failure", "duplicate-key error")
"""What B's ``INSERT ... ON CONFLICT DO NOTHING`` can end in, in the lesson's words."""
ACTIONS = ("charge", "skip and ack", "give it back")
"""What the inbox handler can do next: charge, skip the charge and ack, or roll back and give the message back."""
CASES = ("A commits", "A rolls back")

_SIGNAL_WORDS = (
    ("serialization failure", ("serializ", "40001")),
    ("duplicate-key error", ("duplicate", "unique", "23505", "key error")),
    ("zero rows", ("zero row", "0 row", "no row", "nothing")),
    ("one row", ("one row", "1 row", "a row", "writes its row", "inserts")),
)
_ACTION_WORDS = (
    ("refund", ("charge back", "chargeback", "refund")),  # money back to the customer, not the message to the broker
    ("give it back", ("give", "back", "retry", "nack", "requeue", "release", "redeliver", "rollback", "abort")),
    ("skip and ack", ("skip", "ack", "ignore")),
    ("charge", ("charge", "pay", "do the work")),
)


def _one_of(text: Any, vocabulary: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    """The first vocabulary entry that a word of ``text`` names, or None.

    The entries are tried in order, so "skip the charge" reads as a skip and "roll back and
    retry" as giving the message back; whole words only, so "back" is no "ack".
    """
    if isinstance(text, int) and not isinstance(text, bool) and text in (0, 1):
        text = f"{text} row"
    if not isinstance(text, str):
        return None
    said = " ".join(text.lower().replace("-", " ").replace("_", " ").split())
    for name, words in vocabulary:
        if any(re.search(rf"\b{re.escape(word.replace('-', ' '))}", said) for word in words):
            return name
    return None


def _signal_and_action(outcome: RaceOutcome) -> tuple[str, str]:
    """B's signal in a real race, in the lesson's words, and what the inbox handler does with it."""
    if outcome.failed.startswith("B"):
        signal = "serialization failure" if "serializ" in outcome.error.lower() else "duplicate-key error"
        return signal, "give it back"
    return ("one row", "charge") if outcome.b_inserted else ("zero rows", "skip and ack")


@cache
def repeatable_read_signals() -> dict[str, tuple[str, str]]:
    """B's signal and the handler's next move at REPEATABLE READ, measured on the PostgreSQL server.

    Each case is the lesson's real race: A holds its transaction open until the server
    shows B's insert waiting for it, so B always meets A's transaction, however busy the machine is.
    """
    return {case: _signal_and_action(race(postgres_at("REPEATABLE READ"), first_commits=commits, hold_seconds=0.1))
            for case, commits in zip(CASES, (True, False))}


@exercise
def check_repeatable_read(answer: Any) -> Feedback:
    """Lesson 03, exercise 2: B's signal at REPEATABLE READ on PostgreSQL, and what the handler must do with it.

    The answer maps each case (A commits, A rolls back) to a pair (signal, action);
    the check runs both races on the real server and reads B's signal off them.
    """
    if (missing := blank(answer, 'a dict {"A commits": (signal, action), "A rolls back": (signal, action)}')) is not None:
        return missing
    shape = hint(f'Answer with a dict {{"A commits": (signal, action), "A rolls back": (signal, action)}}, '
                 f"the signal one of {list(SIGNALS)} and the action one of {list(ACTIONS)}.")
    if not isinstance(answer, dict):
        return shape
    # "a commits" and " A  commits" name the same case as "A commits"
    cases = {" ".join(case.lower().split()): case for case in CASES}
    named = {cases.get(" ".join(key.lower().split())) if isinstance(key, str) else None: pair
             for key, pair in answer.items()}
    if len(answer) != len(CASES) or set(named) != set(CASES):
        return shape
    given: dict[str, tuple[str | None, str | None]] = {}
    for case, pair in named.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            return shape
        given[case] = (_one_of(pair[0], _SIGNAL_WORDS), _one_of(pair[1], _ACTION_WORDS))
    unread = [case for case, (signal, action) in given.items() if signal is None or action is None]
    if unread:
        return hint(f"I cannot read the answer for {unread[0]!r}: name the signal as one of {list(SIGNALS)} "
                    f"and the action as one of {list(ACTIONS)}.")
    if (reason := postgres_unavailable()) is not None:
        if require_servers():
            raise RuntimeError(reason)
        return hint(f"This check races two consumers on PostgreSQL, and none answers here, so it cannot judge "
                    f"the answer. {reason}")
    truth = repeatable_read_signals()
    if given == truth:
        return right("at REPEATABLE READ the loser's snapshot never contains the winner's row: when A commits, B's "
                     "waiting insert is refused with a serialization failure, B rolls back and gives m-7f3 back, and "
                     "if the message comes back, the redelivery, in a fresh snapshot, finds the ID and skips. When A rolls back, there is nothing "
                     "to conflict with: B's insert goes ahead and B charges.")
    committed, rolled_back = given["A commits"], given["A rolls back"]
    if committed[0] != truth["A commits"][0]:
        if committed[0] == "zero rows":
            return hint("Zero rows is READ COMMITTED's answer, the one level at which PostgreSQL lets B's insert skip for "
                        "a row its snapshot does not hold. At REPEATABLE READ, which rows can B's transaction see?")
        if committed[0] == "duplicate-key error":
            return hint("B's insert says ON CONFLICT DO NOTHING, so a duplicate key alone raises nothing. What does "
                        "PostgreSQL do when the conflicting row is one B's snapshot cannot see?")
        return hint("If B wrote its row while A's row stands, the unique key would hold two m-7f3s. "
                    "Which signal does PostgreSQL give B instead, at this level?")
    if committed[1] != truth["A commits"][1]:
        return hint("The signal is right, but what comes next is not. After that error B's transaction can commit "
                    "nothing, and the error does not say m-7f3 was handled: it says B's snapshot is out of date. "
                    "What does the handler do with a lost race, so a later delivery can decide?")
    if rolled_back[0] != truth["A rolls back"][0]:
        return hint("When A rolls back, its m-7f3 row is gone. Is there still anything for B's insert to conflict with?")
    return hint("The signal when A rolls back is right; what the handler does with it is not. B's row is the only "
                "m-7f3 row: which step of the inbox comes next?")
