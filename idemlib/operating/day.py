"""A day in production: messages arriving around the clock, competing consumers, and what goes wrong at noon.

:func:`~idemlib.sim.simulate` publishes its whole stream at time zero and gives
every step a fixed duration, which suits a lesson about one message. Watching a
consumer in operation needs two more things: messages that arrive over the day,
and a handler whose speed changes while it runs. This module gives the
simulator's engine both (arrivals, and step durations as a function of time), so every
delivery, lease expiry, skip and ack is recorded as in any other run.

Two things can go wrong from a given moment:

- the handler becomes **slow**: one step (by default ``begin``, as when the
  connection pool is exhausted and each delivery waits for a connection) takes
  longer than the lease, so the broker hands the message to a second consumer
  while the first one is still working on it;
- a **lost-ack storm**: for a while, a share of acks never reaches the broker (a
  network fault between consumers and broker), so messages come back after their
  lease although they were handled in good time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from idemlib.faults import FaultPlan, LostAck
from idemlib.handlers import Handler, InboxHandler
from idemlib.messages import Message
from idemlib.sim import DEFAULT_STEP_SECONDS, Engine, RunResult
from idemlib.stores import PaymentsDatabase
from idemlib.stores.keyvalue import KeyValuePayments

DAY_SECONDS = 24 * 3600
NOON = 12 * 3600


def clock_time(seconds: float) -> str:
    """A moment of the day as a wall clock shows it: 45000 seconds after midnight is ``12:30``."""
    return f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}"


@dataclass(frozen=True)
class Day:
    """How a simulated day goes. Times are seconds since midnight.

    ``messages`` payments arrive at random moments through the day (the same moments on every run).
    From ``slow_from`` on, ``slow_step`` takes ``slow_seconds`` instead of one
    second. From ``storm_from`` to ``storm_until``, each first ack is lost with
    probability ``storm_ack_loss``. ``ack_loss`` is the background rate of lost
    acks all day, so even a good day has a few duplicates.
    """

    messages: int = 1440
    consumers: int = 2
    lease_seconds: float = 30.0
    ack_loss: float = 0.002
    slow_from: float | None = None
    slow_step: str = "begin"
    slow_seconds: float = 40.0
    storm_from: float | None = None
    storm_until: float | None = None
    storm_ack_loss: float = 0.3
    seed: int = 11
    per_copy: bool = False
    """Draw the background lost acks per copy on the queue rather than per message ID (see :class:`FaultPlan`)."""

    def __post_init__(self) -> None:
        if self.messages < 1 or self.consumers < 1:
            raise ValueError("a day needs at least one message and one consumer")
        if (self.storm_from is None) != (self.storm_until is None):
            raise ValueError("give both storm_from and storm_until, or neither")

    def arrivals(self) -> list[tuple[float, Message]]:
        """When each payment message is published: (seconds since midnight, message), in time order."""
        rng = random.Random(self.seed)
        times = sorted(rng.uniform(0, DAY_SECONDS) for _ in range(self.messages))
        return [(moment, Message.charge(f"d-{n:05d}", order_id=50000 + n, amount=5 * rng.randint(1, 20)))
                for n, moment in enumerate(times, start=1)]

    def faults(self, arrivals: list[tuple[float, Message]]) -> FaultPlan:
        """The day's lost acks: the storm's, named message by message, plus the background rate for all."""
        storm = []
        if self.storm_from is not None and self.storm_until is not None:
            rng = random.Random(f"{self.seed}|storm")
            storm = [LostAck(message_id=message.label) for moment, message in arrivals
                     if self.storm_from <= moment < self.storm_until and rng.random() < self.storm_ack_loss]
        return FaultPlan(lost_acks=storm, ack_loss_rate=self.ack_loss, seed=self.seed, per_copy=self.per_copy)

    def step_seconds(self, step: str, now: float) -> float:
        """How long ``step`` takes when it starts at ``now``."""
        if step == self.slow_step and self.slow_from is not None and now >= self.slow_from:
            return self.slow_seconds
        return DEFAULT_STEP_SECONDS


def run_day(day: Day, handler: Handler | None = None, database: PaymentsDatabase | None = None) -> RunResult:
    """Run ``day`` with ``day.consumers`` copies of ``handler`` (the inbox by default) and return the run.

    The database defaults to the in-process key-value model, whose transactions
    settle duplicates and races as DuckDB's do (the tests compare the two traces) at
    a fraction of the cost, so a whole day of messages runs in about a second.

    The run is the simulator's engine: the consumer due soonest moves next, and a
    message is published when the clock reaches its arrival time. An idle consumer
    sleeps until the next arrival, the next lease expiry or a rival's next move.
    """
    handler = handler or InboxHandler()
    database = database or KeyValuePayments()
    arrivals = day.arrivals()
    engine = Engine(handler, database.session, faults=day.faults(arrivals), step_seconds=day.step_seconds,
                    visibility_timeout=day.lease_seconds, max_deliveries=10)
    engine.add_consumers(day.consumers)
    engine.arrive(arrivals)
    engine.run()
    return engine.result([message for _, message in arrivals], database.payments())
