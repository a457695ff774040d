"""Lesson 11's engine-cost cell, now in idemlib.operating.engine_costs: settings read from the engines, and the
per-engine sentence saying when a ratio did not hold or a commit outgrew a whole message."""

from __future__ import annotations

import pandas as pd

from idemlib.operating.engine_costs import cost_lines, engine_settings
from idemlib.stores import DuckDBPayments, SQLitePayments


def test_the_settings_line_reads_sqlites_synchronous_from_the_file_the_measurement_uses():
    line, = engine_settings({"DuckDB": DuckDBPayments, "SQLite": SQLitePayments})
    assert "a file in WAL mode, synchronous = " in line and "SQLite's documented default is" in line


def test_a_ratio_that_scattered_and_a_commit_longer_than_a_message_are_said_so():
    costs = pd.DataFrame({"inbox / naive, lowest": [1.1, 2.0], "inbox / naive, highest": [1.2, 3.0],
                          "within ±20 %": [True, False], "naive (ms per message)": [2.0, 1.0],
                          "one insert and its commit (ms)": [1.0, 1.5]}, index=["SQLite", "PostgreSQL"])
    steady, scattered = cost_lines(costs)
    assert steady == ("SQLite: the inbox cost 1.10 to 1.20 times the naive consumer per message in this cell's three "
                      "rounds; a commit alone took 50% of a naive message's time")
    assert ": not stable within ±20 %" in scattered and "the machine's load, not the commit" in scattered
