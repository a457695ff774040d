"""The payment provider's idempotency keys, in each of its three behaviours."""

import pytest
from conftest import need_postgres

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.facts import fact_number, fact_seconds
from idemlib.faults import Crash, FaultPlan, LostAck, LostResponse
from idemlib.handlers import ProviderHandler
from idemlib.messages import Message
from idemlib.provider import PaymentProvider, after_an_unclear_500, behaviours, retries_after_failure
from idemlib.sim import simulate
from idemlib.stores import DuckDBPayments

CHARGE = {"order_id": 1042, "amount": 40}


def provider(name="stripe-v1"):
    return PaymentProvider(behaviours()[name])


def test_the_same_key_returns_the_stored_result_and_charges_nothing_more():
    p = provider()
    first = p.charge("m-7f3:charge", **CHARGE)
    again = p.charge("m-7f3:charge", **CHARGE)
    assert (first.status, first.body["id"], first.replayed) == (200, "ch_81", False)
    assert (again.body, again.replayed) == (first.body, True)
    assert len(p.charges) == 1 and p.total_charged() == 40


def test_without_a_key_every_call_charges():
    p = provider()
    p.charge(None, **CHARGE)
    p.charge(None, **CHARGE)
    assert p.total_charged() == 80


def test_stripe_v1_replays_an_error_and_v2_runs_the_failed_request_again():
    v1, v2 = provider("stripe-v1"), provider("stripe-v2")
    for p in (v1, v2):
        p.fail_next()
        assert p.charge("k", **CHARGE).status == 500
    replayed = v1.charge("k", **CHARGE)
    assert (replayed.status, replayed.replayed, v1.charges) == (500, True, [])
    rerun = v2.charge("k", **CHARGE)
    assert (rerun.status, rerun.replayed, len(v2.charges)) == (200, False, 1)


@pytest.mark.parametrize("status", [429, 401])  # Stripe: rate limiters and the API-key check run before the key layer
@pytest.mark.parametrize("name", ["stripe-v1", "stripe-v2"])
def test_a_request_turned_away_before_the_endpoint_began_saves_nothing_and_the_same_key_runs(name, status):
    p = provider(name)
    p.refuse_next(status=status)
    assert p.charge("k", **CHARGE).status == status
    retry = p.charge("k", **CHARGE)
    assert (retry.status, retry.replayed, p.total_charged()) == (200, False, 40)


def test_an_error_after_the_money_moved_looks_like_any_error_and_v1_replays_it():
    charged, not_charged = provider(), provider()
    charged.fail_next(charged=True)
    not_charged.fail_next(charged=False)
    first, other = charged.charge("k", **CHARGE), not_charged.charge("k", **CHARGE)
    assert (first.status, first.body) == (other.status, other.body)  # the caller cannot tell them apart
    assert charged.charge("k", **CHARGE).replayed and charged.total_charged() == 40
    assert not_charged.total_charged() == 0


def test_a_new_key_after_an_unclear_failure_charges_twice_unless_the_caller_looks_first():
    p = provider()
    p.fail_next(charged=True)
    p.charge("m-7f3:charge", **CHARGE)
    assert p.charges_for(1042) and p.charges_for(9999) == []
    p.charge("m-7f3:charge:again", **CHARGE)
    assert p.total_charged() == 80


def test_v2_completes_partly_failed_work_without_charging_again():
    p = provider("stripe-v2")
    p.fail_next(charged=True)
    assert p.charge("k", **CHARGE).status == 500
    done = p.charge("k", **CHARGE)
    assert (done.status, done.body["id"], p.total_charged()) == (200, "ch_81", 40)


def test_v1_reruns_a_key_reused_after_it_was_pruned():
    p = provider()
    p.fail_next(charged=True)
    p.charge("k", **CHARGE)
    p.clock.advance(fact_seconds("stripe_v1_key_min_age"))
    again = p.charge("k", **CHARGE)
    assert (again.status, again.replayed, p.total_charged()) == (200, False, 80)


@pytest.mark.parametrize(("name", "status"), [("stripe-v1", 400), ("stripe-v2", 400), ("ietf-draft", 422)])
def test_a_key_reused_with_other_parameters_is_rejected(name, status):
    p = provider(name)
    p.charge("k", **CHARGE)
    refused = p.charge("k", order_id=1042, amount=80)
    assert refused.status == status and "key of its own" in refused.body["error"]
    assert p.total_charged() == 40


def test_the_ietf_draft_refuses_a_missing_key_with_400_and_a_busy_key_with_409():
    p = provider("ietf-draft")
    assert p.charge(None, **CHARGE).status == 400
    p.begin("k", **CHARGE)
    assert p.charge("k", **CHARGE).status == 409
    assert p.charges == []


@pytest.mark.parametrize(("name", "fact"), [("stripe-v1", "stripe_v1_key_min_age"), ("stripe-v2", "stripe_v2_replay_window")])
def test_a_key_is_forgotten_after_its_retention_and_the_repeat_charges_again(name, fact):
    p = provider(name)
    p.charge("k", **CHARGE)
    p.clock.advance(fact_seconds(fact) - 1)
    assert p.charge("k", **CHARGE).replayed
    p.clock.advance(1)
    assert not p.charge("k", **CHARGE).replayed
    assert p.total_charged() == 80
    assert fact_seconds("stripe_v1_key_min_age") == 24 * 3600 and fact_seconds("stripe_v2_replay_window") == 30 * 86400


@pytest.mark.parametrize("call", ["inside", "before"])
@pytest.mark.parametrize("fault", [FaultPlan(lost_responses=[LostResponse()]), FaultPlan(crashes=[Crash("commit")])])
def test_a_key_derived_from_the_message_id_keeps_the_provider_at_one_charge(call, fault):
    keyed, unkeyed = PaymentProvider(), PaymentProvider()
    simulate(ProviderHandler(call, keyed=True), [RUNNING_EXAMPLE], faults=fault, provider=keyed)
    simulate(ProviderHandler(call, keyed=False), [RUNNING_EXAMPLE], faults=fault, provider=unkeyed)
    assert len(keyed.charges) == 1
    assert len(unkeyed.charges) == 2


def test_calling_before_the_transaction_repeats_the_call_on_a_lost_ack_and_inside_does_not():
    lost_ack = FaultPlan(lost_acks=[LostAck()])
    calls = {}
    for call in ("inside", "before"):
        result = simulate(ProviderHandler(call, keyed=False), [RUNNING_EXAMPLE], faults=lost_ack, provider=PaymentProvider())
        calls[call] = len(result.events("provider answered"))
        assert result.total_charged == 40
    assert calls == {"inside": 1, "before": 2}


def test_one_key_per_call_is_the_message_id_with_the_call_named():
    assert ProviderHandler().key_for("m-7f3") == "m-7f3:charge"
    assert ProviderHandler(keyed=False).key_for("m-7f3") is None


def test_a_run_without_a_provider_says_how_to_give_it_one():
    with pytest.raises(RuntimeError, match="provider=PaymentProvider"):
        simulate(ProviderHandler(), [RUNNING_EXAMPLE])


def test_after_an_unclear_500_only_looking_first_never_charges_twice():
    rows = {row["after a 500 under v1"]: list(row.values())[1:] for row in after_an_unclear_500()}
    assert rows == {"retry with the same key": [40, 0], "retry with a new key": [80, 40],
                    "same key, 25 hours later": [80, 40], "look the charge up, then decide": [40, 40]}


def test_v2_charges_once_after_every_kind_of_first_failure_and_v1_only_after_a_refusal():
    charged = {(row["first attempt"], row["rules"]): row["card charged ($)"] for row in retries_after_failure()}
    assert all(total == 40 for (failure, rules), total in charged.items() if rules == "stripe-v2")
    assert [total for (failure, rules), total in charged.items() if rules == "stripe-v1"] == [40, 0, 40]


def test_two_consumers_on_duckdb_can_both_call_the_provider_and_only_the_key_keeps_one_charge():
    from idemlib.explore import interleavings
    both_call = "AAABBBAAABBB"
    for keyed, charges in ((False, 2), (True, 1)):
        row = interleavings(ProviderHandler("inside", keyed=keyed), provider=PaymentProvider, schedules=[both_call]).iloc[0]
        assert (row["provider calls"], row["charges at provider"], row["charges"], row["conflicts"]) == (2, charges, 1, 1)
    one_after_the_other = interleavings(ProviderHandler("inside"), provider=PaymentProvider, schedules=["AAAAAABBBBBB"])
    assert one_after_the_other.iloc[0]["provider calls"] == 1
    with pytest.raises(ValueError, match="12 letters"):
        interleavings(ProviderHandler("inside"), schedules=["AB"])


def test_stripe_answers_a_key_still_in_progress_with_its_documented_409_and_a_shared_key_silently_replays():
    p = provider()
    p.begin("k", **CHARGE)
    assert p.charge("k", **CHARGE).status == fact_number("stripe_key_in_use_status") == 409
    shared = provider()
    shared.charge("m-7f3", **CHARGE)
    second = shared.charge("m-7f3", **CHARGE)  # a second, real $40 under the same key: no error at all
    assert (second.status, second.replayed, shared.total_charged()) == (200, True, 40)
    assert "409" not in behaviours()["stripe-v1"].assumed and "429" not in behaviours()["stripe-v1"].assumed


def test_what_the_model_assumes_is_marked_field_by_field():
    """A table of the rules marks each value that is the model's, so none passes for its source's (lesson 08)."""
    import dataclasses

    fields = {f.name for f in dataclasses.fields(behaviours()["stripe-v1"])}
    for rules in behaviours().values():
        assert rules.modelled <= fields and rules.modelled and rules.assumed
    # Stripe documents neither v2 status; the v1 409 is from Stripe's errors reference, its mismatch status is not.
    assert {"mismatch_status", "in_progress_status"} <= behaviours()["stripe-v2"].modelled
    assert behaviours()["stripe-v1"].modelled == {"mismatch_status"} and behaviours()["stripe-v1"].retention_is_floor


@pytest.mark.parametrize(("status", "replayed"), [(429, False), (401, False), (409, False), (500, True), (400, True)])
def test_v1_replays_only_an_error_saved_once_execution_began(status, replayed):
    # 429, 401 and 409 are answered before Stripe's idempotency layer: a retry with the key is a fresh attempt.
    assert behaviours()["stripe-v1"].replays(status) is replayed
    assert behaviours()["stripe-v2"].replays(status) is False  # v2 runs failed work again


def test_a_key_of_a_long_message_id_stays_within_stripes_limit_and_apart_from_every_short_one():
    limit = fact_number("stripe_key_max_length")
    longest, other = "7" * 255, "7" * 254 + "8"  # the longest IDs the inbox admits (idemlib.messages.LONGEST_ID)
    keys = {ProviderHandler().key_for(message_id) for message_id in (longest, other, "m-7f3")}
    assert len(keys) == 3 and max(map(len, keys)) <= limit
    assert ProviderHandler().key_for("7" * (limit - len(":charge"))) == "7" * (limit - len(":charge")) + ":charge"
    p = provider()
    refused = p.charge("k" * (limit + 1), **CHARGE)
    assert refused.status == 400 and p.charges == [] and p.stored_keys() == {}  # refused before the key is kept
    run = simulate(ProviderHandler(), [Message.charge(longest, order_id=1042, amount=40)], provider=p)
    assert run.total_charged == p.total_charged() == 40


def test_a_message_id_a_header_cannot_carry_as_it_is_goes_into_the_key_as_its_digest():
    from idemlib.provider import key_of_call

    for message_id in ("zahlung-größe-7", "m-7f3\u00a0", "m\u20137f3"):  # the inbox admits each; a header client refuses it
        key = key_of_call(message_id, "charge")
        assert key.isascii() and key.isprintable() and key.endswith(":charge#sha256")
    assert len({key_of_call(m, "charge") for m in ("zahlung-größe-7", "zahlung-grösse-7")}) == 2
    assert key_of_call("m-7f3", "charge") == "m-7f3:charge"  # a header-safe ID is kept as it came


def test_a_lookup_by_the_key_finds_only_the_charge_that_call_made():
    p = provider()
    p.charge("m-7f3:charge", **CHARGE)
    p.charge("m-7f3-fee:charge", order_id=1042, amount=5)
    assert [c["amount"] for c in p.charges_for(1042)] == [40, 5]  # by order: both, the first the $40
    assert [c["amount"] for c in p.charges_carrying("m-7f3-fee:charge")] == [5]
    assert p.charges_carrying("m-7f3:charge:2") == []


def test_a_day_late_replay_of_a_dead_lettered_message_charges_twice_inside_and_before_and_once_after_a_pending_row():
    from idemlib.provider_calls.placements import late_replays
    card = late_replays(25)["card ($)"]
    # A message reaches the dead-letter queue because its handling failed: inside, that rolled back our rows too.
    assert card["dead-lettered"].to_dict() == {"call inside, with key": 80, "call before, with key": 80,
                                               "pending row, then call": 40}
    assert card["committed"].to_dict() == {"call inside, with key": 40, "call before, with key": 80,
                                           "pending row, then call": 40}
    assert set(late_replays(1)["card ($)"]) == {40}  # within the key's lifetime every placement charges once


def test_two_consumers_at_once_both_call_before_and_after_a_pending_row_on_every_engine_and_inside_only_on_duckdb():
    from functools import partial

    from idemlib.provider_calls.placements import racing_consumers
    from idemlib.stores import PostgresPayments
    need_postgres()
    table = racing_consumers((DuckDBPayments, partial(PostgresPayments, lock_timeout="500ms")))
    assert table["provider calls"].to_dict() == {
        ("DuckDB", "call inside, with key"): 2, ("DuckDB", "call before, with key"): 2,
        ("DuckDB", "pending row, then call"): 2, ("PostgreSQL", "call inside, with key"): 1,
        ("PostgreSQL", "call before, with key"): 2, ("PostgreSQL", "pending row, then call"): 2}
    assert set(table["charges at provider"]) == set(table["charges"]) == {1}  # the key holds every one to one charge
