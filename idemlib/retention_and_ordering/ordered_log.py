"""An ordered log as the offset consumer sees it: records with sequence numbers, durable consumers, acks.

Two implementations share this shape: :class:`MemoryLog`, an in-process model, and
:class:`idemlib.retention_and_ordering.jetstream_log.JetStreamLog`, a real NATS JetStream stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from idemlib.facts import fact_seconds


@dataclass
class Record:
    """One delivery of a log record: its stream sequence, subject, payload and the way to acknowledge it."""

    seq: int
    subject: str
    data: dict[str, Any]
    ack: Callable[[], object]


@dataclass(frozen=True)
class Appended:
    """The log's answer to one publish: the record's stream sequence, and whether the log dropped it as a duplicate.

    A dropped duplicate carries the sequence of the record it repeats (JetStream's
    publish acknowledgement does the same).
    """

    seq: int
    duplicate: bool


class Subscription(Protocol):
    def fetch(self) -> Record | None: ...
    def done(self) -> bool: ...
    def close(self) -> None: ...


class OrderedLog(Protocol):
    """What the offset consumer needs of a log: append records, and durable consumers that redeliver unacked ones."""

    kind: str

    def publish(self, subject: str, data: dict[str, Any], msg_id: str | None = None) -> Appended: ...
    def append(self, subject: str, data: dict[str, Any]) -> int: ...
    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> Subscription: ...
    def duplicate_window(self) -> float: ...
    def max_ack_pending(self, consumer: str) -> int: ...
    def close(self) -> None: ...


@dataclass
class _ModelConsumer:
    subject: str | None
    max_in_flight: int
    next_index: int = 0
    unacked: dict[int, int] = field(default_factory=dict)  # seq -> index, delivered but not acked


class MemoryLog:
    """An ordered log in process, with JetStream's rules for a durable consumer with explicit acks.

    Assumptions of the model: a record delivered but never acked comes back (to the
    next subscription, a restarted process, or to this one when its ack was lost) once
    its ack wait has passed, which is after any record that may be sent meanwhile: at most ``max_in_flight`` records are
    out unacked at a time, so with one in flight nothing overtakes it. A publish that
    carries a message ID already published within ``duplicate_window`` seconds (wall
    clock, JetStream's default window unless given) is dropped, as JetStream drops a
    repeated ``Nats-Msg-Id``.
    """

    kind = "in-process model of an ordered log"

    def __init__(self, ack_wait: float = 0.0, duplicate_window: float | None = None) -> None:
        # ``ack_wait`` is accepted so both logs are made alike; the model's redelivery order does not depend on it.
        self.ack_wait = ack_wait
        self._duplicate_window = (fact_seconds("nats_duplicate_window_default") if duplicate_window is None
                                  else duplicate_window)
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        self.consumers: dict[str, _ModelConsumer] = {}
        self._published_ids: dict[str, tuple[int, float]] = {}  # message ID -> (sequence, when)

    def publish(self, subject: str, data: dict[str, Any], msg_id: str | None = None) -> Appended:
        """Append a record, unless ``msg_id`` was published less than the duplicate window ago."""
        now = time.monotonic()
        seen = self._published_ids.get(msg_id) if msg_id is not None else None
        if seen is not None and now - seen[1] < self._duplicate_window:
            return Appended(seen[0], True)
        self.records.append((len(self.records) + 1, subject, dict(data)))
        if msg_id is not None:
            self._published_ids[msg_id] = (len(self.records), now)
        return Appended(len(self.records), False)

    def append(self, subject: str, data: dict[str, Any]) -> int:
        return self.publish(subject, data).seq

    def subscribe(self, consumer: str, subject: str | None = None, max_in_flight: int = 1) -> _ModelSubscription:
        state = self.consumers.setdefault(consumer, _ModelConsumer(subject, max_in_flight))
        return _ModelSubscription(self, state)

    def duplicate_window(self) -> float:
        """Seconds within which a repeated message ID is dropped."""
        return self._duplicate_window

    def max_ack_pending(self, consumer: str) -> int:
        """How many records ``consumer`` may have out unacked (JetStream's ``max_ack_pending``)."""
        return self.consumers[consumer].max_in_flight

    def close(self) -> None:
        self.records.clear()


class _ModelSubscription:
    def __init__(self, log: MemoryLog, state: _ModelConsumer) -> None:
        self._log, self._state = log, state
        self._redeliver = sorted(state.unacked)  # what the previous process left unacked comes back first

    def _matches(self, index: int) -> bool:
        return self._state.subject is None or self._log.records[index][1] == self._state.subject

    def fetch(self) -> Record | None:
        state = self._state
        while state.next_index < len(self._log.records) and not self._matches(state.next_index):
            state.next_index += 1
        room = len(state.unacked) < state.max_in_flight
        if not self._redeliver and state.unacked and (not room or state.next_index >= len(self._log.records)):
            # nothing else may be sent now: the ack wait of what is out runs out (an ack that never arrived)
            self._redeliver = sorted(state.unacked)
        if self._redeliver and (not room or state.next_index >= len(self._log.records)):
            # its ack wait runs out only after whatever else may be sent meanwhile has been sent
            return self._record(state.unacked[self._redeliver.pop(0)])
        if not room or state.next_index >= len(self._log.records):
            return None
        index, state.next_index = state.next_index, state.next_index + 1
        state.unacked[index + 1] = index
        return self._record(index)

    def _record(self, index: int) -> Record:
        seq, subject, data = self._log.records[index]
        return Record(seq, subject, dict(data), lambda: self._state.unacked.pop(seq, None))

    def done(self) -> bool:
        rest = range(self._state.next_index, len(self._log.records))
        return not self._state.unacked and not any(self._matches(i) for i in rest)

    def close(self) -> None:
        self._redeliver = []
