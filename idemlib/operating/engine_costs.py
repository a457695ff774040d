"""Lesson 11's per-message cost of the inbox on each engine, with the settings that decide it, read from the engines.

What a commit costs depends on how durable the engine makes it (SQLite's ``synchronous``,
PostgreSQL's ``synchronous_commit`` and ``fsync``), so the settings are printed beside the
measurements, read from the databases the measurement ran on, never typed by hand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import duckdb
import pandas as pd

from idemlib.facts import fact
from idemlib.messages import Message
from idemlib.operating.costs import commit_latency, inbox_against_naive
from idemlib.stores import SqlPayments

_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
_POSTGRES_SETTINGS = ("server_version", "transaction_isolation", "synchronous_commit", "fsync")


def engine_settings(engines: dict[str, Callable[[], SqlPayments]]) -> list[str]:
    """One line per engine: its version and the durability settings a commit's cost depends on."""
    sqlite_file = engines["SQLite"]()  # kept while its connection reads: the file goes with the object
    setting = sqlite_file.connect().execute("PRAGMA synchronous").fetchall()[0][0]
    lines = [f"DuckDB {duckdb.__version__}, in memory; SQLite {sqlite3.sqlite_version}, a file in WAL mode, "
             f"synchronous = {setting} ({_SYNCHRONOUS[setting]}; SQLite's documented default is "
             f"{fact('sqlite_synchronous_default')}, in WAL mode too unless a build overrides it)"]
    if "PostgreSQL" in engines:
        database = engines["PostgreSQL"]()
        server = database.connect()
        lines.append("PostgreSQL " + ", ".join(f"{name} = {server.execute(f'SHOW {name}').fetchone()[0]}"
                                               for name in _POSTGRES_SETTINGS))
    return lines


def inbox_costs(engines: dict[str, Callable[[], SqlPayments]], messages: list[Message], *,
                rounds: int = 3) -> pd.DataFrame:
    """:func:`inbox_against_naive` over ``rounds`` rounds, with one insert and its commit timed beside it."""
    costs = inbox_against_naive(engines, messages, repeats=1, rounds=rounds)
    costs["one insert and its commit (ms)"] = commit_latency(engines)
    return costs


def cost_lines(costs: pd.DataFrame) -> list[str]:
    """What :func:`inbox_costs` says per engine, in words: the ratio's range, whether it held, the commit's share."""
    lines = []
    for engine, row in costs.iterrows():
        commit, naive = row["one insert and its commit (ms)"], row["naive (ms per message)"]
        lines.append(f"{engine}: the inbox cost {row['inbox / naive, lowest']:.2f} to "
                     f"{row['inbox / naive, highest']:.2f} times the naive consumer per message in this cell's three "
                     "rounds" + ("" if row["within ±20 %"] else ": not stable within ±20 %")
                     + f"; a commit alone took {commit / naive:.0%} of a naive message's time"
                     + (" (more than a whole message: measured at another moment, so this is the machine's load, "
                        "not the commit)" if commit > naive else ""))
    return lines
