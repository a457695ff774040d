"""What the inbox costs on each engine: per message against the naive consumer, and batched against a raw bulk insert.

1. The inbox against the naive consumer, the same messages on DuckDB, SQLite and
   PostgreSQL in one run, as milliseconds per message and their ratio.
2. The batched inbox (broker, one insert of N IDs, one insert of the new payments,
   one commit, N acks) against the engine's raw bulk insert of the same payment
   rows in batches of the same size, from 1 to 10,000; the goal on DuckDB is a
   batched inbox at 1,000 reaching at least half the raw rate.

Prints the figures; it asserts nothing, since timings belong in benchmarks, not tests.
"""

from __future__ import annotations

import sys

from idemlib import payment_stream
from idemlib.operating.costs import batch_throughput, inbox_against_naive
from idemlib.races import race_engines

PER_MESSAGE = 1000
BATCH_SIZES = (1, 10, 100, 1000, 10000)


def messages_for(batch_size: int) -> int:
    """Enough messages to fill several batches, without running batch 1 on 20,000 round trips."""
    return min(20000, max(1000, 20 * batch_size))


def main() -> None:
    engines, note = race_engines()
    print(note, flush=True)
    table = inbox_against_naive(engines, payment_stream(PER_MESSAGE))
    print(f"\nThe inbox against the naive consumer, {PER_MESSAGE} messages, no faults, best of 3:")
    for engine, row in table.iterrows():
        print(f"  {engine:10}  naive {row['naive (ms per message)']:6.3f} ms   inbox {row['inbox (ms per message)']:6.3f} ms"
              f"   inbox / naive = {row['inbox / naive, lowest']:.2f}", flush=True)
    print("\nThe batched inbox against a raw bulk insert of the same rows (messages per second):")
    for size in BATCH_SIZES:
        count = messages_for(size)
        rows = batch_throughput(engines, payment_stream(count), [size], repeats=3 if size >= 100 else 1)
        for _, row in rows.iterrows():
            print(f"  {row['engine']:10}  batch {size:6d} ({count:6d} messages)"
                  f"  consumer {row['batched inbox consumer (msg/s)']:9.0f}/s"
                  f"  transactions alone {row['inbox transactions alone (msg/s)']:9.0f}/s"
                  f"  raw {row['raw bulk insert (rows/s)']:9.0f}/s"
                  f"  consumer / raw = {row['consumer / raw']:.2f}  transactions / raw = {row['transactions / raw']:.2f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
