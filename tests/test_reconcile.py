"""Lesson 04's reconciler: it settles a pending row by what the provider did, never by a second charge."""

from __future__ import annotations

import pytest

from idemlib import RUNNING_EXAMPLE, Crash, FaultPlan, simulate
from idemlib.messages import Message
from idemlib.provider import PaymentProvider, behaviours
from idemlib.provider_calls.placements import (
    PendingChargeHandler,
    charge_anew,
    fee_reconciled,
    left_pending,
    reconcile,
    reconciled_after,
    replayed_from_dead_letters,
    stuck_rows,
)
from idemlib.stores import DuckDBPayments


def _left_pending(provider: PaymentProvider, faults: FaultPlan | None = None,
                  handler: PendingChargeHandler | None = None, database: DuckDBPayments | None = None) -> DuckDBPayments:
    """``m-7f3`` delivered twice and dead-lettered, its pending row left without a result."""
    database = database or DuckDBPayments()
    run = simulate(handler or PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider,
                   faults=faults, max_deliveries=2)
    assert len(run.dead_letters) == 1 and [row.message_id for row in stuck_rows(database)] == ["m-7f3"]
    return database


@pytest.mark.parametrize("hours", [1, 25])
def test_a_v1_500_that_took_the_money_is_recorded_inside_and_after_the_key_lifetime(hours):
    outcome = reconciled_after("v1 answered 500, money taken", hours)
    assert outcome["card ($)"] == outcome["our database ($)"] == 40
    assert outcome["what it did"].startswith("found the charge its key made")


def test_asking_again_with_the_key_is_what_charged_twice():
    inside = reconciled_after("v1 answered 500, money taken", 1, look_up_first=False)
    after = reconciled_after("v1 answered 500, money taken", 25, look_up_first=False)
    assert (inside["card ($)"], inside["our database ($)"]) == (40, 0)  # the stored 500 settles nothing
    assert (after["card ($)"], after["our database ($)"]) == (80, 40)  # the forgotten key charges again


@pytest.mark.parametrize("hours", [1, 25])
def test_a_v1_500_that_took_nothing_is_left_for_a_person_with_nothing_charged(hours):
    outcome = reconciled_after("v1 answered 500, no money taken", hours)
    assert outcome["card ($)"] == outcome["our database ($)"] == 0
    assert outcome["what it did"].endswith("left for a person")


def test_under_v2_a_failed_call_is_asked_again_with_the_row_key_and_charges_once():
    provider = PaymentProvider(behaviours()["stripe-v2"])
    provider.fail_next(2)  # both deliveries fail before any money moved
    database = _left_pending(provider)
    assert stuck_rows(database)[0].last_status == 500
    [line] = reconcile(database, provider)
    assert line["reconciler"] == "asked again with the row's key: 200"
    assert provider.total_charged() == database.total_charged() == 40 and len(provider.charges) == 1
    assert stuck_rows(database) == []


def test_a_row_whose_call_was_never_made_is_charged_inside_the_lifetime_and_left_after_it():
    never_called = FaultPlan(crashes=[Crash("call provider", delivery=n) for n in (1, 2)])
    provider = PaymentProvider()
    database = _left_pending(provider, never_called)
    provider.clock.advance(25 * 3600)
    [late] = reconcile(database, provider)
    assert late["reconciler"].endswith("left for a person") and provider.total_charged() == 0
    provider = PaymentProvider()
    database = _left_pending(provider, never_called)
    [line] = reconcile(database, provider)
    assert line["charge recorded"] == "ch_81"
    assert provider.total_charged() == database.total_charged() == 40
    assert reconcile(database, provider) == []  # settled: a second run finds nothing to do


class RenamedKeys(PendingChargeHandler):
    def key_for(self, message_id: str) -> str:
        return f"payments:{message_id}:charge"  # a deploy that changed how keys are derived


def test_a_redelivery_sends_the_key_the_pending_row_stored_not_a_new_derivation():
    provider = PaymentProvider()
    database = _left_pending(provider, FaultPlan(crashes=[Crash("record result", delivery=n) for n in (1, 2)]))
    simulate(RenamedKeys(), [RUNNING_EXAMPLE], database=database, provider=provider)
    assert list(provider.stored_keys()) == ["m-7f3:charge"]
    assert provider.total_charged() == database.total_charged() == 40


def test_a_pending_fee_is_not_booked_against_the_orders_charge_but_charged_under_its_own_key():
    fee = fee_reconciled()
    assert fee["charges a lookup by order 1042 finds"] == [("ch_81", 40)]  # an order lookup would book $5 on it
    assert fee["charge recorded"] == "ch_82" and fee["reconciler"] == "asked again with the row's key: 200"
    assert fee["card ($)"] == fee["our database ($)"] == 45


def test_two_charges_under_one_key_are_left_for_a_person():
    provider = PaymentProvider()
    database = _left_pending(provider, FaultPlan(crashes=[Crash("record result", delivery=n) for n in (1, 2)]))
    provider.clock.advance(25 * 3600)
    provider.charge("m-7f3:charge", order_id=1042, amount=40)  # someone reused the pruned key by hand: ch_82
    [line] = reconcile(database, provider)
    assert line["reconciler"].endswith("left for a person") and line["charge recorded"] is None
    assert database.total_charged() == 0


@pytest.mark.parametrize("status", [429, 401])
def test_a_row_whose_last_answer_saved_nothing_is_asked_again_with_its_key(status):
    provider = PaymentProvider()
    provider.refuse_next(2, status=status)  # turned away before Stripe's idempotency layer: nothing kept
    database = _left_pending(provider)
    assert stuck_rows(database)[0].last_status == status
    provider.clock.advance(3600)
    [line] = reconcile(database, provider)
    assert line["reconciler"] == "asked again with the row's key: 200"
    assert provider.total_charged() == database.total_charged() == 40


def test_a_replay_from_the_dead_letter_queue_past_the_key_lifetime_leaves_the_row_to_the_reconciler():
    trusting = replayed_from_dead_letters("v1 answered 500, money taken", 25, key_lifetime_seconds=float("inf"))
    assert trusting["after the replay: card ($)"] == 80  # the pruned key charged anew
    replay = replayed_from_dead_letters("v1 answered 500, money taken", 25)
    assert (replay["after the replay: card ($)"], replay["after the replay: our database ($)"]) == (40, 0)
    assert replay["reconciler"] == "found the charge its key made: recorded it"
    assert replay["card ($)"] == replay["our database ($)"] == 40
    inside = replayed_from_dead_letters("v1 answered 500, money taken", 1)  # the stored 500 again: no charge
    assert (inside["after the replay: card ($)"], inside["card ($)"], inside["our database ($)"]) == (40, 40, 40)


def test_only_a_person_charges_anew_and_only_where_no_charge_carries_the_key():
    database, provider = left_pending("v1 answered 500, money taken")
    provider.clock.advance(25 * 3600)
    with pytest.raises(ValueError, match="a charge carries the key"):
        charge_anew(database, provider, "m-7f3")
    assert provider.total_charged() == 40
    database, provider = left_pending("v1 answered 500, no money taken")
    provider.clock.advance(25 * 3600)
    [left] = reconcile(database, provider)
    assert left["reconciler"].endswith("left for a person") and list(provider.stored_keys()) == ["m-7f3:charge"]
    line = charge_anew(database, provider, "m-7f3")
    assert line["charge recorded"] == "ch_81" and provider.total_charged() == database.total_charged() == 40
    assert stuck_rows(database) == [] and reconcile(database, provider) == []


def test_charge_anew_refuses_a_row_already_settled():
    database, provider = left_pending("v1 answered 500, money taken")
    reconcile(database, provider)  # records ch_81
    with pytest.raises(ValueError, match="nothing is owed"):
        charge_anew(database, provider, "m-7f3")
    assert provider.total_charged() == database.total_charged() == 40


def test_an_id_ending_in_the_old_result_suffix_does_not_make_the_bare_id_a_duplicate():
    # A producer's ID may hold any character: "m-7f3#result" is a message of its own, not m-7f3's result.
    database, provider = DuckDBPayments(), PaymentProvider()
    lookalike = Message.charge("m-7f3#result", order_id=7, amount=5)
    run = simulate(PendingChargeHandler(), [lookalike, RUNNING_EXAMPLE], database=database, provider=provider)
    assert provider.total_charged() == database.total_charged() == 45
    assert run.events("duplicate skipped").empty
    assert stuck_rows(database) == []


def test_a_409_while_the_first_call_runs_is_asked_again_on_the_next_run_not_left_for_a_person():
    provider = PaymentProvider(behaviours()["stripe-v1"])
    provider.begin("m-7f3:charge", order_id=1042, amount=40)  # a first call still in progress, its answer not yet given
    database = _left_pending(provider)
    provider.clock.advance(3600)
    [line] = reconcile(database, provider)
    assert line["reconciler"].endswith("409, asked again on the next run")
    [again] = reconcile(database, provider)  # the next run does ask again: the row was never a person's
    assert again["reconciler"].startswith("asked again with the row's key: 409")


def test_a_card_declined_is_recorded_as_the_rows_result_not_redelivered_to_the_dead_letter_queue():
    database, provider = DuckDBPayments(), PaymentProvider(behaviours()["stripe-v1"])
    provider.fail_next(status=402)  # the card declined: a definite answer that took no money
    run = simulate(PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider, max_deliveries=2)
    assert (len(run.events("delivered")), len(run.dead_letters), provider.calls) == (1, 0, 1)
    assert provider.total_charged() == database.total_charged() == 0
    assert stuck_rows(database) == [] and reconcile(database, provider) == []  # nothing left for a person
    again = simulate(PendingChargeHandler(), [RUNNING_EXAMPLE], database=database, provider=provider)
    assert not again.events("duplicate skipped").empty and provider.calls == 1  # a copy finds the decline recorded
