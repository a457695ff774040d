"""Where the time of a simulated run goes: the database's own work versus the simulator around it.

The goal (issue 2): the simulator's overhead per delivery stays under a fifth of
the time DuckDB spends on that delivery, so a run is bound by the real engine.
Prints the figures; it asserts nothing, since timings belong in benchmarks, not tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from idemlib import DuckDBPayments, FaultPlan, InboxHandler, payment_stream, simulate
from idemlib.stores import PaymentsSession

MESSAGES = 1000
REPEATS = 3


class TimedSession:
    """Forwards every call to a real session and adds its duration to a shared counter."""

    def __init__(self, session: PaymentsSession, spent: list[float]) -> None:
        self._session = session
        self._spent = spent

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._session, name)
        if not callable(target):
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self._spent[0] += time.perf_counter() - started

        return timed


class TimedDuckDB(DuckDBPayments):
    def __init__(self) -> None:
        super().__init__()
        self.spent = [0.0]

    def session(self) -> Any:
        return TimedSession(super().session(), self.spent)


def measure(run: Callable[[TimedDuckDB], Any]) -> tuple[float, float, int]:
    database = TimedDuckDB()
    started = time.perf_counter()
    result = run(database)
    total = time.perf_counter() - started
    return total, database.spent[0], len(result.events("delivered"))


def main() -> None:
    plan = FaultPlan(ack_loss_rate=0.2, crash_rate=0.05, seed=1)
    stream = payment_stream(MESSAGES)
    best = min(
        (measure(lambda db: simulate(InboxHandler(), stream, faults=plan, database=db, max_deliveries=20))
         for _ in range(REPEATS)),
        key=lambda figures: figures[0],
    )
    total, in_database, deliveries = best
    overhead = total - in_database
    print(f"{MESSAGES} messages, {deliveries} deliveries, inbox consumer, 20% acks lost, 5% crash rate per step")
    print(f"  whole run:            {total:.3f} s")
    print(f"  inside DuckDB:        {in_database:.3f} s ({in_database / deliveries * 1e6:.0f} µs per delivery)")
    print(f"  simulator around it:  {overhead:.3f} s ({overhead / deliveries * 1e6:.0f} µs per delivery)")
    print(f"  overhead / database:  {overhead / in_database:.1%} (goal: under 20%)")


if __name__ == "__main__":
    main()
