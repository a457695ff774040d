"""How long the test suite takes, and where its time goes: ``make test``'s own command, timed from outside.

Runs pytest as ``make test`` does (``TEST_WORKERS`` workers, ``--dist loadgroup``) on the
given tests (all of them by default) and prints the wall time, the CPU time of pytest and
everything it started and waited for (workers, kernels, sandboxes, servers' clients), the
machine's load before and after (on a shared machine the wall time depends on it, the CPU
time much less), the files that took longest (their tests' setup, call and teardown added
up) and the slowest tests. It asserts nothing: timings belong in benchmarks, not tests.

    .venv/bin/python benchmarks/bench_tests.py [PYTEST_ARGS ...]      (or: make bench-tests)
"""

from __future__ import annotations

import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

WORKERS = os.environ.get("TEST_WORKERS", "4")
SHOWN = 25


def per_test(report: Path) -> dict[str, float]:
    """Each test's seconds (setup, call and teardown) from pytest's JUnit XML report."""
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        seconds[name] = seconds.get(name, 0.0) + float(case.get("time") or 0)
    return seconds


def main(arguments: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as folder:
        report = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-n", WORKERS, "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={report}", "-o", "junit_duration_report=total", *arguments]
        load_before, started = os.getloadavg(), time.perf_counter()
        status = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
        wall, used = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()
        seconds = per_test(report) if report.exists() else {}
    by_file: dict[str, float] = defaultdict(float)
    for name, spent in seconds.items():
        by_file[name.split("::")[0]] += spent
    print(f"{os.cpu_count()} cores, {WORKERS} workers; load {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"(1-minute average)")
    print(f"pytest {shlex.join(arguments) or '(every test)'}: exit status {status}, {len(seconds)} tests")
    print(f"wall {wall:.0f} s; CPU {used.ru_utime + used.ru_stime:.0f} s (user {used.ru_utime:.0f} s, "
          f"system {used.ru_stime:.0f} s); the tests' own seconds add up to {sum(seconds.values()):.0f} s")
    print(f"\nfiles by their tests' seconds (of {len(by_file)}):")
    for name, spent in sorted(by_file.items(), key=lambda item: -item[1])[:SHOWN]:
        print(f"{spent:8.1f} s  {name}")
    print(f"\nslowest {SHOWN} tests:")
    for name, spent in sorted(seconds.items(), key=lambda item: -item[1])[:SHOWN]:
        print(f"{spent:8.1f} s  {name}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
