"""The skip rate over a simulated day: the alert fires when the handler outgrows its lease, and stays quiet otherwise."""

from __future__ import annotations

import pytest

from idemlib.operating.day import NOON, Day, run_day
from idemlib.operating.metrics import SkipRateAlert, delivery_signals, diagnose, skip_rate
from idemlib.stores import DuckDBPayments

WINDOW = 900
ALERT = SkipRateAlert()


@pytest.fixture(scope="module")
def days():
    return {
        "quiet": run_day(Day()),
        "slow": run_day(Day(slow_from=NOON)),
        "storm": run_day(Day(storm_from=NOON, storm_until=NOON + 3 * 3600)),
    }


def rates(run):
    return skip_rate(run.trace, WINDOW, until=24 * 3600)


def test_every_day_charges_each_payment_once(days):
    for run in days.values():
        assert run.total_charged == run.expected_total
        assert (run.outcomes() == "charged once").all()


def test_the_alert_stays_quiet_on_a_quiet_day(days):
    assert ALERT.fires_at(rates(days["quiet"]), WINDOW) is None
    assert rates(days["quiet"])["skipped"].sum() < 10


@pytest.mark.parametrize("kind", ["slow", "storm"])
def test_the_alert_fires_within_half_an_hour_of_noon(days, kind):
    fired = ALERT.fires_at(rates(days[kind]), WINDOW)
    assert fired is not None and NOON < fired <= NOON + 1800 + WINDOW


def test_before_noon_the_slow_day_looks_like_the_quiet_one(days):
    assert ALERT.fires_at(rates(days["slow"]).loc[: NOON - WINDOW], WINDOW) is None


def test_the_signals_tell_a_slow_handler_from_lost_acks(days):
    slow = delivery_signals(days["slow"].trace, 30.0, since=NOON)
    storm = delivery_signals(days["storm"].trace, 30.0, since=NOON)
    assert slow["median handling time (s)"] > 30 > storm["median handling time (s)"]
    assert slow["share of expiries while still working"] > 0.5 > storm["share of expiries while still working"]
    assert "slower than its lease" in diagnose(slow)
    assert "acks are being lost" in diagnose(storm)


def test_the_model_of_the_day_counts_what_duckdb_counts():
    day = Day(messages=120, slow_from=6 * 3600, ack_loss=0.05)
    model, duckdb = run_day(day), run_day(day, database=DuckDBPayments())
    assert model.trace["event"].value_counts().to_dict() == duckdb.trace["event"].value_counts().to_dict()
    assert model.total_charged == duckdb.total_charged == day_total(day)


def day_total(day):
    return sum(message.body["amount"] for _, message in day.arrivals())


def test_a_skip_rate_needs_a_positive_window():
    with pytest.raises(ValueError, match="window_seconds"):
        skip_rate(run_day(Day(messages=5)).trace, 0)
    with pytest.raises(ValueError, match="storm_until"):
        Day(storm_from=NOON)


def test_the_handling_alert_leads_on_a_slow_handler_and_stays_silent_on_a_storm_and_a_quiet_day():
    from idemlib.operating.day import NOON
    from idemlib.operating.metrics import handling_alert
    from idemlib.operating.three_days import lesson_days

    days = lesson_days()
    assert handling_alert(days["slow from noon"].trace, 30.0) == NOON + 900
    assert handling_alert(days["quiet day"].trace, 30.0) is None
    assert handling_alert(days["lost-ack storm from noon"].trace, 30.0) is None
