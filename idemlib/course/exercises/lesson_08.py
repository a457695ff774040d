"""Checks for lesson 08, The Idempotency-Key header."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, not_judged, one_of, right
from idemlib.http import ChargesApi, Client, serve

__all__ = ["CLIENT_MOVES", "check_client_moves"]

CLIENT_MOVES = {
    "same key later": "wait, then send the same body again with the same key",
    "new key": "send the same body again at once, with a new key",
    "correct it": "fix what is wrong in the request (its body or its key), then send it again at once",
    "give up": "tell the customer the payment failed",
}
"""What a client can do with a refusal, by a short name; the learner answers with the names.

Each says what the client does, never when that is right: which move fits which refusal is the exercise.
"""

CHARGE = {"order_id": 1042, "amount": 40}
FEE = {"order_id": 1042, "amount": 5}  # a second, real payment for the order
IN_CENTS = {"order_id": 1042, "amount": 4000}  # the first charge rebuilt by code that writes the amount in cents


@dataclass(frozen=True)
class Outcome:
    """What one move led to: the dollars the card was charged, the dollars owed, and what the client last heard."""

    charged: int
    owed: int
    answer: int | None

    @property
    def harmless(self) -> bool:
        """The card was charged what was owed, and the client holds the charge's answer."""
        return self.charged == self.owed and self.answer == HTTPStatus.CREATED


Request = tuple[dict[str, int], str]  # a body and its Idempotency-Key


@dataclass(frozen=True)
class Situation:
    """A refusal a client meets: how it is provoked, what is owed, and the request each move then sends.

    ``provoke`` brings a fresh server and client to the refusal and returns what
    lets a request still at work finish; a move with no request sends nothing.
    """

    status: int
    owed: int
    provoke: Callable[[ChargesApi, Client], Callable[[], None]]
    requests: dict[str, Request | None]
    overcharged: str = "to the server a new key is a new payment. What did the first request with this key leave behind?"
    """Why a move charged more than owed here, and the section that settles it (a hint, never the move to make)."""

    def play(self, move: str) -> Outcome:
        """Provoke the refusal against a fresh server, then make ``move``."""
        api = ChargesApi()
        with serve(api) as server:
            client = Client(server.url, api.issue_token("shop-1"))
            finish = self.provoke(api, client)
            if move == "same key later":
                finish()  # later: once the first request with the key has finished (the clock is not involved)
            request = self.requests[move]
            answer = None if request is None else client.post_charge(*request)[-1].status
            finish()
            return Outcome(api.payments.total_charged(), self.owed, answer)


def _first_request_at_work(api: ChargesApi, client: Client) -> Callable[[], None]:
    gate = api.hold_next()  # the first request stays at work until the gate opens: no race with the clock
    first = threading.Thread(target=client.post_charge, args=(CHARGE, "order-1042-pay-1"))
    first.start()
    if not api.wait_for_key("order-1042-pay-1"):
        raise TimeoutError("the first request never reached the server")
    assert client.post_charge(CHARGE, key="order-1042-pay-1")[-1].status == HTTPStatus.CONFLICT

    def finish() -> None:
        gate.set()
        first.join()
    return finish


def _first_request_taken_over(api: ChargesApi, client: Client) -> Callable[[], None]:
    """The client's own first request, slow but alive, outlives its claim: a retry takes the key over and charges."""
    gate = api.hold_next()
    first: list[int | None] = []
    slow = threading.Thread(target=lambda: first.append(client.post_charge(CHARGE, "order-1042-pay-1")[-1].status))
    slow.start()
    if not api.wait_for_key("order-1042-pay-1"):
        raise TimeoutError("the first request never reached the server")
    api.clock.advance(api.in_progress_seconds)
    takeover = Client(f"http://{client.host}:{client.port}", api.issue_token("shop-1"))
    api.drop_next_responses(1)  # the takeover charges, and its answer is lost too
    takeover.post_charge(CHARGE, key="order-1042-pay-1", retries=0)
    gate.set()
    slow.join()
    assert first == [HTTPStatus.CONFLICT]  # the slow first request is told it was taken over
    return lambda: None


def _second_payment_under_the_first_key(api: ChargesApi, client: Client) -> Callable[[], None]:
    client.post_charge(CHARGE, key="order-1042")  # a key named after the order
    assert client.post_charge(FEE, key="order-1042")[-1].status == HTTPStatus.UNPROCESSABLE_ENTITY
    return lambda: None


def _retry_built_again_in_cents(api: ChargesApi, client: Client) -> Callable[[], None]:
    api.drop_next_responses(1)
    client.post_charge(CHARGE, key="order-1042-pay-1", retries=0)  # charged; the answer is lost
    assert client.post_charge(IN_CENTS, key="order-1042-pay-1")[-1].status == HTTPStatus.UNPROCESSABLE_ENTITY
    return lambda: None


SITUATIONS: dict[str, Situation] = {
    "the first request is still at work": Situation(
        HTTPStatus.CONFLICT, 40, _first_request_at_work,
        {"same key later": (CHARGE, "order-1042-pay-1"), "new key": (CHARGE, "order-1042-pay-1b"),
         "correct it": (CHARGE, "order-1042-pay-1"),  # nothing in it was wrong: it goes again as it was, at once
         "give up": None},
        "to the server a new key is a new payment, and the first request, still at work under the old key, "
        "charged as well. What does a 409 say about the request holding the key? Section 4's eight copies show it."),
    "your first request was taken over": Situation(
        HTTPStatus.CONFLICT, 40, _first_request_taken_over,
        {"same key later": (CHARGE, "order-1042-pay-1"), "new key": (CHARGE, "order-1042-pay-1b"),
         "correct it": (CHARGE, "order-1042-pay-1"), "give up": None},
        "to the server a new key is a new payment, and the retry that took the key over had charged already. "
        "What became of the charge under the old key? Section 4's takeover shows it."),
    "a second payment sent under the first one's key": Situation(
        HTTPStatus.UNPROCESSABLE_ENTITY, 45, _second_payment_under_the_first_key,
        {"same key later": (FEE, "order-1042"), "new key": (FEE, "order-1042-fee"),
         "correct it": (FEE, "order-1042-fee"), "give up": None}),
    "a retry whose body was built again": Situation(
        HTTPStatus.UNPROCESSABLE_ENTITY, 40, _retry_built_again_in_cents,
        {"same key later": (IN_CENTS, "order-1042-pay-1"), "new key": (IN_CENTS, "order-1042-pay-1b"),
         "correct it": (CHARGE, "order-1042-pay-1"),  # the body the key was first sent with
         "give up": None},
        f"the rebuilt body said {IN_CENTS['amount']}, meant as cents, and the server read it as "
        f"${IN_CENTS['amount']}; under a new key it was a new payment, on top of the ${CHARGE['amount']} the "
        "first request with the key had charged before its answer was lost. Section 3 says what a 422 tells a "
        "client about its request."),
}
"""The refusals the check plays each move against, by what happened."""


@functools.cache
def outcome(situation: str, move: str) -> Outcome:
    """What ``move`` leads to in ``situation``, played against a fresh server (the same every time: no clock races)."""
    return SITUATIONS[situation].play(move)


def _status(value: Any) -> int | None:
    """A status written as 409, "409", " 409 ", "409 Conflict" or HTTPStatus.CONFLICT, as a number; None if not one."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    try:
        return int(value.split()[0] if isinstance(value, str) and value.split() else value)
    except (TypeError, ValueError):
        return None


def _why(status: int, situation: str, move: str, result: Outcome) -> str:
    """The hint for a move that did harm: what it led to, and the question (and section) that settles it."""
    if result.charged > result.owed:
        return (f"after a {status} ({situation}), '{move}' charged the card ${result.charged} where ${result.owed} was "
                f"owed: {SITUATIONS[situation].overcharged}")
    if result.answer is None:
        return (f"after a {status} ({situation}), '{move}' left the customer told the payment failed, while the card "
                f"shows ${result.charged} of the ${result.owed} owed. Did that refusal say nothing would be charged?")
    if status == HTTPStatus.CONFLICT:
        return (f"after a {status} ({situation}), '{move}' got a {result.answer} again: nothing in the request was "
                "wrong, so sent again at once it met the key in the same state. What does a 409 say about the first "
                "request, and what ends that state? (Section 4.)")
    return (f"after a {status} ({situation}), '{move}' got a {result.answer} again and the card shows "
            f"${result.charged} of the ${result.owed} owed. A key stays bound to the body it was first sent with for "
            "as long as the server keeps it (section 7): what did the server say was wrong with that request?")


@exercise
def check_client_moves(answer: Any) -> Feedback:
    """Lesson 08: what a client does after a 409 and after a 422, played out against fresh servers."""
    if (missing := blank(answer, '{409: "...", 422: "..."}, each a move named in CLIENT_MOVES')) is not None:
        return missing
    if not isinstance(answer, dict):
        return hint("Answer with a dict from each status to a move, such as {409: 'give up', 422: 'give up'}.")
    moves = {_status(status): value for status, value in answer.items()}
    if set(moves) != {situation.status for situation in SITUATIONS.values()} or len(moves) != len(answer):
        return hint(f"Answer with a dict with exactly two keys, the statuses 409 and 422, each mapped to a move; "
                    f"got the keys {list(answer)!r}.")
    named: dict[int | None, str] = {}
    for status, value in sorted(moves.items()):
        move = one_of(value, CLIENT_MOVES, f"the move after a {status}")
        if isinstance(move, Feedback):
            return move
        named[status] = move
    harms = []
    for name, situation in SITUATIONS.items():
        try:
            result = outcome(name, named[situation.status])
        except (OSError, AssertionError) as error:  # the check's own server misbehaved: nothing to judge by
            return not_judged(f"the check's server on 127.0.0.1 failed while playing '{name}' "
                              f"({type(error).__name__}); run this cell again.")
        if not result.harmless:
            harms.append(_why(situation.status, name, named[situation.status], result))
    if harms:
        return hint(f"Played against a fresh server: {harms[0][0].upper()}{harms[0][1:]}")
    return right("A 409 says a request with this key and body is (or was, for a request taken over) at work, and "
                 "nothing is wrong with yours: the same request, sent again later with the same key, gets the "
                 "answer stored under it. A 422 says this key already belongs to another body: sent again unchanged "
                 "it is refused for as long as the key is kept, and a new key on a retry charges twice, so the "
                 "request itself must change to what was meant.")
