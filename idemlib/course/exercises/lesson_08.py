"""Checks for lesson 08, The Idempotency-Key header."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.http import ChargesApi, Client, serve

__all__ = ["CLIENT_MOVES", "check_client_moves"]

CLIENT_MOVES = {
    "same key later": "wait, then send the same request again with the same key",
    "new key": "send the request again at once, with a new key",
    "correct it": "change the request (its body or its key) to what was meant, then send it",
    "give up": "tell the customer the payment failed",
}
"""What a client can do with a refusal, by a short name; the learner answers with the names."""

CHARGE = {"order_id": 1042, "amount": 40}


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


def _in_progress(move: str) -> Outcome:
    """409: the client's first request is still at work when its retry arrives."""
    api = ChargesApi()
    gate = api.hold_next()  # the first request stays at work until the gate opens: no race with the clock
    with serve(api) as server:
        client = Client(server.url)
        first = threading.Thread(target=client.post_charge, args=(CHARGE, "order-1042-pay-1"))
        first.start()
        api.wait_for_key("order-1042-pay-1")
        assert client.post_charge(CHARGE, key="order-1042-pay-1")[-1].status == HTTPStatus.CONFLICT
        if move == "same key later":
            gate.set()
            first.join()
        answer = {"same key later": lambda: client.post_charge(CHARGE, key="order-1042-pay-1")[-1].status,
                  "new key": lambda: client.post_charge(CHARGE, key="order-1042-pay-1b")[-1].status,
                  "correct it": lambda: client.post_charge(CHARGE, key="order-1042-pay-1")[-1].status,  # nothing to correct
                  "give up": lambda: None}[move]()
        gate.set()
        first.join()
        return Outcome(api.payments.total_charged(), 40, answer)


def _new_payment_under_an_old_key(move: str) -> Outcome:
    """422: a second, real payment for the order is sent under the key of the first (a key named after the order)."""
    api = ChargesApi()
    with serve(api) as server:
        client = Client(server.url)
        client.post_charge(CHARGE, key="order-1042")
        fee = {"order_id": 1042, "amount": 5}
        assert client.post_charge(fee, key="order-1042")[-1].status == HTTPStatus.UNPROCESSABLE_ENTITY
        answer = {"same key later": lambda: client.post_charge(fee, key="order-1042")[-1].status,
                  "new key": lambda: client.post_charge(fee, key="order-1042-fee")[-1].status,
                  "correct it": lambda: client.post_charge(fee, key="order-1042-fee")[-1].status,
                  "give up": lambda: None}[move]()
        return Outcome(api.payments.total_charged(), 45, answer)


def _retry_with_a_changed_body(move: str) -> Outcome:
    """422: the first answer was lost, and the retry was built again by code that writes the amount in cents."""
    api = ChargesApi()
    with serve(api) as server:
        client = Client(server.url)
        api.drop_next_responses(1)
        client.post_charge(CHARGE, key="order-1042-pay-1", retries=0)
        changed = {"order_id": 1042, "amount": 4000}
        assert client.post_charge(changed, key="order-1042-pay-1")[-1].status == HTTPStatus.UNPROCESSABLE_ENTITY
        answer = {"same key later": lambda: client.post_charge(changed, key="order-1042-pay-1")[-1].status,
                  "new key": lambda: client.post_charge(changed, key="order-1042-pay-1b")[-1].status,
                  "correct it": lambda: client.post_charge(CHARGE, key="order-1042-pay-1")[-1].status,  # the first body
                  "give up": lambda: None}[move]()
        return Outcome(api.payments.total_charged(), 40, answer)


SITUATIONS: dict[int, dict[str, Callable[[str], Outcome]]] = {
    HTTPStatus.CONFLICT: {"the first request is still at work": _in_progress},
    HTTPStatus.UNPROCESSABLE_ENTITY: {"a second payment sent under the first one's key": _new_payment_under_an_old_key,
                                      "a retry whose body was built again": _retry_with_a_changed_body},
}


@functools.cache
def outcome(situation: str, move: str) -> Outcome:
    """What ``move`` leads to in ``situation``, played against a fresh server (the same every time: no clock races)."""
    play = next(plays[situation] for plays in SITUATIONS.values() if situation in plays)
    return play(move)


def _status(value: Any) -> int | None:
    """A status written as 409, "409", " 409 ", "409 Conflict" or HTTPStatus.CONFLICT, as a number; None if not one."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    try:
        return int(value.split()[0] if isinstance(value, str) and value.split() else value)
    except (TypeError, ValueError):
        return None


def _move(value: Any) -> str | None:
    """A move written with any case, spacing or punctuation around it, as one of :data:`CLIENT_MOVES`; None if not one."""
    if not isinstance(value, str):
        return None
    words = " ".join("".join(c if c.isalnum() else " " for c in value.lower()).split())
    return next((move for move in CLIENT_MOVES if move == words), None)


def _why(status: int, situation: str, move: str, result: Outcome) -> str:
    if result.charged > result.owed:
        return (f"after a {status} ({situation}), '{move}' charged the card ${result.charged} where ${result.owed} was "
                "owed. Had the first request with this key been lost, or was it still there?")
    if result.answer is None:
        return (f"after a {status} ({situation}), '{move}' left the customer told the payment failed, while the card "
                f"shows ${result.charged} of the ${result.owed} owed.")
    return (f"after a {status} ({situation}), '{move}' got a {result.answer} again and the card shows "
            f"${result.charged} of the ${result.owed} owed. What did the server say was wrong with that request?")


@exercise
def check_client_moves(answer: Any) -> Feedback:
    """Lesson 08: what a client does after a 409 and after a 422, played out against a fresh server."""
    if (missing := blank(answer, '{409: "...", 422: "..."}, each a move named in CLIENT_MOVES')) is not None:
        return missing
    if not isinstance(answer, dict):
        return hint("Answer with a dict from each status to a move, such as {409: 'give up', 422: 'give up'}.")
    moves = {_status(status): value for status, value in answer.items()}
    if set(moves) != set(SITUATIONS):
        return hint(f"Answer with a dict with exactly two keys, the statuses 409 and 422, each mapped to a move; "
                    f"got the keys {list(answer)!r}.")
    named = {status: _move(value) for status, value in moves.items()}
    if None in named.values():
        unknown = [repr(moves[status]) for status, move in named.items() if move is None]
        return hint(f"Name each move as CLIENT_MOVES does ({', '.join(CLIENT_MOVES)}); could not read: {', '.join(unknown)}.")
    harms = [_why(status, situation, named[status], result) for status, plays in SITUATIONS.items()
             for situation in plays if not (result := outcome(situation, named[status])).harmless]
    if harms:
        return hint(f"Played against a fresh server: {harms[0][0].upper()}{harms[0][1:]}")
    return right("A 409 says the first request is still at work and nothing is wrong with yours: the same request, "
                 "sent again later with the same key, gets its answer. A 422 says this key already belongs to another "
                 "request: sent again unchanged it is refused for ever, and a new key on a retry charges twice, so "
                 "the request itself must change to what was meant.")
