"""How long each lesson takes to run top to bottom on a fresh kernel, as Restart & Run All does.

The course's budget is 20 s a lesson on 2 cores. Each lesson is executed ``REPEATS``
times; the table gives the fastest and slowest wall time, and the machine's load before
and after (on a shared machine the time depends on it). It asserts nothing: timings
belong in benchmarks, not tests.

    .venv/bin/python benchmarks/bench_lessons.py [REPEATS] [LESSON_PREFIX ...]
"""

from __future__ import annotations

import os
import sys
import time

from idemlib.course.lessons import lesson_paths
from idemlib.course.publish import execute

BUDGET_SECONDS = 20.0


def main(repeats: int, prefixes: list[str]) -> None:
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f} before")
    print(f"{'lesson':42} {'fastest':>8} {'slowest':>8}  within {BUDGET_SECONDS:.0f} s")
    for path in lesson_paths():
        if prefixes and not path.stem.startswith(tuple(prefixes)):
            continue
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            execute(path)
            seconds.append(time.perf_counter() - started)
        print(f"{path.stem:42} {min(seconds):7.1f}s {max(seconds):7.1f}s  {'yes' if max(seconds) < BUDGET_SECONDS else 'NO'}")
    print(f"load {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2, sys.argv[2:])
