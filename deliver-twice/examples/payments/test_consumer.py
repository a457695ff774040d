"""The team's own test: 20 recorded messages, each delivered twice in every way deliver-twice knows."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

import pytest
from consumer import charge, charge_once, create_tables

from deliver_twice import NotIdempotent, assert_idempotent

MESSAGES = [{"message_id": f"m-{n:02}", "order_id": 1000 + n % 7, "amount": 5 + n} for n in range(20)]


def test_charge_once_survives_every_duplicate(tmp_path: Path) -> None:
    assert_idempotent(charge_once, MESSAGES, connect=functools.partial(sqlite3.connect, tmp_path / "shop.db"),
                      reset=create_tables)


def test_charge_is_caught_charging_twice(tmp_path: Path) -> None:
    with pytest.raises(NotIdempotent, match="charge' is not idempotent"):
        assert_idempotent(charge, MESSAGES, connect=functools.partial(sqlite3.connect, tmp_path / "shop.db"),
                          reset=create_tables)
