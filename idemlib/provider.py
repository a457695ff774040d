"""A payment provider outside the consumer's database, and the idempotency keys it honours.

No local transaction covers a call to another company's API: a rollback undoes the
consumer's own rows, never the provider's charge. What protects the customer there
is the provider's own memory: the caller sends an idempotency key, the provider
stores the first result under it, and a repeat with the same key gets that stored
result instead of a second charge.

Three behaviours, selectable by name, differ where their sources say they do:

- ``stripe-v1``: a result is saved under the key only once the endpoint has begun
  executing. A request refused before that (its parameters fail validation, it
  conflicts with a concurrent request with the same key, it is rate limited, it
  carries no API key) saves nothing, so a retry with the same key runs normally:
  Stripe's rate limiters run before its idempotency layer. A retry while the first
  request is still running gets 409. Once execution began, whatever came out is
  saved and replayed, errors included (``500`` too). A key sent again with other
  parameters is rejected; keys may be removed once they are 24 hours old, and a key
  reused after that runs as a new request.
- ``stripe-v2``: a replay is recognised for 30 days; failed or partly failed work is
  run again to completion on a retry, so a retry never charges twice.
- ``ietf-draft``: a missing key is refused with 400, a retry while the first request
  is still in progress gets 409, a key reused with a different payload gets 422. A
  failure is not kept as the key's answer: the course's server rolls a failed charge
  back, so a retry runs it again.

Two kinds of failure can be scheduled, because they differ in what is saved:
:meth:`PaymentProvider.refuse_next` (turned away before the endpoint begins, as a
rate limit would) and :meth:`PaymentProvider.fail_next` (the endpoint began and then
failed, with or without the money already taken: the error does not say which).

Figures come from ``data/facts.csv``. Where the sources are silent (the status
Stripe uses for a mismatch, what v2 does with other parameters), the model says so
in :attr:`Behaviour.assumed`.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idemlib.clock import VirtualClock
from idemlib.facts import fact_number, fact_seconds


@dataclass(frozen=True)
class Behaviour:
    """How a provider treats idempotency keys."""

    name: str
    key_required: bool
    replays_errors: bool
    retention_seconds: float
    mismatch_status: int
    in_progress_status: int
    missing_key_status: int
    assumed: str = ""
    """What the model assumes where its sources are silent or vaguer than the model, in words."""
    modelled: frozenset[str] = frozenset()
    """The fields above whose values are the model's, not its source's: a table of them marks these."""
    retention_is_floor: bool = False
    """The source promises keys for at least ``retention_seconds`` and may prune them any time after (Stripe's v1),
    rather than naming a window."""
    unsaved_statuses: frozenset[int] = frozenset()
    """Errors answered before the idempotency layer, so nothing is saved under the key and a retry with it is a fresh
    attempt: Stripe's 429 (its rate limiters run first), 401 (no API key) and 409 (a concurrent request with the key)."""
    longest_key: int | None = None
    """The longest key accepted (Stripe: 255 characters); a longer one is refused before anything is saved."""

    def replays(self, status: int) -> bool:
        """Whether a retry with the key gets this error ``status`` back: only if it was saved, once execution began."""
        return self.replays_errors and status >= 400 and status not in self.unsaved_statuses


def behaviours() -> dict[str, Behaviour]:
    """The three behaviours the course compares, with their figures read from the facts file."""
    missing, in_progress, mismatch = (fact_number(f"ietf_draft06_{n}_status")
                                      for n in ("missing_key", "in_progress", "payload_mismatch"))
    key_in_use = fact_number("stripe_key_in_use_status")
    # Rows stripe_before_idempotency_layer (429, a 401 without an API key) and stripe_v1_saved_once (a request that
    # conflicts with a concurrent one, Stripe's 409): turned away before the idempotency layer, nothing saved.
    unsaved = frozenset({fact_number("stripe_rate_limit_status"), 401, key_in_use})
    longest = fact_number("stripe_key_max_length")
    return {
        "stripe-v1": Behaviour("stripe-v1", key_required=False, replays_errors=True,
                               retention_seconds=fact_seconds("stripe_v1_key_min_age"), mismatch_status=400,
                               in_progress_status=key_in_use, missing_key_status=missing,
                               modelled=frozenset({"mismatch_status"}), retention_is_floor=True,
                               unsaved_statuses=unsaved, longest_key=longest,
                               assumed="the mismatch status (400) is the model's, and so is the 400 for a key over "
                                       f"{longest} characters; keys are removed at exactly 24 hours "
                                       "(Stripe: at least 24); a saved 500 is replayed on every retry (Stripe: "
                                       "usually)"),
        "stripe-v2": Behaviour("stripe-v2", key_required=False, replays_errors=False,
                               retention_seconds=fact_seconds("stripe_v2_replay_window"), mismatch_status=400,
                               in_progress_status=key_in_use, missing_key_status=missing, longest_key=longest,
                               modelled=frozenset({"mismatch_status", "in_progress_status", "replays_errors"}),
                               assumed="v2 is modelled to reject other parameters as v1 does, with the same statuses; "
                                       "a retry always completes the failed work (Stripe: when possible)"),
        "ietf-draft": Behaviour("ietf-draft", key_required=True, replays_errors=False,
                                retention_seconds=fact_seconds("stripe_v1_key_min_age"), mismatch_status=mismatch,
                                in_progress_status=in_progress, missing_key_status=missing,
                                modelled=frozenset({"retention_seconds", "replays_errors"}),
                                assumed="the draft sets no retention; the model keeps keys 24 hours. The draft answers a "
                                        "retry with the earlier result, 'success or an error'; a failure the server "
                                        "rolled back completed nothing, so the model runs the retry instead"),
    }


def key_of_call(message_id: str, call: str) -> str:
    """The idempotency key of one call a handler makes for a message, ``<message ID>:<call>``, within Stripe's limit.

    The inbox admits message IDs of up to ``LONGEST_ID`` (255) characters (:mod:`idemlib.messages`), so the
    joined key can pass the 255 Stripe accepts. Such a key sends the ID's SHA-256 instead (64 hex digits),
    its call marked ``#sha256``: a call's name never holds a '#', so no key of a short ID reads the same. An ID the
    inbox admits may also hold characters a header cannot carry as they are (non-ASCII, control characters): an
    HTTP client refuses such a header, so every delivery would fail; those IDs go as their digest too.
    """
    key = f"{message_id}:{call}"
    if len(key) <= fact_number("stripe_key_max_length") and key.isascii() and key.isprintable():
        return key
    return f"{hashlib.sha256(message_id.encode()).hexdigest()}:{call}#sha256"


@dataclass(frozen=True)
class Response:
    """What the provider answered: an HTTP-like status and body, and whether it was a replay."""

    status: int
    body: dict[str, Any]
    replayed: bool = False

    @property
    def ok(self) -> bool:
        return self.status < 400


@dataclass
class _Stored:
    parameters: dict[str, Any]
    created_at: float
    response: Response | None = None  # None while the first request is still being processed
    charge: dict[str, Any] | None = None  # the money taken under this key, even if the answer was an error


@dataclass(frozen=True)
class _Failure:
    status: int
    began: bool  # whether the endpoint had begun executing (only then is anything saved under the key)
    charged: bool = False  # the money was taken before the error


@dataclass
class PaymentProvider:
    """An external payments API with an idempotency-key store of its own.

    ``charges`` lists every charge really made, which is what the customer's card
    statement shows; ``calls`` counts the requests that reached the provider.
    ``refuse_next`` and ``fail_next`` schedule failures of the next requests.
    """

    behaviour: Behaviour = field(default_factory=lambda: behaviours()["stripe-v1"])
    clock: VirtualClock = field(default_factory=VirtualClock)
    charges: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    _keys: dict[str, _Stored] = field(default_factory=dict)
    _failures: list[_Failure] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(81))
    _carried: dict[str, str | None] = field(default_factory=dict)  # charge ID -> the key its call carried

    def refuse_next(self, count: int = 1, *, status: int | None = None) -> None:
        """Turn the next ``count`` requests away before the endpoint begins (by default a rate limit): nothing is saved.

        Stripe's rate limiters run before its idempotency layer, and so does the
        check of the API key: a 429 or a 401 leaves the idempotency key unknown.
        """
        status = fact_number("stripe_rate_limit_status") if status is None else status
        self._failures += [_Failure(status, began=False)] * count

    def fail_next(self, count: int = 1, *, status: int | None = None, charged: bool = False) -> None:
        """Make the next ``count`` requests fail after the endpoint began; with ``charged`` the money was already taken.

        The error answer is the same either way: the caller cannot tell from it
        whether the card was charged. The status is 500 unless given.
        """
        status = fact_number("stripe_v1_replays_status") if status is None else status
        self._failures += [_Failure(status, began=True, charged=charged)] * count

    def charge(self, key: str | None, *, order_id: int, amount: int) -> Response:
        """Charge ``order_id`` ``amount`` dollars, or return the stored result of an earlier call with ``key``."""
        self.calls += 1
        parameters = {"order_id": order_id, "amount": amount}
        if key is None:
            if self.behaviour.key_required:
                return Response(self.behaviour.missing_key_status,
                                {"error": "Idempotency-Key is required for this request; send a unique key and retry"})
            return self._work(parameters, _Stored(parameters, self.clock.now()), key)
        if self.behaviour.longest_key is not None and len(key) > self.behaviour.longest_key:
            return Response(400, {"error": f"an idempotency key is at most {self.behaviour.longest_key} characters; "
                                           f"this one has {len(key)}"})  # refused before the idempotency layer
        stored = self._keys.get(key)
        if stored is not None and self.clock.now() - stored.created_at >= self.behaviour.retention_seconds:
            del self._keys[key]  # the key has expired: it is forgotten, and a reuse runs as a new request
            stored = None
        if stored is None:
            if self._failures and not self._failures[0].began:
                return self._refuse()  # turned away before the endpoint began: the key stays unknown
            stored = self._keys[key] = _Stored(parameters, self.clock.now())
            return self._work(parameters, stored, key)
        if stored.parameters != parameters:
            return Response(self.behaviour.mismatch_status,
                            {"error": f"key {key!r} was first used with {stored.parameters}; a different request "
                                      "needs a key of its own"})
        if stored.response is None:
            return Response(self.behaviour.in_progress_status, {"error": f"a request with key {key!r} is still in progress"})
        if not stored.response.ok and not self.behaviour.replays_errors:
            return self._work(parameters, stored, key)  # v2: run the failed work again, to completion
        return Response(stored.response.status, stored.response.body, replayed=True)

    def stored_keys(self) -> dict[str, str | None]:
        """Each idempotency key the provider keeps, with the ID of the charge its first result made (None if none)."""
        return {key: stored.response.body.get("id") if stored.response else None for key, stored in self._keys.items()}

    def begin(self, key: str, *, order_id: int, amount: int) -> None:
        """Register ``key`` as in progress without finishing it: a first request still being processed."""
        self._keys[key] = _Stored({"order_id": order_id, "amount": amount}, self.clock.now())

    def charges_for(self, order_id: int) -> list[dict[str, Any]]:
        """The charges made for ``order_id``: what a caller reads to find out whether an unclear attempt took the money."""
        return [charge for charge in self.charges if charge["order_id"] == order_id]

    def charges_carrying(self, key: str) -> list[dict[str, Any]]:
        """The charges made by calls that carried ``key``, found long after the key itself was pruned.

        The model's stand-in for the caller's own ID sent with the charge as metadata and searched for
        later (Stripe: metadata, and a search that finds a new charge within a minute or so). Unlike
        :meth:`charges_for`, it cannot confuse two calls for one order, a $40 charge and a $5 fee.
        """
        return [charge for charge in self.charges if self._carried[charge["id"]] == key]

    def total_charged(self) -> int:
        """Dollars really taken from cards."""
        return sum(charge["amount"] for charge in self.charges)

    def _refuse(self) -> Response:
        status = self._failures.pop(0).status
        return Response(status, {"error": f"request refused before it was processed ({status}); retry with the same key"})

    def _work(self, parameters: dict[str, Any], stored: _Stored, key: str | None) -> Response:
        if self._failures and not self._failures[0].began:
            return self._refuse()
        failure = self._failures.pop(0) if self._failures else None
        if stored.charge is None and (failure is None or failure.charged):
            stored.charge = {"id": f"ch_{next(self._ids)}", **parameters}
            self.charges.append(stored.charge)
            self._carried[stored.charge["id"]] = key
        if failure is not None:
            stored.response = Response(failure.status, {"error": "internal error while processing the charge"})
        else:
            assert stored.charge is not None
            stored.response = Response(200, stored.charge)
        return stored.response


FIRST_FAILURES: dict[str, Callable[[PaymentProvider], None]] = {
    "turned away before it ran (429)": lambda provider: provider.refuse_next(),
    "failed while running, no money taken (500)": lambda provider: provider.fail_next(),
    "failed while running, money taken (500)": lambda provider: provider.fail_next(charged=True),
}
"""The three ways lesson 04's first attempt fails, as schedules for a provider."""


def _answer(response: Response) -> str:
    return f"{response.status}{' replayed' if response.replayed else ''}"


def retries_after_failure(key: str = "m-7f3:charge", *, retries: int = 2) -> list[dict[str, Any]]:
    """Each first failure under Stripe's v1 and v2 rules, followed by ``retries`` retries with the same key."""
    rows = []
    for failure, schedule in FIRST_FAILURES.items():
        for name in ("stripe-v1", "stripe-v2"):
            provider = PaymentProvider(behaviours()[name])
            schedule(provider)
            answers = [provider.charge(key, order_id=1042, amount=40) for _ in range(1 + retries)]
            rows.append({"first attempt": failure, "rules": name, "answers": " → ".join(map(_answer, answers)),
                         "card charged ($)": provider.total_charged()})
    return rows


def _charge_1042(provider: PaymentProvider, key: str) -> None:
    provider.charge(key, order_id=1042, amount=40)


def _after_a_day(provider: PaymentProvider, key: str) -> None:
    provider.clock.advance(25 * 3600)  # past the 24 hours after which v1 may prune the key
    _charge_1042(provider, key)


def _look_first(provider: PaymentProvider, key: str) -> None:
    if not provider.charges_carrying(key):  # nothing was taken: only now is a second attempt safe
        _charge_1042(provider, f"{key}:2")


AFTER_AN_UNCLEAR_500: dict[str, Callable[[PaymentProvider, str], None]] = {
    "retry with the same key": _charge_1042,
    "retry with a new key": lambda provider, key: _charge_1042(provider, f"{key}:2"),
    "same key, 25 hours later": _after_a_day,
    "look the charge up, then decide": _look_first,
}
"""What a consumer can do after Stripe v1 answered 500 to ``m-7f3:charge``."""


def after_an_unclear_500(key: str = "m-7f3:charge") -> list[dict[str, Any]]:
    """Each move of :data:`AFTER_AN_UNCLEAR_500`, when the failed attempt had taken the money and when it had not."""
    rows = []
    for move, act in AFTER_AN_UNCLEAR_500.items():
        row: dict[str, Any] = {"after a 500 under v1": move}
        for charged in (True, False):
            provider = PaymentProvider(behaviours()["stripe-v1"])
            provider.fail_next(charged=charged)
            provider.charge(key, order_id=1042, amount=40)
            act(provider, key)
            row[f"card charged ($), money {'had' if charged else 'had not'} moved"] = provider.total_charged()
        rows.append(row)
    return rows
