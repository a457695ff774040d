"""deliver-twice against a bank of realistic consumers: every broken one it can judge is caught, no right one is
flagged, and the ones it cannot catch are exactly those whose only mistake is a race in a family it does not play
(SQLAlchemy sessions and asyncpg), which its report names as not played."""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

import asyncpg
import pytest
from deliver_twice_bank import BANK, MESSAGES, Case, asyncpg_reset, orm_reset, pg_reset, sqlite_reset
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from deliver_twice import idempotency_report

pytest_plugins = ["idemlib.operating.pytest_plugin"]


def judge(item: Case, tmp_path: Any, schema: Any) -> tuple[bool, list[str]]:
    """Whether deliver-twice failed the consumer, and the families its report says it did not play."""
    if item.database == "sqlite":
        connect, reset = functools.partial(sqlite3.connect, tmp_path / f"{item.handle.__name__}.db"), sqlite_reset
    elif item.database == "postgres":
        connect, reset = schema.connect, pg_reset
    elif item.database == "sqlalchemy":
        connect, reset = sessionmaker(create_engine(f"sqlite:///{tmp_path / item.handle.__name__}.db")), orm_reset
    else:
        def connect() -> Any:
            return asyncpg.connect(schema.url, server_settings={"search_path": schema.name})
        reset = asyncpg_reset
    report = idempotency_report(item.handle, MESSAGES, connect=connect, reset=reset, **item.options)
    return not report.passed, report.not_played


def test_the_bank_has_at_least_30_consumers_on_four_kinds_of_connection():
    assert len(BANK) >= 30
    assert {item.database for item in BANK} == {"sqlite", "postgres", "sqlalchemy", "asyncpg"}
    assert sum(item.broken is None for item in BANK) >= 10 and sum(item.broken is not None for item in BANK) >= 15


def test_every_broken_consumer_it_can_judge_is_caught_and_no_right_one_is_flagged(tmp_path, postgres_schema, capsys):
    caught, missed, false_alarms, right = [], [], [], 0
    for item in BANK:
        failed, not_played = judge(item, tmp_path, postgres_schema)
        name = f"{item.database}:{item.handle.__name__}"
        if item.broken is None:
            right += 1
            if failed:
                false_alarms.append(name)
        elif failed:
            caught.append(name)
        else:
            missed.append((name, item.broken, not_played))
    broken = len(caught) + len(missed)
    with capsys.disabled():
        print(f"\ndeliver-twice bank: caught {len(caught)} of {broken} broken consumers; "
              f"false alarms on {len(false_alarms)} of {right} right ones; missed: {[m[0] for m in missed]}")
    assert not false_alarms
    # What it misses is a race it says it did not play, never a mistake in a family it played.
    assert {(name, broken_class) for name, broken_class, _ in missed} == {
        ("sqlalchemy:orm_check_then_insert", "check then act, no unique key (race)"),
        ("asyncpg:asyncpg_check_then_insert", "check then act, no unique key (race)")}
    assert all(any(line.startswith("two deliveries at once: not played") for line in lines)
               for _, _, lines in missed)


@pytest.mark.parametrize("item", [item for item in BANK if item.database == "sqlite"],
                         ids=lambda item: item.handle.__name__)
def test_each_sqlite_consumer_of_the_bank_gets_its_verdict(item, tmp_path):
    failed, _ = judge(item, tmp_path, None)
    assert failed == (item.broken is not None), item.broken
