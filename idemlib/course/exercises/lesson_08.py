"""Checks for lesson 08, The Idempotency-Key header."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, not_judged, one_each, one_of, right
from idemlib.http import ChargesApi, Client, serve

__all__ = ["CLIENT_MOVES", "CLIENT_SITUATIONS", "TIMELINE", "check_client_moves", "check_fenced"]

CLIENT_MOVES = {
    "same key later": "wait, then send the same body again with the same key",
    "new key": "send the same body again at once, with a new key",
    "first body": "send at once, under the same key, the body that key was first sent with",
    "give up": "tell the customer the payment failed",
}
"""What a client can do with a refusal, by a short name; the learner answers with the names.

Each says what the client does, never when that is right: which move fits which refusal is the exercise.
"""

CLIENT_SITUATIONS = {
    "still at work": "409: your retry met your first request, held at work on the server",
    "taken over": "409: your own first request, slow but alive, was taken over by your retry, whose answer was lost",
    "second payment": "422: a second, real $5 payment for the order, sent under the key of its $40 charge",
    "rebuilt in cents": "422: a retry after a lost answer, its body built again by code that writes the amount in cents",
}
"""The refusals the check plays each move against, by a short name; the learner answers with a move for each."""

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
    "still at work": Situation(
        HTTPStatus.CONFLICT, 40, _first_request_at_work,
        {"same key later": (CHARGE, "order-1042-pay-1"), "new key": (CHARGE, "order-1042-pay-1b"),
         "first body": (CHARGE, "order-1042-pay-1"),  # the body it was first sent with, at once
         "give up": None},
        "to the server a new key is a new payment, and the first request, still at work under the old key, "
        "charged as well. What does a 409 say about the request holding the key? Section 4's eight copies show it."),
    "taken over": Situation(
        HTTPStatus.CONFLICT, 40, _first_request_taken_over,
        {"same key later": (CHARGE, "order-1042-pay-1"), "new key": (CHARGE, "order-1042-pay-1b"),
         "first body": (CHARGE, "order-1042-pay-1"), "give up": None},
        "to the server a new key is a new payment, and the retry that took the key over had charged already. "
        "What became of the charge under the old key? Section 4's takeover shows it."),
    "second payment": Situation(
        HTTPStatus.UNPROCESSABLE_ENTITY, 45, _second_payment_under_the_first_key,
        {"same key later": (FEE, "order-1042"), "new key": (FEE, "order-1042-fee"),
         "first body": (CHARGE, "order-1042"),  # the $40 body the key was first sent with
         "give up": None}),
    "rebuilt in cents": Situation(
        HTTPStatus.UNPROCESSABLE_ENTITY, 40, _retry_built_again_in_cents,
        {"same key later": (IN_CENTS, "order-1042-pay-1"), "new key": (IN_CENTS, "order-1042-pay-1b"),
         "first body": (CHARGE, "order-1042-pay-1"), "give up": None},
        f"the rebuilt body said {IN_CENTS['amount']}, meant as cents, and the server read it as "
        f"${IN_CENTS['amount']}; under a new key it was a new payment, on top of the ${CHARGE['amount']} the "
        "first request with the key had charged before its answer was lost. Section 3 says what a 422 tells a "
        "client about its request."),
}
"""The refusals the check plays each move against, by the names of :data:`CLIENT_SITUATIONS`."""


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
    if result.charged < result.owed and result.answer == HTTPStatus.CREATED:
        return (f"after a {status} ({situation}), '{move}' got a 201, but the card shows ${result.charged} of the "
                f"${result.owed} owed: that answer was the one stored for the key's first body, and the payment "
                "you meant was never made. Was this request a retry of the first one, or a payment of its own?")
    if result.answer is None:
        card = (f"was charged the ${result.owed} owed" if result.charged == result.owed
                else f"shows ${result.charged} of the ${result.owed} owed")
        return (f"after a {status} ({situation}), '{move}' left the customer told the payment failed, while the card "
                f"{card}. Did that refusal say nothing would be charged?")
    if status == HTTPStatus.CONFLICT:
        return (f"after a {status} ({situation}), '{move}' got a {result.answer} again: nothing in the request was "
                "wrong, so sent again at once it met the key in the same state. What does a 409 say about the first "
                "request, and what ends that state? (Section 4.)")
    return (f"after a {status} ({situation}), '{move}' got a {result.answer} again and the card shows "
            f"${result.charged} of the ${result.owed} owed. A key stays bound to the body it was first sent with for "
            "as long as the server keeps it (section 7): what did the server say was wrong with that request?")


@exercise
def check_client_moves(answer: Any) -> Feedback:
    """Lesson 08: what a client does after each refusal of :data:`CLIENT_SITUATIONS`, played against fresh servers."""
    if (missing := blank(answer, "a dict from each situation in CLIENT_SITUATIONS to a move in CLIENT_MOVES")) is not None:
        return missing
    named = one_each(answer, CLIENT_SITUATIONS, CLIENT_MOVES, "the move", "the situations ")
    if isinstance(named, Feedback):
        return named
    harms = []
    for name, situation in SITUATIONS.items():
        try:
            result = outcome(name, named[name])
        except (OSError, AssertionError) as error:  # the check's own server misbehaved: nothing to judge by
            return not_judged(f"the check's server on 127.0.0.1 failed while playing '{name}' "
                              f"({type(error).__name__}); run this cell again.")
        if not result.harmless:
            harms.append(_why(situation.status, name, named[name], result))
    if harms:
        return hint(f"Played against a fresh server: {harms[0][0].upper()}{harms[0][1:]}")
    return right("A 409 says a request with this key and body is (or was, for a request taken over) at work, and "
                 "nothing is wrong with yours: the same request, sent again later with the same key, gets the "
                 "answer stored under it. A 422 says only that this key already belongs to another body; which "
                 "request is wrong, the key or the body, only your client's records can say: a new payment needs a "
                 "key of its own, and a retry must carry the body it was first sent with.")


TIMELINE = ((0, "A", "sends"), (40, "B", "sends"), (70, "C", "sends"), (75, "A", "finishes"), (140, "D", "sends"),
            (150, "C", "finishes"), (260, "D", "finishes"), (270, "E", "sends"))
"""Five copies of one request, one key, on the server's clock (seconds): when each is sent, and when each that
went to work finishes it and reaches its commit. The server's in-progress deadline is its default, 60 seconds."""

FENCED, AT_THE_DOOR, COMMITTED, REPLAYED = "refused by the fence", "refused at the door", "committed", "replayed"


def play_timeline(timeline: tuple[tuple[int, str, str], ...] = TIMELINE) -> dict[str, str]:
    """What each request of ``timeline`` met on a fresh server: :data:`FENCED`, :data:`AT_THE_DOOR`, ...

    Every request is sent with a hold, so one that goes to work stays at work until its "finishes"; one answered
    at once (in progress, replayed) leaves its hold untaken, and the hold is withdrawn.
    """
    api = ChargesApi()
    answers: dict[str, Any] = {}
    running: dict[str, tuple[threading.Event, threading.Thread]] = {}
    with serve(api) as server:
        client = Client(server.url, api.issue_token("shop-1"))
        for second, name, event in timeline:
            api.clock.advance(second - api.clock.now())
            if event == "finishes":
                gate, thread = running.pop(name)
                gate.set()
                thread.join()
                continue
            gate = api.hold_next()
            thread = threading.Thread(target=lambda n=name: answers.__setitem__(
                n, client.post_charge(CHARGE, "order-1042-pay-1", retries=0)[-1]))
            thread.start()
            limit = time.monotonic() + 30  # real seconds: far more than a request takes on a loaded machine
            while not gate.taken.wait(0.005) and thread.is_alive():
                if time.monotonic() > limit:
                    raise TimeoutError(f"request {name} was neither answered nor at work")
            if gate.taken.is_set():
                running[name] = (gate, thread)
            else:
                thread.join()
                api.withdraw_hold(gate)
        for gate, thread in running.values():  # a request the timeline never finishes
            gate.set()
            thread.join()
    return {name: FENCED if a.status == HTTPStatus.CONFLICT and a.body.get("title") == "Request taken over"
            else AT_THE_DOOR if a.status == HTTPStatus.CONFLICT else REPLAYED if a.replayed else COMMITTED
            for name, a in sorted(answers.items())}


@functools.cache
def _played() -> tuple[tuple[str, str], ...]:
    return tuple(play_timeline().items())


def _names(answer: Any) -> set[str] | Feedback:
    """``answer`` as a set of the timeline's request names, any letter case; a hint if it is not one."""
    names = sorted({name for _, name, _ in TIMELINE})
    if isinstance(answer, (str, bytes, dict)) or not isinstance(answer, (set, frozenset, list, tuple)):
        return hint(f"Answer with a set of request names, such as {{'B'}} or set(), from {names}; got {answer!r}.")
    chosen = set()
    for item in answer:
        name = one_of(item, names, "each request")
        if isinstance(name, Feedback):
            return name
        chosen.add(name)
    return chosen


@exercise
def check_fenced(answer: Any) -> Feedback:
    """Lesson 08: which requests of :data:`TIMELINE` the claim-number fence refuses at their commit, played out."""
    if (missing := blank(answer, "a set of the request names in TIMELINE, such as {'B'}")) is not None:
        return missing
    chosen = _names(answer)
    if isinstance(chosen, Feedback):
        return chosen
    try:
        met = dict(_played())
    except (OSError, TimeoutError) as error:
        _played.cache_clear()
        return not_judged(f"the check's server on 127.0.0.1 failed while playing the timeline ({type(error).__name__}); "
                          "run this cell again.")
    sent = {name: second for second, name, event in TIMELINE if event == "sends"}
    finished = {name: second for second, name, event in TIMELINE if event == "finishes"}
    for name in sorted(chosen - {n for n, m in met.items() if m == FENCED}):
        if met[name] == AT_THE_DOOR:
            return hint(f"{name} was answered 409 when it arrived at {sent[name]} s, before any work: it met the key "
                        "in progress. The fence acts at a commit, on a request that went to work. (Section 4's "
                        "eight copies and its takeover show the two 409s.)")
        if met[name] == REPLAYED:
            return hint(f"{name}, sent at {sent[name]} s, found the key completed and was answered with the stored "
                        "answer: it never worked, so there was nothing to fence.")
        late = finished[name] - sent[name] >= ChargesApi.in_progress_seconds
        return hint(f"{name} committed at {finished[name]} s. "
                    + ("Its deadline had passed while it worked, but did any request arrive after that to take the "
                       "key over? A deadline only lets a later request take over; it refuses nothing by itself."
                       if late else "It finished before its deadline, and no request took its key over.")
                    + " (Section 4.)")
    if {n for n, m in met.items() if m == FENCED} - chosen:
        return hint("Your set leaves out a request the fence refused. For each request that went to work, which "
                    "claim number did the key carry when it reached its commit, and was it still the one that "
                    "request claimed with? Section 4's takeover shows what the fence does with a late commit.")
    return right("A request is fenced when another took its key over while it worked: the takeover raised the claim "
                 "number, and the late commit no longer matches it. A 409 at the door is no fence (that request never "
                 "worked), and a deadline that passes with nobody arriving leaves the claim number as it was.")
