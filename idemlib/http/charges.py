"""The application behind the server: ``POST /charges`` with idempotency keys, and an order's status.

``POST /charges`` is not idempotent: two identical requests make two charges. A
client that retries after a timeout therefore sends an ``Idempotency-Key`` header,
and the server stores the outcome of the first request under that key, scoped to
the client its bearer token authenticates (:mod:`idemlib.http.credentials`). A
repeat gets the stored outcome, marked as a replay, instead of a second execution.
A charge is a resource of its own, ``/charges/<id>``, which its client can read.

An order's status (``PUT`` and ``DELETE``, no key needed) is :mod:`idemlib.http.orders`.

Input is checked against what the database can hold before any work, and refused
as a problem that says what to send instead; nothing is stored for it.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from idemlib.clock import VirtualClock
from idemlib.http import fields
from idemlib.http.credentials import Credentials
from idemlib.http.keys import KeyRecord, KeyStore, retry_conflicts
from idemlib.http.orders import OrderStatuses, Preconditions, etag, parse_status
from idemlib.http.problems import Refused, busy, problem
from idemlib.provider import Behaviour, behaviours
from idemlib.stores import DuckDBPayments, PaymentsSession, WriteConflict
from idemlib.stores.sql import Cursor

MAX_ID = 2**31 - 1  # the INTEGER columns of the payments and order tables hold no more
HOLD_LIMIT_SECONDS = 30.0  # a held charge goes on after this long, even if nobody lets it go
CHARGES_SCHEMA = """CREATE TABLE IF NOT EXISTS charges (
    charge_id VARCHAR PRIMARY KEY,
    client_id VARCHAR NOT NULL,  -- whose charge it is: only that client can read it
    body      VARCHAR NOT NULL
)"""


class Hold(threading.Event):
    """Keeps one charge at work until it is set; ``taken`` is set once a charge has taken the hold."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = threading.Event()


class _TakenOver(Exception):
    """The claim a request worked under is no longer the key's: another request took it over."""


def fingerprint(body: dict[str, Any]) -> str:
    """A digest of a whole request body, every member of it, the same for the same content whatever the order of
    the members or the spacing: a member the server does not read (``"currency": "eur"``) changes it too."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class _RepeatedMember(ValueError):
    """A JSON object names one member twice; which value counts differs from one parser to the next."""


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) < len(names):
        raise _RepeatedMember(next(name for name in names if names.count(name) > 1))
    return dict(pairs)


def _not_json(constant: str) -> Any:
    # Python's parser takes NaN and Infinity, which RFC 8259 has no place for: a number is digits.
    raise ValueError(f"{constant} is not JSON")


def parse_key(lines: list[str]) -> str | None:
    """The key in a request's ``Idempotency-Key`` field lines, or None if there is none; 400 for a malformed one."""
    try:
        return fields.parse_key(lines)
    except fields.FieldError as error:
        raise Refused(400, "Malformed Idempotency-Key", f"This Idempotency-Key {error}. Send one Idempotency-Key, a "
                      f'String of 1 to {fields.MAX_KEY_LENGTH} visible characters in double quotes, such as '
                      '"8e03978e-40d5-43e8-bc93-6894a57f9324"; this server documents its key format at '
                      "/problems/malformed-idempotency-key.") from None


def parse_json(raw: bytes, example: str) -> Any:
    """The JSON document in a request body; refuses one that is not JSON or nests deeper than the parser goes."""
    try:
        return json.loads(raw or b"", object_pairs_hook=_unique_members, parse_constant=_not_json)
    except _RepeatedMember as repeated:  # RFC 8259 (section 4): names within an object SHOULD be unique
        raise Refused(400, "Repeated member in body",
                      f"The JSON object names {str(repeated)[:40]!r} more than once, and parsers differ on which "
                      f"value counts. Send each member once, as in {example}.") from None
    except RecursionError:
        raise Refused(400, "Body nested too deeply",
                      f"The JSON nests too deeply to read. Send a flat object such as {example}.") from None
    except ValueError:
        raise Refused(400, "Body is not JSON",
                      f"Send a JSON object such as {example} with Content-Type: application/json.") from None


def parse_charge_body(raw: bytes) -> dict[str, Any]:
    """The JSON body of ``POST /charges``, whole: an object with a whole ``order_id`` and ``amount`` from 1 to
    2^31 - 1 (other members are kept for the fingerprint, and not charged)."""
    example = '{"order_id": 1042, "amount": 40}'
    body = parse_json(raw, example)
    if not isinstance(body, dict):
        raise Refused(400, "Body is not a JSON object", f"Send a JSON object such as {example}.")
    for name in ("order_id", "amount"):
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
            raise Refused(400, f"Invalid field {name}", f"{name!r} must be a whole number from 1 to {MAX_ID}, got {shown}.")
    return body


def parse_order_id(segment: str) -> int:
    """The order ID in a path segment: ASCII digits (``isdigit`` also accepts ``²``) within the column's range."""
    if segment.isascii() and segment.isdigit() and 0 < int(segment) <= MAX_ID:
        return int(segment)
    raise Refused(404, "Not Found", f"No order {segment[:40]!r}: order IDs are whole numbers from 1 to {MAX_ID}. "
                  "Use POST /charges, or PUT or DELETE /orders/<id>/status.")


@dataclass
class ChargesApi:
    """Charges with idempotency keys, and idempotent order status, over one DuckDB database.

    ``clock`` ages the stored keys (a virtual clock, so a lesson can let 25 hours
    pass at once) and times their in-progress deadline. ``work_seconds`` is real time
    spent on each charge, long enough for a concurrent duplicate to find the first
    request still in progress. ``in_progress_seconds`` is the course's choice of
    deadline, far longer than any charge here takes. ``credentials`` issues the
    bearer tokens that say which client a request comes from.
    """

    behaviour: Behaviour = field(default_factory=lambda: behaviours()["ietf-draft"])
    clock: VirtualClock = field(default_factory=VirtualClock)
    work_seconds: float = 0.0
    drop_share: float = 0.0
    seed: int = 0
    payments: DuckDBPayments = field(default_factory=DuckDBPayments)
    in_progress_seconds: float = 60.0
    credentials: Credentials = field(default_factory=Credentials)
    _failures_left: int = 0
    _drops_left: int = 0
    _holds: list[Hold] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._drops = random.Random(self.seed)
        self._changed = threading.Condition(self._lock)  # notified when a key is claimed or a hold is taken
        self.keys = KeyStore(self.payments, retention_seconds=self.behaviour.retention_seconds,
                             replays_errors=self.behaviour.replays_errors, in_progress_seconds=self.in_progress_seconds)
        self.orders = OrderStatuses(self.payments)
        self.payments.connect().execute(CHARGES_SCHEMA)
        # Charge IDs go on from those already in the database, as after a restart. A charge's ID is a keyed digest
        # of its number, so that no client reads from its own IDs how many charges the server has made.
        self._charge_numbers = itertools.count(1 + self.executions)
        self._id_key = random.Random(f"charge-ids {self.seed}").randbytes(16)

    @property
    def executions(self) -> int:
        """Charges really made: the committed rows of the payments table."""
        return len(self.payments.payments())

    def fail_next(self, count: int = 1) -> None:
        """The next ``count`` charges fail with 500 after the work began, and roll back.

        The card network refuses the charge before taking any money (it says it is down): a failure known to
        have had no effect. A timeout, which leaves unknown whether the money moved, is not this case.
        """
        self._failures_left += count

    def hold_next(self) -> Hold:
        """Keep the next charge at work until the returned event is set: a first request that is still being processed.

        A lesson or a check holds a request this way instead of timing it, so
        that a busy machine cannot let it finish before its retry arrives.
        """
        gate = Hold()
        with self._lock:
            self._holds.append(gate)
        return gate

    def withdraw_hold(self, gate: Hold) -> bool:
        """Withdraw a hold no charge has taken (its request was answered without doing the work); False if taken."""
        with self._lock:
            if gate in self._holds:
                self._holds.remove(gate)
                return True
            return False

    def drop_next_responses(self, count: int = 1) -> None:
        """The next ``count`` charges are done and stored, but the connection closes before the answer is sent."""
        self._drops_left += count

    def take_drop(self) -> bool:
        """Whether the answer to the charge just done is dropped: a scheduled drop, or a seeded share of them."""
        with self._lock:
            if self._drops_left:
                self._drops_left -= 1
                return True
            return self._drops.random() < self.drop_share

    def issue_token(self, client: str) -> str:
        """A bearer token that authenticates ``client`` to this server (see :class:`Credentials`)."""
        return self.credentials.issue(client)

    def post_charge(self, client: str, key_lines: list[str], raw_body: bytes) -> tuple[int, dict[str, Any], bool]:
        """Handle ``POST /charges`` from ``client`` with its ``Idempotency-Key`` field lines: (status, body, replayed)."""
        key = parse_key(key_lines)
        received = parse_charge_body(raw_body)
        body = {"order_id": received["order_id"], "amount": received["amount"]}  # what the charge is made of
        if key is None:
            if self.behaviour.key_required:
                raise Refused(self.behaviour.missing_key_status, "Idempotency-Key required",
                              "POST /charges needs an Idempotency-Key header, the same on every attempt of one "
                              "operation; this server documents its key format at /problems/idempotency-key-required.")
            return (*self._charge(client, body, None), False)
        decision, record = self.keys.claim(client, key, fingerprint(received), self.clock.now())
        with self._changed:
            self._changed.notify_all()
        if decision == "busy":
            raise Refused(self.behaviour.in_progress_status, "Request in progress",
                          f"A request with Idempotency-Key {key!r} and this body is still being processed.")
        if decision == "mismatch":
            raise Refused(self.behaviour.mismatch_status, "Idempotency-Key reused with a different payload",
                          f"Idempotency-Key {key!r} was first used with another request body; this request "
                          "changed nothing.")
        if decision == "replay":
            assert record is not None and record.status is not None and record.body is not None
            return record.status, record.body, True
        return (*self._charge(client, body, record), False)

    def charge(self, client: str, charge_id: str) -> dict[str, Any]:
        """``GET /charges/<id>``: the charge, for the client that made it; 404 for anyone else, as for no charge."""
        rows = self.payments.connect().execute("SELECT body FROM charges WHERE charge_id = ? AND client_id = ?",
                                               (charge_id, client)).fetchall()
        if not rows:
            raise Refused(404, "Not Found", f"You have no charge {charge_id[:40]!r}.")
        return json.loads(rows[0][0])

    def _charge(self, client: str, body: dict[str, Any], claim: KeyRecord | None) -> tuple[int, dict[str, Any]]:
        """Do the work and, under a claim, store its answer in the same transaction; a failure is answered too."""
        with self._changed:
            gate = self._holds.pop(0) if self._holds else None
            outage = self._failures_left > 0
            if outage:
                self._failures_left -= 1
            self._changed.notify_all()
        if gate is not None:
            gate.taken.set()
            gate.wait(timeout=HOLD_LIMIT_SECONDS)
        time.sleep(self.work_seconds)
        if outage:
            status, result = 500, self._failure("Card network failed",
                                               "The card network refused the charge before taking any money",
                                               keyed=claim is not None)
        else:
            status, result = 201, {"id": self._charge_id(), **body}

        def commit(cursor: Cursor) -> None:
            session = PaymentsSession(cursor, self.payments)
            if status == 201:
                # the key as the server scopes it: two clients' payments under one key are two operations
                session.charge(body["order_id"], body["amount"], f"{client}:{claim.key}" if claim else result["id"])
                cursor.execute("INSERT INTO charges VALUES (?, ?, ?)", (result["id"], client, json.dumps(result)))
            if claim is not None and not self.keys.complete(cursor, claim, status, result):
                raise _TakenOver

        try:
            retry_conflicts(self.payments, commit)  # nothing of it commits on a conflict, so it may run again
            return status, result
        except _TakenOver:
            raise Refused(self.behaviour.in_progress_status, "Request taken over",
                          "This request outlived its claim on its Idempotency-Key, and a later request with the key "
                          "took the work over; nothing was charged by this one.") from None
        except (WriteConflict, *self.payments.conflict_errors):  # still contested after rereads: nothing committed
            if claim is not None:
                self.keys.settle(claim)
            raise busy() from None
        except Exception as error:  # a broken database or a bug, before or during the commit
            what = f"The charge failed on the server ({type(error).__name__})"
            # The charge and its answer commit together, so the charge's own row says whether the commit went
            # through. Only where it is known to be absent may the answer say "nothing was charged".
            charged = self._committed(result["id"]) if status == 201 else False
            if charged:  # committed before the error: the charge and the key's answer are both stored
                return status, result
            if charged is None:  # not known: the key stays in progress, and its deadline lets a retry settle it
                return 500, problem(500, "Charge failed", f"{what}, and whether it was charged is not known here. "
                                    + ("Retry later with the same key, never a new one: the key stays in progress "
                                       "until its deadline." if claim is not None else
                                       "Look the charge up before sending it again, and send a key with every charge."))
            failure = self._failure("Charge failed", what, keyed=claim is not None)
            if claim is not None:
                self.keys.settle(claim, (500, failure))
            return 500, failure

    def _charge_id(self) -> str:
        """The next charge's ID: 16 hex digits of a digest, 64 bits, so that two charges never share one."""
        with self._lock:
            number = next(self._charge_numbers)
        return "ch_" + hmac.new(self._id_key, str(number).encode(), hashlib.sha256).hexdigest()[:16]

    def _committed(self, charge_id: str) -> bool | None:
        """Whether the charge ``charge_id`` is in the database; None if the database cannot be read."""
        try:
            cursor = self.payments.connect()
            try:
                return bool(cursor.execute("SELECT count(*) FROM charges WHERE charge_id = ?", (charge_id,)).fetchall()[0][0])
            finally:
                cursor.close()
        except Exception:  # noqa: BLE001 - a database that cannot be read leaves the outcome unknown
            return None

    def _failure(self, title: str, what: str, *, keyed: bool) -> dict[str, Any]:
        """The 500 a failed charge is answered with, saying what a retry with the same key will get.

        Under rules that replay errors (Stripe's v1) the answer is stored and every
        retry gets it again; under the others a retry runs the charge again.
        """
        if not keyed:
            return problem(500, title, f"{what}, and nothing was charged. Send a key with every charge, so that a "
                           "retry cannot charge twice.")
        if self.behaviour.replays_errors:
            return problem(500, title, f"{what}. This answer is stored under your Idempotency-Key: a retry "
                           "with the same key gets it again. Look the charge up before any attempt with a new key.")
        return problem(500, title, f"{what}, and nothing was charged. Retry with the same key: the retry "
                       "runs the charge again.")

    def put_status(self, client: str, order_id: int, raw_body: bytes,
                   conditions: Preconditions) -> tuple[int, dict[str, Any], str | None]:
        """``PUT /orders/<id>/status`` of ``client``'s order: set the status (no key needed), if the preconditions
        hold; with the new ETag."""
        status = parse_status(parse_json(raw_body, '{"status": "PAID"}'))
        return self.orders.write(client, order_id, status, conditions)

    def delete_status(self, client: str, order_id: int,
                      conditions: Preconditions) -> tuple[int, dict[str, Any], str | None]:
        """``DELETE /orders/<id>/status`` of ``client``'s order: remove the status, if the preconditions hold; 404,
        changing nothing, if it has none (a repeat has the same effect, gone, and its answer says so)."""
        return self.orders.write(client, order_id, None, conditions)

    def get_status(self, client: str, order_id: int,
                   conditions: Preconditions) -> tuple[int, dict[str, Any], str | None]:
        """``GET /orders/<id>/status`` of ``client``'s order: the status and its ETag; 404 if it has none.

        A false ``If-Match`` is 412, a false ``If-None-Match`` 304 Not Modified: the
        client's copy is current (RFC 9110, section 13.2.2).
        """
        status, version = self.orders.read(client, order_id)
        if status is None or version is None:
            raise Refused(404, "Not Found", f"Order {order_id} has no status.")
        if not Preconditions(if_match=conditions.if_match).hold(version):
            raise Refused(412, "Precondition Failed", f"{conditions.shown()} does not hold for the status's current "
                          f"version ({etag(version)}).", headers={"ETag": etag(version)})
        if not conditions.hold(version):
            return 304, {}, etag(version)
        return 200, {"order_id": order_id, "status": status}, etag(version)

    def order_status(self, client: str, order_id: int) -> str | None:
        """The status stored for ``client``'s order ``order_id``, or None."""
        return self.orders.read(client, order_id)[0]

    def stored_keys(self) -> list[tuple[str, str, int | None]]:
        """Every stored key as (client, key, status); the status is None while the key is in progress."""
        return [(record.client, record.key, record.status) for record in self.keys.records()]

    def wait_for_key(self, key: str, seconds: float = 30.0) -> bool:
        """Wait (real time, at most ``seconds``) until some request has claimed ``key`` and no held charge is
        still waiting for its request to arrive; True if so.

        A lesson starts a slow request in a thread and sends its retry only once the
        first holds the key, so that a busy machine cannot reorder the two. The hold
        counts too: a request claims its key a moment before its charge takes the hold,
        and a second request sent in that moment would take the hold in its place.
        """
        def ready() -> bool:  # called with the lock held
            return not self._holds and any(stored == key for _, stored, _ in self.stored_keys())

        with self._changed:
            return self._changed.wait_for(ready, timeout=seconds)

