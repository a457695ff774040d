"""A claim renewed by heartbeats and fenced by its claim number, raced by real PostgreSQL sessions (lesson 09).

Each claim of a message carries a **claim number**, a fencing token: 1 for the first
claim, one more for every takeover. The worker holding claim *n* renews its deadline
with a heartbeat (``... WHERE claim = n``) while it works, completes with
``... WHERE claim = n``, and passes *n* to the provider, which refuses a call whose
number is lower than one it has already seen for that key. A worker that was taken
over finds out at its next heartbeat, and if it goes on anyway, its call and its
completion are refused. Every deadline is written and compared in the database's
clock (``now()``), so no worker's own clock decides whose claim is over.

:func:`race_on_postgres` plays one story statement by statement on three sessions
of a real server. Where two sessions race, the second's statement runs in a thread
and the story waits until PostgreSQL reports it waiting for the first one's row lock
(``pg_stat_activity``), so the order is the server's, never a guess about timing.
:func:`read_then_set` races the same takeover written as a read, then a plain write
of the key (as a cache-backed library does it), for comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pandas as pd
import psycopg

from idemlib.stores import PostgresPayments
from idemlib.stores.sql import single_value

MESSAGE, KEY = "m-7f3", "m-7f3:charge"
DEADLINE = "30 seconds"
"""How far ahead of the database's ``now()`` a claim or a heartbeat sets the deadline."""

SCHEMA = """
CREATE TABLE claims (
    message_id text PRIMARY KEY,
    status     text NOT NULL,
    claim      integer NOT NULL,
    deadline   timestamptz NOT NULL,
    result     text
);
CREATE TABLE provider_keys (
    key       text PRIMARY KEY,
    claim     integer NOT NULL,
    charge_id text NOT NULL
);"""
"""The consumer's claims, and the provider's memory of each idempotency key with the highest claim number it took."""

CLAIM = f"""INSERT INTO claims VALUES (%s, 'in progress', 1, now() + interval '{DEADLINE}')
ON CONFLICT DO NOTHING RETURNING claim"""
HEARTBEAT = f"""UPDATE claims SET deadline = now() + interval '{DEADLINE}'
WHERE message_id = %s AND status = 'in progress' AND claim = %s RETURNING claim"""
TAKE_OVER = f"""UPDATE claims SET claim = claim + 1, deadline = now() + interval '{DEADLINE}'
WHERE message_id = %s AND status = 'in progress' AND deadline < now() AND claim = %s RETURNING claim"""
COMPLETE = """UPDATE claims SET status = 'completed', result = %s
WHERE message_id = %s AND status = 'in progress' AND claim = %s RETURNING claim"""
PROVIDER_CHARGE = """INSERT INTO provider_keys VALUES (%s, %s, %s)
ON CONFLICT (key) DO UPDATE SET claim = EXCLUDED.claim WHERE provider_keys.claim <= EXCLUDED.claim
RETURNING charge_id"""
"""The provider's side: a new key charges; a repeat with the same or a newer claim number gets the stored charge;
a call with an older claim number than the key has seen is refused (no row)."""
PLAIN_SET = f"""UPDATE claims SET claim = %s, deadline = now() + interval '{DEADLINE}' WHERE message_id = %s
RETURNING claim"""
"""A takeover that trusts what it read: it writes the key whatever the record has become since."""


class _Sessions:
    """Named sessions on one fresh schema, each its own connection with its own transactions."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.database = PostgresPayments()  # a schema of its own, dropped with it
        self.connections = {name: psycopg.connect(self.database.url, options=f"-c search_path={self.database.schema}")
                            for name in names}
        first = self.connections[names[0]]
        first.execute(SCHEMA)
        first.commit()
        self.rows: list[dict[str, Any]] = []

    def run(self, who: str, what: str, sql: str, parameters: tuple[Any, ...] = (), *, commit: bool = True) -> list:
        """Run one statement in ``who``'s session, note what it returned, and commit unless told not to."""
        connection = self.connections[who]
        answer = connection.execute(sql, parameters).fetchall()
        if commit:
            connection.commit()
        self.note(who, what, answer)
        return answer

    def note(self, who: str, what: str, answer: list) -> None:
        self.rows.append({"session": who, "statement": what,
                          "rows": len(answer), "returned": answer[0][0] if answer else "nothing"})

    def pid(self, who: str) -> int:
        return self.connections[who].info.backend_pid

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()


def _when_waiting(sessions: _Sessions, who: str, statement: Callable[[], list]) -> Future:
    """Start ``statement`` in a thread and return once PostgreSQL says ``who``'s session waits for a lock."""
    pool = ThreadPoolExecutor(max_workers=1)
    started = pool.submit(statement)
    pool.shutdown(wait=False)
    watcher = psycopg.connect(sessions.database.url, autocommit=True)
    try:
        while not started.done():
            waiting = watcher.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                                      (sessions.pid(who),)).fetchone()
            if waiting and waiting[0]:
                return started
            time.sleep(0.005)  # polling the server's own report of the wait, not a guess at how long it takes
    finally:
        watcher.close()
    return started  # it finished without waiting: the table will show that


def race_on_postgres() -> pd.DataFrame:
    """Claim, heartbeat, a refused takeover, a stalled worker, two racing takeovers, a fenced late finish.

    One row per statement, in the order the server ran them: the session, what it did,
    how many rows it changed and what it returned (the claim number, or the provider's charge).
    """
    s = _Sessions(("A", "B", "C"))
    try:
        s.run("A", "A claims m-7f3", CLAIM, (MESSAGE,))
        s.run("A", "A's heartbeat renews claim 1", HEARTBEAT, (MESSAGE, 1))
        s.run("B", "B (a second copy) tries to take over claim 1", TAKE_OVER, (MESSAGE, 1))
        # A stalls (a long pause, its heartbeats stopped): its deadline passes. Moved back instead of waited for.
        s.run("A", "(A stalls: its deadline is moved 31 s back, as if 31 s passed without a heartbeat)",
              "UPDATE claims SET deadline = deadline - interval '31 seconds' WHERE message_id = %s RETURNING claim",
              (MESSAGE,))
        s.run("B", "B takes over claim 1 (not committed yet)", TAKE_OVER, (MESSAGE, 1), commit=False)
        c = _when_waiting(s, "C", lambda: s.connections["C"].execute(TAKE_OVER, (MESSAGE, 1)).fetchall())
        s.note("C", "C tries to take over claim 1 too, and waits for B's row lock", [])
        s.rows[-1]["rows"], s.rows[-1]["returned"] = "waiting", "waiting"
        s.connections["B"].commit()
        s.note("B", "B commits its takeover", [(2,)])
        s.rows[-1]["rows"] = 1
        answer = c.result(timeout=30)
        s.connections["C"].commit()
        s.note("C", "C's takeover, after B's commit, finds claim 2", answer)
        s.run("B", "B calls the provider with claim 2", PROVIDER_CHARGE, (KEY, 2, "ch_B"))
        s.run("A", "A wakes; its heartbeat for claim 1", HEARTBEAT, (MESSAGE, 1))
        s.run("A", "A calls the provider anyway, with claim 1", PROVIDER_CHARGE, (KEY, 1, "ch_A"))
        s.run("A", "A marks claim 1 completed", COMPLETE, ("ch_A", MESSAGE, 1))
        s.run("B", "B marks claim 2 completed", COMPLETE, ("ch_B", MESSAGE, 2))
        final = s.connections["A"].execute("SELECT status, claim, result FROM claims").fetchone()
        charges = single_value(s.connections["A"].execute("SELECT count(*) FROM provider_keys"))
        s.connections["A"].commit()
        table = pd.DataFrame(s.rows).rename_axis("step")
        table.index += 1
        table.attrs["final"] = {"record": final, "charges at the provider": charges}
        return table
    finally:
        s.close()


def read_then_set() -> pd.DataFrame:
    """Two takeovers of one stalled claim, each a read followed by a plain write of the key: both succeed.

    The write does not check that the record is still the one read, as a takeover that
    reads a snapshot and then sets the key does; the compare-and-set of :func:`race_on_postgres`
    lets only one of the two through.
    """
    s = _Sessions(("A", "B", "C"))
    try:
        s.run("A", "A claims m-7f3", CLAIM, (MESSAGE,))
        s.run("A", "(A stalls: its deadline is moved 31 s back)",
              "UPDATE claims SET deadline = deadline - interval '31 seconds' WHERE message_id = %s RETURNING claim",
              (MESSAGE,))
        read = "SELECT claim FROM claims WHERE message_id = %s AND status = 'in progress' AND deadline < now()"
        seen_b = s.run("B", "B reads: an orphan, claim 1", read, (MESSAGE,))[0][0]
        seen_c = s.run("C", "C reads: an orphan, claim 1", read, (MESSAGE,))[0][0]
        s.run("B", "B writes its claim over it", PLAIN_SET, (seen_b + 1, MESSAGE))
        s.run("C", "C writes its claim over it", PLAIN_SET, (seen_c + 1, MESSAGE))
        table = pd.DataFrame(s.rows).rename_axis("step")
        table.index += 1
        return table
    finally:
        s.close()

