"""The idempotency-key store: one record per client and key, *in progress* or *completed*.

A request claims its key before it works. The claim writes the record in progress,
numbered and with a deadline, and commits at once, so that a concurrent duplicate
finds it and is refused instead of running too. The work's effect and the answer
then commit together in one transaction, and only if the claim is still this
request's: a request that dies before that commit leaves no effect behind, and one
that commits leaves the answer beside its effect.

What a later request does with the record it finds (:func:`decide`):

- none, or one older than the retention period: the key is new (expiry);
- another payload under the key: **mismatch**, even while the first request is
  still at work (the draft's 409 is for a key *and* fingerprint already seen);
- in progress, deadline not reached: **busy**, the first request is still at work;
- in progress, deadline passed: **takeover**, the claimant died or hangs; its work
  never committed, so the takeover runs it exactly once;
- completed: **replay** the stored answer, or, where failures are not replayed
  (Stripe's v2 rules), **rerun** a stored failure after claiming the key again.

Every change of state is a conditional write inside a transaction; when two
requests write the same record at once, the engine refuses one of them (a write
conflict) and that one reads the record again and decides again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from idemlib.stores.sql import Cursor, SqlPayments, WriteConflict

KEYS_SCHEMA = """CREATE TABLE IF NOT EXISTS idempotency_keys (
    client_id   VARCHAR NOT NULL,
    key         VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    created_at  DOUBLE  NOT NULL,
    claim       INTEGER NOT NULL,  -- which claim of the key holds it: 1, then 2 after a takeover or a rerun
    deadline    DOUBLE,            -- while in progress: when another request may take the key over
    status      INTEGER,           -- NULL while in progress
    body        VARCHAR,
    PRIMARY KEY (client_id, key)
)"""
# A handful of quick rereads settle a write conflict: the winner commits within
# milliseconds, after which the loser sees its record.
CONFLICT_ATTEMPTS = 6

Decision = Literal["new", "busy", "takeover", "rerun", "replay", "mismatch"]
RUNS: frozenset[Decision] = frozenset({"new", "takeover", "rerun"})
T = TypeVar("T")


@dataclass(frozen=True)
class KeyRecord:
    """What the server remembers about one client's key."""

    client: str
    key: str
    fingerprint: str
    created_at: float
    claim: int
    deadline: float | None = None
    status: int | None = None
    body: dict[str, Any] | None = None

    @property
    def in_progress(self) -> bool:
        """Claimed by a request that has not stored its answer (yet)."""
        return self.status is None


def decide(found: KeyRecord | None, fingerprint: str, now: float, *, retention_seconds: float,
           replays_errors: bool) -> Decision:
    """What a request with ``fingerprint`` does at ``now`` with the record ``found`` under its key."""
    if found is None or now >= found.created_at + retention_seconds:
        return "new"
    if found.fingerprint != fingerprint:  # the draft's 422, whether the first request is done or still at work
        return "mismatch"
    if found.in_progress and found.deadline is not None and now < found.deadline:
        return "busy"
    if found.in_progress:
        return "takeover"
    if found.status is not None and found.status >= 500 and not replays_errors:
        return "rerun"
    return "replay"


def retry_conflicts(database: SqlPayments, work: Callable[[Cursor], T]) -> T:
    """Run ``work`` in a transaction of its own, again after a write conflict; the last conflict is raised.

    Only for work that is safe to repeat: a conflict means nothing of it was committed.
    """
    for attempt in range(CONFLICT_ATTEMPTS):
        cursor = database.connect()
        try:
            cursor.execute("BEGIN")
            result = work(cursor)
            cursor.execute("COMMIT")
            return result
        except (WriteConflict, *database.conflict_errors):  # type: ignore[misc]  # mypy reads no starred except
            if attempt == CONFLICT_ATTEMPTS - 1:
                raise
            time.sleep(0.002 * 2**attempt)
        finally:
            _close(cursor)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _close(cursor: Cursor) -> None:
    """Close ``cursor``, rolling back what a failure left open."""
    # A conflict leaves DuckDB's transaction aborted, a commit leaves none; a ROLLBACK settles both.
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # noqa: BLE001 - no transaction left to roll back
        pass
    cursor.close()


class KeyStore:
    """The records of the idempotency keys, in the same database as the effect they protect.

    ``in_progress_seconds`` is how long a claim holds the key before another request
    may take it over: longer than the work ever takes, or a slow first request and
    its takeover both run.
    """

    def __init__(self, database: SqlPayments, *, retention_seconds: float, replays_errors: bool,
                 in_progress_seconds: float) -> None:
        self.database = database
        self.retention_seconds, self.replays_errors = retention_seconds, replays_errors
        self.in_progress_seconds = in_progress_seconds
        database.connect().execute(KEYS_SCHEMA)

    def claim(self, client: str, key: str, fingerprint: str, now: float) -> tuple[Decision, KeyRecord | None]:
        """Decide what this request does with its key, and if it runs, commit its claim first.

        Returns the decision and the record: the new claim when the request is to
        run, the record found otherwise. A claim still contested after several
        rereads counts as busy.
        """
        def attempt(cursor: Cursor) -> tuple[Decision, KeyRecord | None]:
            found = self._read(cursor, client, key)
            decision = decide(found, fingerprint, now, retention_seconds=self.retention_seconds,
                              replays_errors=self.replays_errors)
            if decision not in RUNS:
                return decision, found
            # A takeover or a rerun keeps the key's age; only an expired key starts a new life.
            created_at = found.created_at if found is not None and decision != "new" else now
            mine = KeyRecord(client, key, fingerprint, created_at, claim=found.claim + 1 if found else 1,
                             deadline=now + self.in_progress_seconds)
            if found is None:
                cursor.execute("INSERT INTO idempotency_keys (client_id, key, fingerprint, created_at, claim, deadline) "
                               "VALUES (?, ?, ?, ?, ?, ?)",
                               (client, key, fingerprint, mine.created_at, mine.claim, mine.deadline))
            else:
                cursor.execute("UPDATE idempotency_keys SET fingerprint = ?, created_at = ?, claim = ?, deadline = ?, "
                               "status = NULL, body = NULL WHERE client_id = ? AND key = ?",
                               (fingerprint, mine.created_at, mine.claim, mine.deadline, client, key))
            return decision, mine

        try:
            return retry_conflicts(self.database, attempt)
        except (WriteConflict, *self.database.conflict_errors):  # type: ignore[misc]  # as in retry_conflicts
            return "busy", None

    def complete(self, cursor: Cursor, mine: KeyRecord, status: int, body: dict[str, Any]) -> bool:
        """Store the answer on the record, inside the caller's transaction, if ``mine`` still holds the key.

        False when another request took the key over meanwhile: the caller must then
        roll back its effect, which the takeover is doing instead.
        """
        cursor.execute("UPDATE idempotency_keys SET status = ?, body = ?, deadline = NULL "
                       "WHERE client_id = ? AND key = ? AND claim = ? AND status IS NULL RETURNING claim",
                       (status, json.dumps(body), mine.client, mine.key, mine.claim))
        return bool(cursor.fetchall())

    def settle(self, mine: KeyRecord, answer: tuple[int, dict[str, Any]] | None = None) -> None:
        """After the work rolled back: store ``answer`` (a failure) as the key's answer, or free the key.

        Either way no request is refused as busy for a claim whose work is over.
        If even this fails (the database is gone, or still contested), the deadline
        frees the key later.
        """
        steps: list[Callable[[Cursor], object]] = [lambda cursor: self.release(cursor, mine)]
        if answer is not None:
            steps.insert(0, lambda cursor: self.complete(cursor, mine, *answer))
        for step in steps:
            try:
                retry_conflicts(self.database, step)
                return
            except Exception:  # noqa: BLE001, S112 - try the next, smaller step
                continue

    def release(self, cursor: Cursor, mine: KeyRecord) -> None:
        """Forget ``mine``'s claim, so that the next request with the key runs as new."""
        cursor.execute("DELETE FROM idempotency_keys WHERE client_id = ? AND key = ? AND claim = ? AND status IS NULL",
                       (mine.client, mine.key, mine.claim))

    def records(self) -> list[KeyRecord]:
        """Every stored record, ordered by client and key."""
        cursor = self.database.connect()
        try:
            rows = cursor.execute(f"SELECT {_COLUMNS} FROM idempotency_keys ORDER BY client_id, key").fetchall()
        finally:
            cursor.close()
        return [_record(row) for row in rows]

    @staticmethod
    def _read(cursor: Cursor, client: str, key: str) -> KeyRecord | None:
        cursor.execute(f"SELECT {_COLUMNS} FROM idempotency_keys WHERE client_id = ? AND key = ?", (client, key))
        rows = cursor.fetchall()
        return _record(rows[0]) if rows else None


_COLUMNS = "client_id, key, fingerprint, created_at, claim, deadline, status, body"


def _record(row: tuple[Any, ...]) -> KeyRecord:
    record = KeyRecord(*row)
    return replace(record, body=json.loads(row[7])) if row[7] is not None else record
