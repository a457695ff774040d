"""Questions 2 and 5 asked of a handler of one's own, through the recording payment client."""

from __future__ import annotations

import uuid

from idemlib.case_study.mortgage import APPLICATION_42
from idemlib.case_study.own_service import RateLimited, RecordingPayments, ask_questions_2_and_5


def _derived(message, payments):
    payments.pay_out(message.body["application_id"], message.body["amount"],
                     idempotency_key=f"{message.message_id}:payout")


def _fresh(message, payments):
    payments.pay_out(message.body["application_id"], message.body["amount"], idempotency_key=str(uuid.uuid4()))


def _none(message, payments):
    payments.pay_out(message.body["application_id"], message.body["amount"])


def test_a_derived_key_survives_the_timeout_and_the_429_and_pays_once():
    table = ask_questions_2_and_5({"derived": _derived, "fresh": _fresh, "none": _none}, APPLICATION_42)
    assert table.loc["derived"].to_dict() == {
        "deliveries": 3, "payout calls": 3, "distinct keys": 1, "calls without a key": 0, "payouts": 1,
        "Q2: one key, kept on retry": "yes", "Q5: key passed on, paid once": "yes"}
    assert (table.loc["fresh", "distinct keys"], table.loc["fresh", "payouts"]) == (3, 2)
    assert (table.loc["none", "calls without a key"], table.loc["none", "payouts"]) == (3, 2)
    assert set(table.loc[["fresh", "none"], "Q2: one key, kept on retry"]) == {"no"}
    assert set(table.loc[["fresh", "none"], "Q5: key passed on, paid once"]) == {"no"}


def test_a_rate_limited_call_pays_nothing_and_saves_nothing_under_its_key():
    payments = RecordingPayments(time_out_call=None, rate_limit_call=1)
    try:
        payments.pay_out(42, 100, idempotency_key="k")
    except RateLimited:
        pass
    assert payments.payouts == []
    assert payments.pay_out(42, 100, idempotency_key="k") == "po_1"
    assert payments.pay_out(42, 100, idempotency_key="k") == "po_1"
    assert payments.payouts == [(42, 100)]


def test_a_handler_that_swallows_the_timeout_is_seen_paying_once_without_a_retry():
    def swallows(message, payments):
        try:
            _derived(message, payments)
        except Exception:
            pass  # acks anyway: the payout was made, so one payout, one call

    table = ask_questions_2_and_5({"swallows": swallows}, APPLICATION_42)
    assert (table.loc["swallows", "deliveries"], table.loc["swallows", "payouts"]) == (1, 1)
