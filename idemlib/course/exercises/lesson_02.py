"""Checks for lesson 02, Save the ID with the work."""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import duckdb

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, one_each, right
from idemlib.explore import crash_matrix, fault_points
from idemlib.handlers import Context, NaiveHandler, Steps
from idemlib.messages import parse_charge
from idemlib.sim import OUTCOMES
from idemlib.stores.sql import SCHEMA, single_value

__all__ = ["check_inbox_insert", "check_naive_crashes"]


DELIVERIES = ("m-7f3", "m-7f3", "pay-1042", "m-10", "m-9c2", "m-9c2 ", "m-10", "pay_1042", "m-8a10", "m-7f3", "m-8a1",
              "pay-1042", "M-7F3", "pay_1042", "m-8a1", "m-100", "order-1042", "M-7F3", "m-100", "m-7f3")
"""Several messages, each delivered more than once, interleaved as a queue would hand them out.

The IDs do not arrive in sorted order (a high-water mark such as ``? > max(message_id)``
misses ``m-10``), differ in length and share prefixes (an ID cut short makes ``m-8a10``
collide with ``m-8a1``), and ``pay_1042`` follows ``pay-1042`` (``LIKE`` reads ``_`` as any
one character, so the two would match). ``m-100`` follows ``m-10`` (a condition that takes a
stored ID for a prefix of the new one makes them collide, the other way round from ``m-8a10``
and ``m-8a1``), ``order-1042`` ends like ``pay-1042`` (an ID compared by its last characters
collides), ``M-7F3`` is a message of its own (IDs are compared exactly, not
case-insensitively), and so is ``m-9c2 `` with its trailing space (nor trimmed: a producer
that pads its IDs pads them every time, and another producer's ``m-9c2`` is another message).
The last delivery repeats the very first ID after nine other messages, so a condition that
looks only at the latest few rows misses it.
"""

HISTORY = 100_000
"""How many IDs ``processed_messages`` already holds when the check delivers :data:`NEIGHBOURS`: a queue's history."""


def _history(db: duckdb.DuckDBPyConnection) -> None:
    """Fill the inbox with :data:`HISTORY` IDs of two producers: UUIDs, and numbered order events."""
    db.execute(f"""
        INSERT INTO processed_messages (message_id)
        SELECT CASE WHEN i % 2 = 0 THEN 'order-' || lpad(CAST(i // 2 AS VARCHAR), 6, '0')
                    ELSE substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-'
                         || substr(h, 17, 4) || '-' || substr(h, 21, 12) END
        FROM (SELECT i, md5('history ' || CAST(i AS VARCHAR)) AS h FROM range({HISTORY}) AS t(i))""")


def _neighbours() -> tuple[str, ...]:
    """New IDs that differ from a stored one only at one end: the last character, the first, or a suffix."""
    uuid = hashlib.md5(b"history 1").hexdigest()  # the stored ID made from i = 1, as DuckDB's md5() makes it
    stored = "-".join((uuid[:8], uuid[8:12], uuid[12:16], uuid[16:20], uuid[20:32]))
    other = {"0": "1"}.get(stored[-1], "0")
    first = {"0": "1"}.get(stored[0], "0")
    return (stored[:-1] + other, first + stored[1:], "order-012345-2", "order-049999.1")


NEIGHBOURS = _neighbours()
"""Delivered once :data:`HISTORY` IDs are stored, each twice: new IDs that share all but one end with a stored one.

A condition that compares part of the ID (a prefix, a suffix, the first few characters of a
digest) passes a handful of IDs and fails once the table holds a day's worth of them.
"""

_PATTERN_MATCHING = re.compile(r"\b(I?LIKE|GLOB|SIMILAR\s+TO|REGEXP\w*)\b")


def _code_and_placeholders(sql: str) -> tuple[str, int]:
    """``sql`` with its comments removed, and the number of ``?`` placeholders outside quotes and comments."""
    code: list[str] = []
    placeholders = 0
    i = 0
    while i < len(sql):
        char, pair = sql[i], sql[i:i + 2]
        if pair == "--":
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            code.append(" ")
        elif pair == "/*":
            end = sql.find("*/", i + 2)
            i = len(sql) if end < 0 else end + 2
            code.append(" ")
        elif char in "'\"":
            end = i + 1
            while end < len(sql) and not (sql[end] == char and sql[end + 1:end + 2] != char):
                end += 2 if sql[end] == char else 1  # a doubled quote is a quote inside the text
            code.append(sql[i:end + 1])
            i = end + 1
        else:
            placeholders += char == "?"
            code.append(char)
            i += 1
    return "".join(code), placeholders


def _rows_reported(db: duckdb.DuckDBPyConnection, sql: str, placeholders: int, message_id: str) -> int:
    # What the handler would branch on: the rows the statement itself says it wrote
    # (RETURNING lists them; without it, DuckDB answers an INSERT or a MERGE with its row count).
    rows = db.execute(sql, [message_id] * placeholders).fetchall()
    if re.search(r"\bRETURNING\b", sql, flags=re.IGNORECASE):
        return len(rows)
    return int(rows[0][0]) if rows and isinstance(rows[0][0], int) else -1


@exercise
def check_inbox_insert(sql: Any) -> Feedback:
    """Lesson 02: the inbox's INSERT without ``ON CONFLICT``: 1 row for a new ID, 0 for a duplicate, no error.

    Every ``?`` outside comments and quotes is bound to the message ID. Tried on the
    lesson's ``processed_messages`` table the way a queue delivers: several messages of
    different lengths, in no sorted order, each more than once, then IDs that differ from one of
    :data:`HISTORY` stored IDs only at one end (:data:`NEIGHBOURS`), every delivery in a
    transaction of its own followed by the charge and a commit, as the inbox handler runs it.
    Any statement DuckDB runs that writes the row will do: ``INSERT ... SELECT``,
    ``WITH ... INSERT``, or ``MERGE ... WHEN NOT MATCHED THEN INSERT``.
    """
    if (missing := blank(sql, "an INSERT statement (a string) with ? where the message ID goes")) is not None:
        return missing
    if not isinstance(sql, str):
        return hint("Give the statement as a string, with ? where the message ID goes.")
    code, placeholders = _code_and_placeholders(sql)
    words = " ".join(code.upper().split())
    if placeholders == 0:
        return hint("Give the statement as a string, with ? where the message ID goes.")
    if not re.match(r"(INSERT|WITH|MERGE)\b", words) or not re.search(r"\b(INSERT|MERGE)\b", words):
        return hint("The inbox records the ID by writing a row: the statement should be an INSERT.")
    if "PROCESSED_MESSAGES" not in words:
        return hint("The IDs are remembered in the processed_messages table; write the row there.")
    if re.match(r"INSERT OR (IGNORE|REPLACE)\b", words):
        return hint("INSERT OR IGNORE and INSERT OR REPLACE are DuckDB's and SQLite's short forms of ON CONFLICT, "
                     "and the engines without ON CONFLICT lack them too. Write a plain INSERT that takes its rows "
                     "from a query instead of VALUES: when should that query return none?")
    if "ON CONFLICT" in words:
        return hint("That is the lesson's own statement. The exercise asks for one that does without ON CONFLICT. "
                     "An INSERT can take its rows from a query instead of VALUES: when should that query return none?")
    matches_patterns = _PATTERN_MATCHING.search(words) is not None
    db = duckdb.connect(":memory:")
    db.execute(SCHEMA[1])
    db.execute("CREATE TABLE payments (message_id VARCHAR)")
    seen: set[str] = set()
    for message_id in DELIVERIES:
        rows_before = single_value(db.execute("SELECT count(*) FROM processed_messages"))
        db.execute("BEGIN")
        try:
            written = _rows_reported(db, code, placeholders, message_id)
            if written == 1:
                db.execute("INSERT INTO payments VALUES (?)", [message_id])
            db.execute("COMMIT")
        except duckdb.ConstraintException:
            return hint(f"{message_id} came back and the statement tried to insert it again: a duplicate-key error. "
                         "Inside the handler's transaction an error aborts the transaction (on DuckDB and PostgreSQL), "
                         "so nothing could be committed or acked. Make the statement itself find the ID already "
                         "recorded and write no row.")
        except duckdb.Error as error:
            if "columns but" in str(error):
                return hint("processed_messages has two columns (message_id and an optional fingerprint): name the "
                             "column you fill, in parentheses after the table's name.")
            return hint(f"DuckDB could not run it: {str(error).splitlines()[0]}")
        new = message_id not in seen
        seen.add(message_id)
        if written < 0:
            return hint("The statement does not say how many rows it wrote. Let it report the rows it inserted, "
                         "so the handler can branch on the count.")
        if new and written != 1:
            if matches_patterns:
                return hint(f"{message_id} had never been seen, yet the statement wrote {written} rows: your condition "
                            "took another ID for this one. LIKE, GLOB and SIMILAR TO read characters such as _ and % "
                            "as wildcards, and message IDs may contain them.")
            return hint(f"{message_id} had never been seen, yet the statement wrote {written} rows. Every new message "
                        "must get its row, whatever its length and whichever IDs came before it: does your condition "
                        "look for this very ID, or only at the table?")
        if not new and written != 0:
            return hint(f"{message_id} came back and the statement reported {written} row(s) written, so the handler "
                         "would charge it again. A duplicate must write nothing and report zero rows.")
        kept = single_value(db.execute("SELECT count(*) FROM processed_messages WHERE message_id = ?", [message_id]))
        added = single_value(db.execute("SELECT count(*) FROM processed_messages")) - rows_before
        if kept != 1 or added != written:
            return hint(f"After {message_id}, processed_messages holds {added} new row(s) and {kept} with exactly that "
                        "ID. The inbox must keep the ID as it came, one row per message, or a repeat is not recognised.")
    charged = [row[0] for row in db.execute("SELECT message_id FROM payments ORDER BY 1").fetchall()]
    if charged != sorted(seen):
        return hint(f"The payments that followed were {charged}; each message should be charged once.")
    _history(db)
    for message_id in (*NEIGHBOURS, *NEIGHBOURS):
        new = message_id not in seen
        seen.add(message_id)
        db.execute("BEGIN")
        try:
            written = _rows_reported(db, code, placeholders, message_id)
            db.execute("COMMIT")
        except duckdb.Error:
            db.execute("ROLLBACK")
            written = -1
        if written != (1 if new else 0):
            return hint(f"With {HISTORY:,} IDs already stored, {message_id} {'was new' if new else 'came back'} and "
                        f"the statement reported {written} row(s). Does your condition compare the whole ID, every "
                        "character of it? Part of an ID (its first or last characters, or a few characters of a "
                        "digest) is shared by different IDs once a table holds enough of them.")
    return right(f"{len(DELIVERIES)} deliveries of {len(set(DELIVERIES))} messages, in no sorted order, then "
                 f"{2 * len(NEIGHBOURS)} more once {HISTORY:,} IDs were stored: one row for each new ID, "
                 "zero for each repeat, and no error, so each transaction went on to commit. One caveat: two consumers "
                 "running it at the same moment can both find no row, and then the unique key refuses one of them "
                 "with an error, where ON CONFLICT DO NOTHING may instead make the second one wait and write zero rows. "
                 "The money is safe in every case; lesson 03 shows each engine's signal and what the handler does with it.")


class _AckBeforeCommit(NaiveHandler):
    """Exercise 2's handler: the naive consumer with its ack moved up, between the charge and the commit.

    No lesson runs it, so no cell prints its column of the crash matrix: the learner predicts it.
    """

    name = "naive, ack before commit"
    steps = ("begin", "charge", "ack", "commit")

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "begin"
        ctx.db.begin()
        yield "charge"
        self.apply_charge(ctx, charge)
        yield "ack"
        ctx.ack()
        yield "commit"
        ctx.db.commit()


EARLY_ACK_STEPS = _AckBeforeCommit.steps
"""Exercise 2's consumer, step by step: ``begin → charge → ack → commit``."""

EARLY_ACK_FAULTS = tuple(fault for fault, _ in fault_points(_AckBeforeCommit()))
"""Exercise 2's faults, as the crash matrix spells them: no fault, a crash before each step, a lost ack."""


@functools.cache
def early_ack_column() -> dict[str, str]:
    """Exercise 2's handler's column of the crash matrix, as the simulator runs it: fault → outcome."""
    matrix = crash_matrix([_AckBeforeCommit()])
    return dict(zip(matrix["fault"], matrix["outcome"]))


def _early_ack_hint(fault: str, said: str, truth: str) -> str:
    """The question a wrong outcome for ``fault`` raises: where the fault falls against the ack and the commit."""
    if fault == "no fault":
        return ("With no fault, every step runs: begin, charge, ack, commit. How many charges does the commit keep, "
                "and has the broker any reason to deliver the message again?")
    if fault == "ack lost":
        return ("The ack went missing on the network, and the consumer went on to commit. What does the broker do "
                "with a message whose ack never arrived, and what does a consumer with no memory do with it "
                "(lesson 01, section 2)?")
    if fault == "crash before commit":
        return ("When the consumer dies just before its commit, its ack is already in. Does the broker deliver the "
                "message again (section 4), and what did the rollback leave in payments?")
    if said == "charge lost":
        return (f"At {fault!r} the ack has not been sent yet, so the broker still holds the message. What does it do "
                "when the lease runs out?")
    return (f"At {fault!r} nothing is committed yet: in this order the commit comes last, after the ack. What does "
            "the rollback leave for the redelivery to repeat?")


@exercise
def check_naive_crashes(answer: Any) -> Feedback:
    """Lesson 02, exercise 2: the column of the naive consumer with its ack before its commit, predicted fault by fault.

    The answer maps each of :data:`EARLY_ACK_FAULTS` to one of :data:`~idemlib.sim.OUTCOMES`; the
    check runs the crash matrix for that consumer.
    """
    faults = list(EARLY_ACK_FAULTS)
    if (missing := blank(answer, f"a dict mapping each of {faults} to one of {list(OUTCOMES)}")) is not None:
        return missing
    given = one_each(answer, faults, OUTCOMES, "the outcome", keys_named="the consumer's faults ")
    if isinstance(given, Feedback):
        return given
    truth = early_ack_column()
    wrong = [fault for fault in faults if given[fault] != truth[fault]]
    if not wrong:
        return right("moving the ack before the commit buys nothing and breaks two cells: a crash between the ack and "
                     "the commit loses the charge (the broker has forgotten the message, the rollback the charge), "
                     "and a lost ack still brings a redelivery that charges again, since the commit follows. Every "
                     "crash before the ack is rolled back and redelivered, as before.")
    fault = wrong[0]
    return hint(f"{len(wrong)} of {len(faults)} are not right yet. {_early_ack_hint(fault, given[fault], truth[fault])}")
