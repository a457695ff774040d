"""Lesson 10: a daily-partitioned inbox's whole life on real PostgreSQL, and when a day may go."""

from __future__ import annotations

from conftest import need_postgres

from idemlib.retention_and_ordering.partitions import admit, age_checks, drop_cost, droppable_days, partition_lifecycle


def test_each_partition_step_waits_or_fails_as_its_lock_decides_on_real_postgresql():
    need_postgres()
    steps = partition_lifecycle().set_index("step")["what happened"]
    assert steps["a delivery for a day with no partition yet"].startswith("refused: CheckViolation")
    assert steps["create tomorrow's partition directly"].startswith("waited")  # ACCESS EXCLUSIVE on the parent
    assert steps["create it as a table of its own (LIKE inbox_daily), then attach it"] == "done at once"
    assert steps["the oldest day, a plain DETACH"].startswith("waited")
    cut_short = steps["the oldest day, DETACH CONCURRENTLY cut short (statement_timeout)"]
    assert cut_short.startswith("waited") and cut_short.endswith("pending afterwards: True")
    assert "already pending detach" in steps["DETACH CONCURRENTLY again"]
    assert steps["finish the interrupted detach"] == "done at once; detach pending afterwards: False"
    assert steps["a late copy of a message from the dropped day"].startswith("refused: CheckViolation")
    assert not steps.str.contains("idemlib_l10_").any()  # the run's own schema name never shows


def test_a_day_goes_only_once_its_newest_row_is_past_the_horizon():
    days = droppable_days(now_hours=252, horizon_hours=145, days=5)
    assert list(days["droppable at 252 h"]) == [True, True, True, True, False]
    assert days["droppable from (h)"].iloc[0] == 24 + 145
    # The oldest rows of a dropped day were kept a day longer than the horizon.
    assert (days["its oldest row's age at the drop, or now (h)"].iloc[:4] == 145 + 24).all()


def test_a_copy_older_than_the_retention_is_parked_not_trusted_to_the_inbox():
    assert admit(0, 100, 145) == "checked against the inbox"
    assert admit(0, 145, 145) == "checked against the inbox"
    assert admit(0, 145.5, 145).startswith("parked for review")
    table = age_checks({"young": (10, 20), "old": (0, 300)}, retention_hours=145)
    assert list(table["what the consumer does"].str.startswith("parked")) == [False, True]


def test_the_drop_cost_table_has_one_row_per_size():
    need_postgres()
    cost = drop_cost(sizes=(100, 1_000))
    assert list(cost.index) == [100, 1_000] and (cost > 0).all().all()
