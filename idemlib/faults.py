"""What goes wrong in a run: a consumer that dies before a step, an ack that never arrives.

A fault plan is consulted by the simulator's engine, in one place, with the copy's
position on the queue; it never reaches into the handler.
Faults can be named one by one (crash before the charge on the first delivery of
m-7f3) or drawn at a rate. Drawn faults depend only on the seed, the message and the
delivery, never on the order of calls, so two handlers run under one plan meet the
very same faults and their totals can be compared honestly. With ``per_copy`` the
draw depends on the copy on the queue (the broker's position for it) instead of the
message ID, so runs that name the same copies differently meet the same faults too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Crash:
    """The consumer process dies just before ``before`` on the given delivery.

    Like a real process death it rolls back the open transaction and sends no ack;
    the message comes back only when its lease runs out. ``message_id=None`` means
    any message; ``copy`` names one copy on the queue by its position (None: any).
    """

    before: str
    delivery: int = 1
    message_id: str | None = None
    copy: int | None = None

    def matches(self, step: str, message_id: str, delivery: int, copy: int | None = None) -> bool:
        """Whether this crash strikes ``step`` of this delivery of this message (and copy)."""
        return (self.before == step and self.delivery == delivery and self.message_id in (None, message_id)
                and self.copy in (None, copy))


@dataclass(frozen=True)
class _LostOnTheWay:
    delivery: int = 1
    message_id: str | None = None

    def matches(self, message_id: str, delivery: int) -> bool:
        """Whether this fault strikes this delivery of this message."""
        return self.delivery == delivery and self.message_id in (None, message_id)


@dataclass(frozen=True)
class LostAck(_LostOnTheWay):
    """The ack for the given delivery is sent but never reaches the broker."""


@dataclass(frozen=True)
class LostResponse(_LostOnTheWay):
    """The provider does the work for the given delivery, but its answer never reaches the consumer."""


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one run: named crashes, lost acks and lost responses, plus random ones at given rates."""

    crashes: Sequence[Crash] = ()
    lost_acks: Sequence[LostAck] = ()
    ack_loss_rate: float = 0.0
    crash_rate: float = 0.0
    seed: int = 0
    lost_responses: Sequence[LostResponse] = ()
    response_loss_rate: float = 0.0
    per_copy: bool = False

    def __post_init__(self) -> None:
        for name in ("ack_loss_rate", "crash_rate", "response_loss_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be at least 0 and below 1 (a rate of 1 never lets a message through), got {rate}")

    def crashes_before(self, step: str, message_id: str, delivery: int, copy: int | None = None) -> bool:
        """Whether the consumer dies just before ``step`` of this delivery (``copy``: the broker's position for it)."""
        if any(crash.matches(step, message_id, delivery, copy) for crash in self.crashes):
            return True
        return self._draw("crash", self._whose(message_id, copy), delivery, step) < self.crash_rate

    def loses_ack(self, message_id: str, delivery: int, copy: int | None = None) -> bool:
        """Whether the ack for this delivery is lost on its way to the broker."""
        if any(lost.matches(message_id, delivery) for lost in self.lost_acks):
            return True
        if self.ack_loss_rate == 0.0:
            return False  # no draw needed (a batch of thousands of acks would pay for each)
        return self._draw("ack", self._whose(message_id, copy), delivery) < self.ack_loss_rate

    def loses_response(self, message_id: str, delivery: int, copy: int | None = None) -> bool:
        """Whether the provider's answer to this delivery's call is lost on its way back."""
        if any(lost.matches(message_id, delivery) for lost in self.lost_responses):
            return True
        return self._draw("response", self._whose(message_id, copy), delivery) < self.response_loss_rate

    def _whose(self, message_id: str, copy: int | None) -> str:
        return f"copy {copy}" if self.per_copy and copy is not None else message_id

    def _draw(self, kind: str, whose: str, delivery: int, step: str = "") -> float:
        # A fresh generator per (seed, fault, message or copy, delivery, step): the
        # draw does not depend on how many draws came before it.
        return random.Random(f"{self.seed}|{kind}|{whose}|{delivery}|{step}").random()
