"""The application behind the server: ``POST /charges`` with idempotency keys, and an order's status.

``POST /charges`` is not idempotent: two identical requests make two charges. A
client that retries after a timeout therefore sends an ``Idempotency-Key`` header,
and the server stores the outcome of the first request under that key (scoped to
the client that sent it, see :mod:`idemlib.http.keys`). A repeat gets the stored
outcome, marked as a replay, instead of a second execution.

``PUT`` and ``DELETE`` on an order's status need no key: HTTP defines them, and the
safe methods (GET, HEAD, OPTIONS, TRACE), as idempotent (RFC 9110, section 9.2.2),
and setting or removing a value twice leaves the same state as doing it once.

Input is checked against what the database can hold before any work, and refused
as a problem that says what to send instead; nothing is stored for it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from idemlib.clock import VirtualClock
from idemlib.http.keys import KeyRecord, KeyStore, retry_conflicts
from idemlib.http.problems import Refused, problem
from idemlib.provider import Behaviour, behaviours
from idemlib.stores import DuckDBPayments, PaymentsSession, WriteConflict
from idemlib.stores.sql import Cursor

MAX_KEY_LENGTH = 255
MAX_ID = 2**31 - 1  # the INTEGER columns of the payments and order tables hold no more
MAX_STATUS_LENGTH = 64
HOLD_LIMIT_SECONDS = 10.0  # a held charge goes on after this long, even if nobody lets it go
ORDERS_SCHEMA = "CREATE TABLE IF NOT EXISTS order_status (order_id INTEGER PRIMARY KEY, status VARCHAR NOT NULL)"


class _TakenOver(Exception):
    """The claim a request worked under is no longer the key's: another request took it over."""


def _busy() -> Refused:
    return Refused(503, "Busy", "Concurrent requests kept this one from committing; nothing was changed. "
                   "Retry in a moment, with the same key if it has one.", headers={"Retry-After": "1"})


def fingerprint(body: dict[str, Any]) -> str:
    """A digest of a request body, the same for the same content whatever the key order."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def parse_token(raw: str | None, header: str) -> str | None:
    """The value of an ``Idempotency-Key`` or ``X-Client-Id`` header, or None if absent; refuses a malformed one.

    The IETF draft writes the key as a quoted string; a bare token is accepted too.
    """
    if raw is None:
        return None
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    odd = next((c for c in value if not 33 <= ord(c) <= 126), None)
    if not value or len(value) > MAX_KEY_LENGTH or odd is not None:
        found = ("is empty" if not value else f"has {len(value)} characters" if len(value) > MAX_KEY_LENGTH
                 else f"contains {'a space' if odd == ' ' else repr(odd)}")
        raise Refused(400, f"Malformed {header}",
                      f"An {header} must be 1 to {MAX_KEY_LENGTH} visible ASCII characters without spaces (this "
                      f"server's rule); this one {found}. Generate one per operation, for example a UUID, and reuse it "
                      "on retry.")
    return value


def parse_key(raw: str | None) -> str | None:
    """The key from an ``Idempotency-Key`` header, or None if there is none; refuses a malformed one."""
    return parse_token(raw, "Idempotency-Key")


def parse_json(raw: bytes, example: str) -> Any:
    """The JSON document in a request body; refuses one that is not JSON or nests deeper than the parser goes."""
    try:
        return json.loads(raw or b"")
    except RecursionError:
        raise Refused(400, "Body nested too deeply", f"The JSON nests too deeply to read. Send a flat object such as {example}.") from None
    except ValueError:
        raise Refused(400, "Body is not JSON", f"Send a JSON object such as {example} with Content-Type: application/json.") from None


def parse_charge_body(raw: bytes) -> dict[str, Any]:
    """The JSON body of ``POST /charges``: an object with a whole ``order_id`` and ``amount`` from 1 to 2^31 - 1."""
    example = '{"order_id": 1042, "amount": 40}'
    body = parse_json(raw, example)
    if not isinstance(body, dict):
        raise Refused(400, "Body is not a JSON object", f"Send a JSON object such as {example}.")
    for name in ("order_id", "amount"):
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ID:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
            raise Refused(400, f"Invalid field {name}", f"{name!r} must be a whole number from 1 to {MAX_ID}, got {shown}.")
    return {"order_id": body["order_id"], "amount": body["amount"]}


def parse_order_id(segment: str) -> int:
    """The order ID in a path segment: ASCII digits (``isdigit`` also accepts ``²``) within the column's range."""
    if segment.isascii() and segment.isdigit() and 0 < int(segment) <= MAX_ID:
        return int(segment)
    raise Refused(404, "Not found", f"No order {segment[:40]!r}: order IDs are whole numbers from 1 to {MAX_ID}. "
                  "Use POST /charges, or PUT or DELETE /orders/<id>/status.")


@dataclass
class ChargesApi:
    """Charges with idempotency keys, and idempotent order status, over one DuckDB database.

    ``clock`` ages the stored keys (a virtual clock, so a lesson can let 25 hours
    pass at once) and times their in-progress deadline. ``work_seconds`` is real time
    spent on each charge, long enough for a concurrent duplicate to find the first
    request still in progress. ``in_progress_seconds`` is the course's choice of
    deadline, far longer than any charge here takes.
    """

    behaviour: Behaviour = field(default_factory=lambda: behaviours()["ietf-draft"])
    clock: VirtualClock = field(default_factory=VirtualClock)
    work_seconds: float = 0.0
    drop_share: float = 0.0
    seed: int = 0
    payments: DuckDBPayments = field(default_factory=DuckDBPayments)
    in_progress_seconds: float = 60.0
    _failures_left: int = 0
    _drops_left: int = 0
    _holds: list[threading.Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._drops = random.Random(self.seed)
        self.keys = KeyStore(self.payments, retention_seconds=self.behaviour.retention_seconds,
                             replays_errors=self.behaviour.replays_errors, in_progress_seconds=self.in_progress_seconds)
        self.payments.connect().execute(ORDERS_SCHEMA)
        # Charge IDs go on from those already in the database, as after a restart.
        self._charge_ids = itertools.count(81 + self.executions)

    @property
    def executions(self) -> int:
        """Charges really made: the committed rows of the payments table."""
        return len(self.payments.payments())

    def fail_next(self, count: int = 1) -> None:
        """The next ``count`` charges fail with 500 after the work began (the card network down), and roll back."""
        self._failures_left += count

    def hold_next(self) -> threading.Event:
        """Keep the next charge at work until the returned event is set: a first request that is still being processed.

        A lesson or a check holds a request this way instead of timing it, so
        that a busy machine cannot let it finish before its retry arrives.
        """
        gate = threading.Event()
        with self._lock:
            self._holds.append(gate)
        return gate

    def _pending_holds(self) -> int:
        with self._lock:
            return len(self._holds)

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

    def post_charge(self, client: str, raw_key: str | None, raw_body: bytes) -> tuple[int, dict[str, Any], bool]:
        """Handle ``POST /charges``: returns (status, body, replayed)."""
        key = parse_key(raw_key)
        body = parse_charge_body(raw_body)
        if key is None:
            if self.behaviour.key_required:
                raise Refused(self.behaviour.missing_key_status, "Idempotency-Key required",
                              "POST /charges needs an Idempotency-Key header: create a unique key (a UUID) before the "
                              "first attempt and send the same key on every retry.")
            return (*self._charge(body, None), False)
        decision, record = self.keys.claim(client, key, fingerprint(body), self.clock.now())
        if decision == "busy":
            raise Refused(self.behaviour.in_progress_status, "Request in progress",
                          f"A request with Idempotency-Key {key!r} is still being processed. Retry after it finishes.")
        if decision == "mismatch":
            raise Refused(self.behaviour.mismatch_status, "Idempotency-Key reused with a different payload",
                          f"Idempotency-Key {key!r} was first used with another request body. "
                          "Use a new key for a new operation.")
        if decision == "replay":
            assert record is not None and record.status is not None and record.body is not None
            return record.status, record.body, True
        return (*self._charge(body, record), False)

    def _charge(self, body: dict[str, Any], claim: KeyRecord | None) -> tuple[int, dict[str, Any]]:
        """Do the work and, under a claim, store its answer in the same transaction; a failure is answered too."""
        with self._lock:
            gate = self._holds.pop(0) if self._holds else None
            outage = self._failures_left > 0
            if outage:
                self._failures_left -= 1
        if gate is not None:
            gate.wait(timeout=HOLD_LIMIT_SECONDS)
        time.sleep(self.work_seconds)
        if outage:
            status, result = 500, self._failure("Card network failed", "The card network failed while the charge was made",
                                               keyed=claim is not None)
        else:
            status, result = 201, {"id": f"ch_{next(self._charge_ids)}", **body}

        def commit(cursor: Cursor) -> None:
            session = PaymentsSession(cursor, self.payments)
            if status == 201:
                session.charge(body["order_id"], body["amount"], claim.key if claim else result["id"])
            if claim is not None and not self.keys.complete(cursor, claim, status, result):
                raise _TakenOver

        try:
            retry_conflicts(self.payments, commit)  # nothing of it commits on a conflict, so it may run again
            return status, result
        except _TakenOver:
            raise Refused(self.behaviour.in_progress_status, "Request taken over",
                          "This request outlived its claim on the key and another request took it over; nothing was "
                          "charged by this one. Retry with the same key to receive the answer.") from None
        except (WriteConflict, *self.payments.conflict_errors):  # still contested after rereads: nothing committed
            if claim is not None:
                self.keys.settle(claim)
            raise _busy() from None
        except Exception as error:  # a broken database or a bug: the effect rolled back, the key is settled
            failure = self._failure("Charge failed", f"The charge failed on the server ({type(error).__name__})",
                                    keyed=claim is not None)
            if claim is not None:
                self.keys.settle(claim, (500, failure))
            return 500, failure

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

    def put_status(self, order_id: int, raw_body: bytes) -> tuple[int, dict[str, Any]]:
        """``PUT /orders/<id>/status``: set the status. Twice is the same as once; no key needed."""
        body = parse_json(raw_body, '{"status": "PAID"}')
        status = body.get("status") if isinstance(body, dict) else None
        if not isinstance(status, str) or not 0 < len(status) <= MAX_STATUS_LENGTH or not status.isprintable():
            raise Refused(400, "Invalid status", f'Send a JSON object such as {{"status": "PAID"}}: a status of 1 to '
                          f"{MAX_STATUS_LENGTH} printable characters.")
        self._write_status("INSERT OR REPLACE INTO order_status VALUES (?, ?)", (order_id, status))
        return 200, {"order_id": order_id, "status": status}

    def delete_status(self, order_id: int) -> tuple[int, dict[str, Any]]:
        """``DELETE /orders/<id>/status``: remove the status. Removing what is gone changes nothing."""
        self._write_status("DELETE FROM order_status WHERE order_id = ?", (order_id,))
        return 200, {"order_id": order_id, "status": None}

    def _write_status(self, sql: str, parameters: tuple[Any, ...]) -> None:
        # Setting or removing a value is safe to repeat, so a write conflict with a concurrent request is retried.
        try:
            retry_conflicts(self.payments, lambda cursor: cursor.execute(sql, parameters))
        except (WriteConflict, *self.payments.conflict_errors):
            raise _busy() from None

    def order_status(self, order_id: int) -> str | None:
        """The status stored for ``order_id``, or None."""
        rows = self.payments.connect().execute("SELECT status FROM order_status WHERE order_id = ?", (order_id,)).fetchall()
        return rows[0][0] if rows else None

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
        deadline = time.monotonic() + seconds
        while not (any(stored == key for _, stored, _ in self.stored_keys()) and not self._pending_holds()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

