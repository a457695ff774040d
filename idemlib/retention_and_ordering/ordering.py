"""Ordering is a separate problem: old messages arriving after newer ones, and writes that are safe to repeat.

An inbox catches a *duplicate* of an old message, but it does not put messages in
order. A write that is naturally idempotent (``SET status = 'PAID'``) can run twice,
yet run late it overwrites newer state with older. A version (or sequence) number
on the row, and an update conditional on it, applies a message only if it is newer
than what the row has seen. This module runs each kind of writer on real DuckDB
against every order in which a small set of messages (with duplicates) can arrive.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import pandas as pd

from idemlib.stores.sql import Cursor, inbox_table, single_value


@dataclass(frozen=True)
class StatusChange:
    """A message that sets an order's status; ``version`` is its place in the order's history (1, 2, 3...)."""

    message_id: str
    order_id: int
    status: str
    version: int

    @property
    def parameters(self) -> dict[str, object]:
        return {"message_id": self.message_id, "order_id": self.order_id, "status": self.status,
                "version": self.version}


PAID = StatusChange("m-7f3", 1042, "PAID", 1)
SHIPPED = StatusChange("m-8a1", 1042, "SHIPPED", 2)
REFUNDED = StatusChange("m-9c4", 1042, "REFUNDED", 3)
HISTORY = (PAID, SHIPPED, REFUNDED)
"""Order 1042's history, in the order it happened."""

OTHER_HISTORY = (StatusChange("m-4b2", 2077, "PAID", 1), StatusChange("m-5d6", 2077, "SHIPPED", 2))
"""Order 2077's history: paid, then shipped. Its newest state is not a refund, and its row sits next to 1042's."""

ORDER_IDS = (1042, 2077)


@dataclass(frozen=True)
class Writer:
    """How a consumer applies a status change: one SQL statement, optionally behind an inbox of IDs.

    The statement uses DuckDB's named parameters ``$order_id``, ``$status``,
    ``$version`` and ``$message_id``; the row starts as status ``NEW``, version 0.
    """

    name: str
    statement: str
    inbox: bool = False


SET_STATUS = "UPDATE orders SET status = $status WHERE order_id = $order_id"
VERSION_GUARD = ("UPDATE orders SET status = $status, version = $version "
                 "WHERE order_id = $order_id AND version < $version")

WRITERS = (
    Writer("SET status (naturally idempotent)", SET_STATUS),
    Writer("inbox + SET status", SET_STATUS, inbox=True),
    Writer("version guard", VERSION_GUARD),
)


class OrderTable:
    """Order rows and an inbox of IDs on an in-memory DuckDB; :meth:`reset` starts the orders of ``existing``
    (1042 and 2077 by default) over as NEW, version 0, and no other order has a row: a read model built from the
    messages themselves starts with none."""

    def __init__(self, existing: tuple[int, ...] = ORDER_IDS) -> None:
        self.existing = existing
        self.db = duckdb.connect(":memory:", config={"threads": 1})
        self.db.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, status VARCHAR, version INTEGER)")
        self.db.execute(inbox_table())

    def reset(self) -> None:
        self.db.execute("DELETE FROM orders")
        self.db.execute("DELETE FROM processed_messages")
        if self.existing:
            self.db.execute("INSERT INTO orders SELECT unnest(?), 'NEW', 0", [list(self.existing)])

    def apply(self, writer: Writer, change: StatusChange) -> None:
        """Apply one delivery of ``change`` in one transaction: the inbox insert (if any) and the writer's statement."""
        used = {name: value for name, value in change.parameters.items() if f"${name}" in writer.statement}
        if not writer.inbox:
            self.db.execute(writer.statement, used)  # one statement: atomic on its own
            return
        self.db.execute("BEGIN")
        try:
            new = self.db.execute("INSERT INTO processed_messages VALUES ($message_id) ON CONFLICT DO NOTHING "
                                  "RETURNING 1", {"message_id": change.message_id}).fetchall()
            if not new:
                self.db.execute("COMMIT")
                return
            self.db.execute(writer.statement, used)
        except duckdb.Error:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def state(self, order_id: int = 1042) -> tuple[str, int]:
        row = self.db.execute("SELECT status, version FROM orders WHERE order_id = ?", [order_id]).fetchone()
        return (row[0], row[1]) if row else ("(no row)", -1)


def arrival_orders(history: Iterable[StatusChange] = HISTORY, duplicated: Iterable[StatusChange] = (PAID, SHIPPED)
                   ) -> list[tuple[StatusChange, ...]]:
    """Every distinct order in which the ``history`` and one extra copy of each ``duplicated`` message can arrive."""
    deliveries = (*history, *duplicated)
    return sorted(set(itertools.permutations(deliveries)), key=lambda order: [m.version for m in order])


def interleaved_orders(first: list[tuple[StatusChange, ...]], second: list[tuple[StatusChange, ...]],
                       per_order: int = 2, seed: int = 10) -> list[tuple[StatusChange, ...]]:
    """Arrival orders carrying two orders' messages in one run: each of ``first`` merged with ``per_order`` of
    ``second`` at seeded random places, plus the first of each entirely before and entirely after the other."""
    rng = random.Random(seed)
    merged = [first[0] + second[0], second[0] + first[0]]
    for mine in first:
        for _ in range(per_order):
            theirs = rng.choice(second)
            slots = set(rng.sample(range(len(mine) + len(theirs)), len(theirs)))
            mine_left, theirs_left = iter(mine), iter(theirs)
            merged.append(tuple(next(theirs_left) if i in slots else next(mine_left)
                                for i in range(len(mine) + len(theirs))))
    return merged


def label(order: tuple[StatusChange, ...]) -> str:
    """An arrival order written with each message's status, e.g. ``PAID → REFUNDED → PAID`` (with the order's
    number before each status when the run carries several orders)."""
    several = len({change.order_id for change in order}) > 1
    return " → ".join(f"{change.order_id} {change.status}" if several else change.status for change in order)


def explore_orderings(writers: Iterable[Writer] = WRITERS, orders: list[tuple[StatusChange, ...]] | None = None,
                      existing: tuple[int, ...] = ORDER_IDS) -> pd.DataFrame:
    """Run every arrival order through every writer; one row per (writer, arrival order) with the final state.

    An arrival order may carry one order's messages or several orders' interleaved. The
    right final state is, for each order with messages, its newest message's status, and
    for every other order its row as it was (``NEW``, version 0, for the orders of
    ``existing``; no row for the others): a statement that forgets its ``WHERE order_id``
    changes them. ``order`` names the first order that
    ended wrong (else the newest message's order), with its final status and version.
    """
    orders = arrival_orders() if orders is None else orders
    table = OrderTable(existing)
    rows = []
    for writer in writers:
        for order in orders:
            table.reset()
            for change in order:
                table.apply(writer, change)
            newest: dict[int, StatusChange] = {}
            for change in order:
                if change.order_id not in newest or change.version > newest[change.order_id].version:
                    newest[change.order_id] = change
            others = all(table.state(other) == (("NEW", 0) if other in existing else ("(no row)", -1))
                         for other in {*ORDER_IDS, *existing} - newest.keys())
            wrong = [order_id for order_id, change in newest.items() if table.state(order_id)[0] != change.status]
            judged = wrong[0] if wrong else max(order, key=lambda change: change.version).order_id
            status, version = table.state(judged)
            rows.append((writer.name, judged, len(newest), label(order), status, version, others,
                         not wrong and others))
    return pd.DataFrame(rows, columns=["writer", "order", "orders in the run", "arrival order", "final status",
                                       "final version", "other order untouched", "right"])


def ordering_counts(explored: pd.DataFrame) -> pd.DataFrame:
    """Per writer: how many arrival orders ended in the right state and how many in a wrong one."""
    counts = explored.groupby("writer", sort=False)["right"].agg(right="sum", total="count")
    counts["wrong"] = counts["total"] - counts["right"]
    return counts[["right", "wrong", "total"]].astype(int)


# --- Naturally idempotent operations: which statements can run twice, and which survive overtaking.

OPERATIONS = {
    "SET balance = 960": ("UPDATE accounts SET balance = 960 WHERE id = 1042", False),
    "SET balance = balance - 40": ("UPDATE accounts SET balance = balance - 40 WHERE id = 1042", False),
    "upsert that sets (ON CONFLICT DO UPDATE SET paid = excluded.paid)": (
        "INSERT INTO order_totals VALUES (1042, 40) ON CONFLICT (order_id) DO UPDATE SET paid = excluded.paid", True),
    "upsert that adds (DO UPDATE SET paid = order_totals.paid + excluded.paid)": (
        ("INSERT INTO order_totals VALUES (1042, 40) ON CONFLICT (order_id) "
         "DO UPDATE SET paid = order_totals.paid + excluded.paid"), True),
}


def _fresh_tables(cursor: Cursor) -> None:
    """The account at \\$1,000 and no order totals, the tables made where they are missing."""
    run = cursor.execute
    run("CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    run("CREATE TABLE IF NOT EXISTS order_totals (order_id INTEGER PRIMARY KEY, paid INTEGER)")
    run("DELETE FROM accounts")
    run("DELETE FROM order_totals")
    run("INSERT INTO accounts VALUES (1042, 1000)")


def run_repeatedly(cursor: Cursor, statement: str, times: int, *, totals: bool) -> int:
    """Set the account to \\$1,000 (or empty the order totals), run ``statement`` ``times`` times, and read the result.

    ``cursor`` is a DuckDB connection or a psycopg connection on a scratch schema.
    """
    run = cursor.execute
    _fresh_tables(cursor)
    for _ in range(times):
        run(statement)
    read = "SELECT paid FROM order_totals" if totals else "SELECT balance FROM accounts"
    return int(single_value(run(read)))


def run_twice_table(cursors: dict[str, Cursor]) -> pd.DataFrame:
    """For each operation and engine: the value after running it once and after running it twice."""
    rows = []
    for name, (statement, totals) in OPERATIONS.items():
        row: dict[str, object] = {"operation": name}
        for engine, cursor in cursors.items():
            once = run_repeatedly(cursor, statement, 1, totals=totals)
            twice = run_repeatedly(cursor, statement, 2, totals=totals)
            row[f"{engine}: once"], row[f"{engine}: twice"] = once, twice
        row["safe to run twice"] = all(row[f"{e}: once"] == row[f"{e}: twice"] for e in cursors)
        rows.append(row)
    return pd.DataFrame(rows).set_index("operation")


UPSERT_ONLY_A_CHANGE = ("INSERT INTO order_totals VALUES (1042, {paid}) ON CONFLICT (order_id) "
                        "DO UPDATE SET paid = excluded.paid WHERE order_totals.paid <> excluded.paid RETURNING paid")
"""An upsert whose ``DO UPDATE`` has a ``WHERE`` of its own: it reads the stored row (by the table's name) and the
proposed one (``excluded``), and leaves the stored row as it is where the condition is false."""


def upsert_where_table(cursors: dict[str, Cursor], paid: Iterable[int] = (40, 40, 55)) -> pd.DataFrame:
    """:data:`UPSERT_ONLY_A_CHANGE` run once per amount of ``paid``, in turn, on empty order totals: for each run and
    engine, the rows the statement returned (none where its ``WHERE`` left the row alone) and the total after it."""
    rows: dict[str, dict[str, object]] = {}
    for engine, cursor in cursors.items():
        _fresh_tables(cursor)
        for turn, amount in enumerate(paid, start=1):
            returned = cursor.execute(UPSERT_ONLY_A_CHANGE.format(paid=int(amount))).fetchall()
            total = single_value(cursor.execute("SELECT paid FROM order_totals"))
            row = rows.setdefault(f"{turn}. paid = {amount}", {})
            row[f"{engine}: rows returned"], row[f"{engine}: paid after"] = len(returned), int(total)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("upsert run")
