"""Where the time goes: the simulator against DuckDB, and real consumers on each engine.

1. The simulator's overhead per delivery should stay under a fifth of the time
   DuckDB spends on that delivery, so a run is bound by the real engine.
2. Four consumer threads on 2,667 messages (2,000 payments, a third of them twice):
   throughput and conflicts per engine, and how long PostgreSQL makes a rival wait.

Prints the figures; it asserts nothing, since timings belong in benchmarks, not tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from idemlib import DuckDBPayments, FaultPlan, InboxHandler, payment_stream, simulate
from idemlib.races import race, race_engines, stress, with_duplicates
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

    engines, note = race_engines()
    print(f"\nReal consumers, 4 threads, 2,667 messages (2,000 payments, a third twice). {note}")
    load = with_duplicates(payment_stream(2000))
    for name, make in engines.items():
        result = stress(make(), load, consumers=4)
        waited = race(make(), hold_seconds=0.3)
        print(f"  {name:10}  {result.published / result.seconds:7.0f} messages/s   {result.conflicts:4d} conflicts   "
              f"charged {'exactly right' if result.total_charged == result.expected_total else 'WRONG'}   "
              f"rival waits {waited.b_wait_seconds:.2f} s at {waited.b_waited_at!r} while the first holds 0.30 s")


if __name__ == "__main__":
    main()
