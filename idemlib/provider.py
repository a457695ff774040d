"""A payment provider outside the consumer's database, and the idempotency keys it honours.

No local transaction covers a call to another company's API: a rollback undoes the
consumer's own rows, never the provider's charge. What protects the customer there
is the provider's own memory: the caller sends an idempotency key, the provider
stores the first result under it, and a repeat with the same key gets that stored
result instead of a second charge.

Three behaviours, selectable by name, differ where their sources say they do:

- ``stripe-v1``: the stored status and body are replayed even when the first result
  was an error; a key sent again with other parameters is rejected; keys may be
  removed once they are 24 hours old.
- ``stripe-v2``: a replay is recognised for 30 days, and a request whose first
  attempt failed is run again.
- ``ietf-draft``: a missing key is refused with 400, a retry while the first request
  is still in progress gets 409, a key reused with a different payload gets 422.

Figures come from ``data/facts.csv``. Where the sources are silent (the status
Stripe uses for a mismatch, what v2 does with other parameters), the model says so
in :attr:`Behaviour.assumed`.
"""

from __future__ import annotations

import itertools
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


def behaviours() -> dict[str, Behaviour]:
    """The three behaviours the course compares, with their figures read from the facts file."""
    missing, in_progress, mismatch = (fact_number(f"ietf_{n}_status") for n in ("missing_key", "in_progress", "payload_mismatch"))
    return {
        "stripe-v1": Behaviour("stripe-v1", key_required=False, replays_errors=True,
                               retention_seconds=fact_seconds("stripe_v1_key_min_age"), mismatch_status=400,
                               in_progress_status=in_progress, missing_key_status=missing,
                               assumed="the mismatch status (400) and the in-progress status (409) are the model's"),
        "stripe-v2": Behaviour("stripe-v2", key_required=False, replays_errors=False,
                               retention_seconds=fact_seconds("stripe_v2_replay_window"), mismatch_status=400,
                               in_progress_status=in_progress, missing_key_status=missing,
                               assumed="v2 is modelled to reject other parameters as v1 does, with the same statuses"),
        "ietf-draft": Behaviour("ietf-draft", key_required=True, replays_errors=True,
                                retention_seconds=fact_seconds("stripe_v1_key_min_age"), mismatch_status=mismatch,
                                in_progress_status=in_progress, missing_key_status=missing,
                                assumed="the draft sets no retention; the model keeps keys 24 hours"),
    }


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


@dataclass
class PaymentProvider:
    """An external payments API with an idempotency-key store of its own.

    ``charges`` lists every charge really made, which is what the customer's card
    statement shows. ``fail_next(n)`` makes the next ``n`` requests that reach the
    work fail with 503, as an outage would.
    """

    behaviour: Behaviour = field(default_factory=lambda: behaviours()["stripe-v1"])
    clock: VirtualClock = field(default_factory=VirtualClock)
    charges: list[dict[str, Any]] = field(default_factory=list)
    _keys: dict[str, _Stored] = field(default_factory=dict)
    _failures_left: int = 0
    _ids: itertools.count = field(default_factory=lambda: itertools.count(81))

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` requests that reach the work fail with 503 Service Unavailable."""
        self._failures_left += count

    def charge(self, key: str | None, *, order_id: int, amount: int) -> Response:
        """Charge ``order_id`` ``amount`` dollars, or return the stored result of an earlier call with ``key``."""
        parameters = {"order_id": order_id, "amount": amount}
        if key is None:
            if self.behaviour.key_required:
                return Response(self.behaviour.missing_key_status,
                                {"error": "Idempotency-Key is required for this request; send a unique key and retry"})
            return self._work(parameters)
        stored = self._keys.get(key)
        if stored is not None and self.clock.now() - stored.created_at >= self.behaviour.retention_seconds:
            del self._keys[key]  # the key has expired: it is forgotten, as a pruned key would be
            stored = None
        if stored is None:
            stored = self._keys[key] = _Stored(parameters, self.clock.now())
            stored.response = self._work(parameters)
            return stored.response
        if stored.parameters != parameters:
            return Response(self.behaviour.mismatch_status,
                            {"error": f"key {key!r} was first used with {stored.parameters}; use a new key for a new request"})
        if stored.response is None:
            return Response(self.behaviour.in_progress_status, {"error": f"a request with key {key!r} is still in progress"})
        if not stored.response.ok and not self.behaviour.replays_errors:
            stored.response = self._work(parameters)
            return stored.response
        return Response(stored.response.status, stored.response.body, replayed=True)

    def stored_keys(self) -> dict[str, str | None]:
        """Each idempotency key the provider keeps, with the ID of the charge its first result made (None if none)."""
        return {key: stored.response.body.get("id") if stored.response else None for key, stored in self._keys.items()}

    def begin(self, key: str, *, order_id: int, amount: int) -> None:
        """Register ``key`` as in progress without finishing it: a first request still being processed."""
        self._keys[key] = _Stored({"order_id": order_id, "amount": amount}, self.clock.now())

    def total_charged(self) -> int:
        """Dollars really taken from cards."""
        return sum(charge["amount"] for charge in self.charges)

    def _work(self, parameters: dict[str, Any]) -> Response:
        if self._failures_left:
            self._failures_left -= 1
            return Response(503, {"error": "service unavailable, try again later"})
        charge = {"id": f"ch_{next(self._ids)}", **parameters}
        self.charges.append(charge)
        return Response(200, charge)
