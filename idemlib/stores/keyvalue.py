"""A key-value store with DynamoDB's rules for conditional writes, transactions and time to live.

Modelled in process, with the same session calls as the SQL stores, so the very
same handlers run on it:

- outside a transaction, recording an ID is a ``PutItem`` with the condition
  ``attribute_not_exists(pk)``: it is rejected when the key is already there;
- inside one, the writes are collected and applied by ``TransactWriteItems`` at
  commit, all or nothing, with every condition checked at that moment; a cancelled
  one raises :class:`TransactionCanceled` with a reason per action, as DynamoDB's
  ``CancellationReasons`` gives them, and ``faults`` make it cancelled for reasons
  other than a condition (too little capacity, a concurrent transaction, an item too
  large) or lose its reply;
- an item with a time to live is not deleted when it expires but some time within
  the next days (``deletion_delay_seconds``, drawn from a seed): until then it can
  still be read, and still blocks a conditional put.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from idemlib.clock import VirtualClock
from idemlib.stores.sql import IdReused, WriteConflict

MARKER = "msg#"
"""The prefix of a message marker's key."""
REPLY_LOST = "reply lost"
"""A fault: the transaction is applied, but its reply never reaches the client, which sends it again."""
RETRY_CODES = ("ProvisionedThroughputExceeded", "ThrottlingError", "TransactionConflict")
"""Cancellation codes a later attempt may not meet, AWS's names: too little capacity on a provisioned table, a table
that is scaling on demand, another transaction in progress on the item."""
DEAD_LETTER_CODES = ("ValidationError", "ItemCollectionSizeLimitExceeded")
"""Cancellation codes the same message meets on every attempt (an item or an item collection too large, a wrong
type): retrying cannot help, so the message goes to the dead-letter queue."""
CANCELLING_FAULTS = RETRY_CODES + DEAD_LETTER_CODES
"""Faults that cancel a transaction before it writes anything, named by the code ``CancellationReasons`` gives."""
DONE, RETRY, DEAD_LETTER = "done", "retry", "dead-letter"
"""What a cancelled transaction tells the consumer to do with its message: ack, give back, or dead-letter."""


class TransactionCanceled(WriteConflict):
    """``TransactionCanceledException``: nothing was written. ``reasons`` is its ``CancellationReasons``, one code
    per action by the action's key, ``"None"`` for an action that caused nothing."""

    def __init__(self, reasons: dict[str, str]) -> None:
        self.reasons = reasons
        super().__init__("TransactionCanceledException: " + ", ".join(f"{code} on {key}" for key, code in reasons.items()))

    @property
    def marker_already_there(self) -> bool:
        """Whether the message marker's own condition failed: the message's transaction committed before (an
        earlier attempt of this one, or a rival's), so the message is done."""
        return any(key.startswith(MARKER) and code == "ConditionalCheckFailed" for key, code in self.reasons.items())

    @property
    def verdict(self) -> str:
        """:data:`DONE` on the marker's ``ConditionalCheckFailed``; :data:`RETRY` when every other code is one of
        :data:`RETRY_CODES`; else :data:`DEAD_LETTER` (a validation or size error, a business item's condition):
        the same message would be cancelled the same way on every delivery."""
        if self.marker_already_there:
            return DONE
        return RETRY if set(self.reasons.values()) - {"None"} <= set(RETRY_CODES) else DEAD_LETTER


@dataclass
class KeyValueTable:
    """Items by key, each a dict; ``expires_at`` marks an item's time to live."""

    clock: VirtualClock = field(default_factory=VirtualClock)
    deletion_delay_seconds: float = 2 * 86400
    seed: int = 0
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    """What the next transactions meet, one fault each in order: one of :data:`CANCELLING_FAULTS`, or
    :data:`REPLY_LOST`. One of :data:`DEAD_LETTER_CODES` stays: it belongs to the request, not to the moment."""

    def __post_init__(self) -> None:
        self._delays = random.Random(self.seed)
        self._deleted_at: dict[str, float] = {}
        self._item_numbers = itertools.count(1)

    def new_key(self, prefix: str) -> str:
        """A key no other item has or will have, as a generated item ID would be."""
        return f"{prefix}#{next(self._item_numbers)}"

    def put(self, key: str, item: dict[str, Any], *, if_absent: bool = False) -> bool:
        """PutItem; with ``if_absent`` the condition ``attribute_not_exists`` applies. Returns whether it was written."""
        self.reap()
        if if_absent and key in self.items:
            return False
        self.items[key] = dict(item)
        return True

    def transact_write(self, writes: list[tuple[str, dict[str, Any], bool]]) -> dict[str, str] | None:
        """TransactWriteItems: (key, item, if_absent) writes, applied all together or not at all. Returns None
        when applied, else the cancellation's reason per action's key. Raises :class:`ReplyLost` for an applied
        transaction whose reply the next fault loses."""
        self.reap()
        fault = (self.faults[0] if self.faults[0] in DEAD_LETTER_CODES else self.faults.pop(0)) if self.faults else None
        if fault in CANCELLING_FAULTS:
            return {key: fault if _meets(fault, key) else "None" for key, _, _ in writes}
        reasons = {key: "ConditionalCheckFailed" if if_absent and key in self.items else "None"
                   for key, _, if_absent in writes}
        if set(reasons.values()) != {"None"}:
            return reasons
        for key, item, _ in writes:
            self.items[key] = dict(item)
        if fault == REPLY_LOST:
            raise ReplyLost("TransactWriteItems applied; its reply was lost")
        return None

    def reap(self) -> int:
        """Delete expired items whose (late) deletion time has come; returns how many went."""
        now = self.clock.now()
        gone = []
        for key, item in self.items.items():
            expires = item.get("expires_at")
            if expires is not None and now >= expires:
                when = self._deleted_at.setdefault(key, expires + self._delays.random() * self.deletion_delay_seconds)
                if now >= when:
                    gone.append(key)
        for key in gone:
            del self.items[key]
            del self._deleted_at[key]
        return len(gone)


def _meets(fault: str, key: str) -> bool:
    """Whether ``fault`` is the code of the action on ``key``. The model's choice (AWS names only the items "which
    caused the transaction to get cancelled"): a conflict is on the marker, a rival's; a size or validation error
    on the payment item; too little capacity on every action."""
    if fault == "TransactionConflict":
        return key.startswith(MARKER)
    return not key.startswith(MARKER) if fault in DEAD_LETTER_CODES else True


class ReplyLost(Exception):
    """A request whose reply never came: the client cannot tell whether it was applied."""


class KeyValueSession:
    """One consumer's client of the key-value table, with the SQL sessions' calls."""

    def __init__(self, table: KeyValueTable, ttl_seconds: float | None) -> None:
        self._table = table
        self._ttl = ttl_seconds
        self._pending: list[tuple[str, dict[str, Any], bool]] | None = None

    @property
    def in_transaction(self) -> bool:
        return self._pending is not None

    def begin(self) -> None:
        self._pending = []

    def commit(self) -> None:
        """Send the transaction's writes (none: nothing is sent). Raises :class:`TransactionCanceled`."""
        writes, self._pending = self._pending or [], None
        if not writes:
            return
        try:
            reasons = self._table.transact_write(writes)
        except ReplyLost:
            # The consumer calls again: a new call, so a new ClientRequestToken (botocore fills one in for each call
            # not given one, and reuses it on its own retries, which would get the first call's effect instead),
            # and the marker the first attempt wrote cancels it.
            reasons = self._table.transact_write(writes)
        if reasons is not None:
            raise TransactionCanceled(reasons)

    def rollback(self) -> None:
        self._pending = None

    def _write(self, key: str, item: dict[str, Any], if_absent: bool) -> bool:
        if self._pending is None:
            return self._table.put(key, item, if_absent=if_absent)
        if if_absent and key in self._table.items:
            return False  # the condition would fail; a handler learns it before committing
        self._pending.append((key, item, if_absent))
        return True

    def record_message(self, message_id: str, fingerprint: str | None = None) -> bool:
        """A conditional put of the marker ``msg#<id>``; True if it was not there.

        As on the SQL stores, a ``fingerprint`` of the payload is kept with the
        marker, and a duplicate whose stored fingerprint differs raises :class:`IdReused`.
        """
        key = f"{MARKER}{message_id}"
        marker: dict[str, Any] = {"message_id": message_id, "fingerprint": fingerprint}
        if self._ttl is not None:
            marker["expires_at"] = self._table.clock.now() + self._ttl
        if self._write(key, marker, if_absent=True):
            return True
        stored = self._table.items.get(key, {}).get("fingerprint")
        if fingerprint is not None and stored not in (None, fingerprint):
            raise IdReused.for_message(message_id)
        return False

    def has_processed(self, message_id: str) -> bool:
        self._table.reap()
        return f"{MARKER}{message_id}" in self._table.items

    def charge(self, order_id: int, amount: int, message_id: str) -> None:
        self._write(self._table.new_key(f"pay#{message_id}"),
                    {"order_id": order_id, "amount": amount, "message_id": message_id}, if_absent=False)


class KeyValuePayments:
    """The payments 'database' as DynamoDB would hold it: payment items and message markers in one table."""

    engine = "key-value (DynamoDB rules, modelled)"

    def __init__(self, *, ttl_seconds: float | None = None, table: KeyValueTable | None = None) -> None:
        self.table = table or KeyValueTable()
        self.ttl_seconds = ttl_seconds

    def session(self) -> KeyValueSession:
        return KeyValueSession(self.table, self.ttl_seconds)

    def payments(self) -> pd.DataFrame:
        rows = [item for key, item in self.table.items.items() if key.startswith("pay#")]
        return pd.DataFrame(rows, columns=["order_id", "amount", "message_id"])

    def processed_ids(self) -> list[str]:
        return sorted(item["message_id"] for key, item in self.table.items.items() if key.startswith(MARKER))

    def total_charged(self) -> int:
        return int(self.payments()["amount"].sum())

    def empty(self) -> None:
        self.table.items.clear()
