"""Checks for lesson 02, Save the ID with the work."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import duckdb

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, one_each, right
from idemlib.explore import crash_matrix
from idemlib.handlers import NaiveHandler
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


@exercise
def check_naive_crashes(answer: Any) -> Feedback:
    """Lesson 02, exercise 2: the naive consumer's column of the crash matrix, predicted fault by fault.

    The answer maps each fault of the naive consumer (as the crash matrix spells it) to one of
    :data:`~idemlib.sim.OUTCOMES`; the check runs the crash matrix for that consumer.
    """
    matrix = crash_matrix([NaiveHandler()])
    faults = list(matrix["fault"])
    if (missing := blank(answer, f"a dict mapping each of {faults} to one of {list(OUTCOMES)}")) is not None:
        return missing
    given = one_each(answer, faults, OUTCOMES, "the outcome", keys_named="the naive consumer's faults ")
    if isinstance(given, Feedback):
        return given
    truth = dict(zip(matrix["fault"], matrix["outcome"]))
    wrong = [fault for fault in faults if given[fault] != truth[fault]]
    if not wrong:
        return right("the naive consumer's charge is saved at its commit, and nothing remembers it: any fault after "
                     "the commit (a crash before the ack, a lost ack) brings a redelivery that charges again, and any "
                     "crash before it is rolled back and retried harmlessly. It never loses a charge, and never "
                     "recognises a repeat.")
    fault, said = wrong[0], given[wrong[0]]
    if said == "charge lost":
        why = ("The naive consumer acks last, and a broker that hears no ack delivers again. Which of its writes could "
               "a redelivery skip, when it remembers nothing?")
    elif truth[fault] == "charged twice":
        why = (f"At {fault!r} the charge is already committed. What does the redelivery do with a consumer that has "
               "no record of it (section 3's ID-first and work-first columns show the two ways to remember)?")
    else:
        why = (f"At {fault!r} nothing is committed yet: the crash rolls the transaction back. What is left for the "
               "redelivery to repeat?")
    return hint(f"{len(wrong)} of {len(faults)} are not right yet. {why}")
