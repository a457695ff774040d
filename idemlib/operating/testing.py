"""Deliver every message twice: the course's view of the ``deliver-twice`` package, the tool an engineer installs.

The tool lives in its own small distribution, ``deliver-twice/`` in this repository
(``pip install deliver-twice``: pytest alone, psycopg as the ``postgres`` extra); its
docstrings say what it plays and what it cannot see. This module is what the lessons import:
the same functions, with the report as a pandas table (one row per scenario) for a notebook
to show, and :class:`PostgresSchema` on the course's own PostgreSQL by default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd

from deliver_twice import postgres, scenarios
from deliver_twice.report import NotIdempotent, Report, Scenario, not_idempotent_text
from deliver_twice.scenarios import MAX_DELIVERIES, TIME_LIMIT, Blocked, label
from deliver_twice.steps import Connection, Handle
from idemlib.stores.postgres_store import postgres_url

__all__ = ["Blocked", "MAX_DELIVERIES", "NotIdempotent", "PostgresSchema", "Report", "Scenario", "TIME_LIMIT",
           "assert_idempotent", "fresh_schema", "idempotency_report", "label", "table"]

COLUMNS = ["scenario", "deliveries", "same state as one delivery", "what differs"]


def table(report: Report) -> pd.DataFrame:
    """The report as a table, one row per scenario, to show in a lesson (the families not played in its ``attrs``)."""
    frame = pd.DataFrame([(row.scenario, row.deliveries, row.same, row.differs) for row in report], columns=COLUMNS)
    frame.attrs["not played"] = list(report.not_played)
    return frame


def idempotency_report(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                       reset: Callable[[Connection], None], state: Callable[[Connection], Any] | None = None,
                       **options: Any) -> pd.DataFrame:
    """:func:`deliver_twice.idempotency_report` as a table (options: ``expected``, ``ack``, ``time_limit``)."""
    return table(scenarios.idempotency_report(handle, messages, connect=connect, reset=reset, state=state, **options))


def assert_idempotent(handle: Handle, messages: Sequence[Any], *, connect: Callable[[], Connection],
                      reset: Callable[[Connection], None], state: Callable[[Connection], Any] | None = None,
                      **options: Any) -> pd.DataFrame:
    """:func:`deliver_twice.assert_idempotent`, returning its report as a table when it passes."""
    __tracebackhide__ = True
    report = scenarios.idempotency_report(handle, messages, connect=connect, reset=reset, state=state, **options)
    if report.failed():
        raise NotIdempotent(not_idempotent_text(handle, report))
    return table(report)


class PostgresSchema(postgres.PostgresSchema):
    """An empty schema of its own on the course's PostgreSQL (or ``url``), dropped when the object goes."""

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url or postgres_url())


@contextmanager
def fresh_schema(url: str | None = None) -> Iterator[PostgresSchema]:
    """An empty schema on the PostgreSQL at ``url`` (the course's by default), dropped afterwards."""
    schema = PostgresSchema(url)
    try:
        yield schema
    finally:
        schema.drop()
