"""Where to remember IDs: the business row, a key-value store, a cache with a TTL, and the payload guard."""

import uuid

import pytest

from idemlib.clock import VirtualClock
from idemlib.explore import RUNNING_EXAMPLE, crash_matrix
from idemlib.handlers import BusinessRowHandler, CacheGuardHandler, IdFirstHandler, InboxHandler
from idemlib.messages import Message
from idemlib.sim import simulate
from idemlib.stores import DuckDBPayments, IdReused
from idemlib.stores.keyvalue import (
    DEAD_LETTER,
    DEAD_LETTER_CODES,
    DONE,
    REPLY_LOST,
    RETRY,
    RETRY_CODES,
    KeyValuePayments,
    KeyValueTable,
    TransactionCanceled,
)


def outcomes(setup):
    table = crash_matrix({"store": setup}, label="setup")
    return dict(zip(table["fault"], table["outcome"]))


def test_the_business_row_catches_a_repeat_of_the_latest_message_in_its_transaction():
    assert set(outcomes(lambda: (BusinessRowHandler(), DuckDBPayments())).values()) == {"charged once"}


def test_the_business_row_remembers_only_the_latest_message_per_order():
    first, second = Message.charge("m-1", 1042, 40), Message.charge("m-2", 1042, 5)
    late_duplicate = simulate(BusinessRowHandler(), [first, second, first])
    assert late_duplicate.total_charged == 85  # m-1 charged twice: the row had moved on to m-2
    assert simulate(InboxHandler(), [first, second, first]).total_charged == 45


def test_a_conditional_put_then_a_separate_write_loses_the_charge_on_a_crash_between():
    found = outcomes(lambda: (IdFirstHandler(), KeyValuePayments()))
    assert found["crash before charge"] == "charge lost"


def test_transact_write_items_keeps_the_marker_and_the_payment_together():
    assert set(outcomes(lambda: (InboxHandler(), KeyValuePayments())).values()) == {"charged once"}


def test_two_open_transactions_charging_the_same_message_both_keep_their_charge():
    db = KeyValuePayments()
    first, second = db.session(), db.session()
    first.begin()
    second.begin()
    first.charge(1042, 40, "m-7f3")
    second.charge(1042, 40, "m-7f3")
    first.commit()
    second.commit()
    assert db.total_charged() == 80


def test_a_conditional_put_is_rejected_when_the_key_exists():
    table = KeyValueTable()
    assert table.put("msg#m-7f3", {"message_id": "m-7f3"}, if_absent=True)
    assert not table.put("msg#m-7f3", {"message_id": "m-7f3"}, if_absent=True)
    reasons = table.transact_write([("msg#m-7f3", {}, True), ("pay#1", {"amount": 40}, False)])
    assert reasons == {"msg#m-7f3": "ConditionalCheckFailed", "pay#1": "None"}
    assert "pay#1" not in table.items


def commit_m7f3(table: KeyValueTable) -> TransactionCanceled | None:
    """The inbox's transaction for m-7f3 on ``table``: the cancellation it meets, if any."""
    session = KeyValuePayments(table=table).session()
    session.begin()
    if session.record_message("m-7f3"):
        session.charge(1042, 40, "m-7f3")
    try:
        session.commit()
    except TransactionCanceled as cancelled:
        return cancelled
    return None


def test_only_a_failed_condition_on_the_marker_says_the_message_was_done_before():
    replayed = KeyValueTable(faults=[REPLY_LOST])  # applied, reply lost, called again: cancelled by its own marker
    cancelled = commit_m7f3(replayed)
    assert cancelled is not None and cancelled.marker_already_there and cancelled.verdict == DONE
    assert list(cancelled.reasons.values()) == ["ConditionalCheckFailed", "None"]
    assert [key for key in replayed.items if key.startswith("pay#")] != []  # the first attempt's charge stands
    for fault in RETRY_CODES:
        table = KeyValueTable(faults=[fault])
        cancelled = commit_m7f3(table)
        assert cancelled is not None and not cancelled.marker_already_there and cancelled.verdict == RETRY, fault
        assert cancelled.reasons[next(iter(cancelled.reasons))] == fault  # the marker's action names the cause
        assert table.items == {}  # nothing written: the message must be tried again
        assert commit_m7f3(table) is None and len(table.items) == 2  # the retry writes marker and charge


def test_a_validation_or_size_error_fails_every_attempt_so_its_verdict_is_dead_letter():
    for fault in DEAD_LETTER_CODES:
        table = KeyValueTable(faults=[fault])
        for _ in range(3):  # the same request meets the same error on every attempt
            cancelled = commit_m7f3(table)
            assert cancelled is not None and cancelled.verdict == DEAD_LETTER, fault
            assert list(cancelled.reasons.values()) == ["None", fault]
        assert table.items == {}
    business = TransactionCanceled({"msg#m-7f3": "None", "order#1042": "ConditionalCheckFailed"})
    assert business.verdict == DEAD_LETTER  # a business item's condition, not the marker's: not done
    mixed = TransactionCanceled({"msg#m-7f3": "TransactionConflict", "pay#1": "ValidationError"})
    assert mixed.verdict == DEAD_LETTER  # a retry would end in the validation error


def test_each_reading_of_a_cancellation_against_each_cause():
    from idemlib.stores.keyvalue_cancelled import CAUSES, EVERY_DONE, MARKER_OR_RETRY, THREE_WAY, cancelled_transactions

    table = cancelled_transactions(RUNNING_EXAMPLE)
    assert list(table.index) == list(CAUSES)
    assert list(table["CancellationReasons (marker, payment)"])[1:3] == [
        "ProvisionedThroughputExceeded, ProvisionedThroughputExceeded", "ThrottlingError, ThrottlingError"]
    assert list(table[EVERY_DONE]) == ["charged once"] + ["charge lost"] * 4
    assert list(table[MARKER_OR_RETRY]) == ["charged once"] * 4 + ["dead-lettered by the broker after 5 deliveries"]
    assert list(table[THREE_WAY]) == ["charged once"] * 4 + ["dead-lettered by the consumer, delivery 1"]


def test_an_expired_item_lingers_until_the_store_gets_round_to_deleting_it():
    clock = VirtualClock()
    table = KeyValueTable(clock=clock, seed=1)
    for n in range(50):
        table.put(f"msg#{n}", {"expires_at": 3600})
    clock.advance(3601)
    assert table.reap() < 10  # expired, but nearly all still there a second later
    clock.advance(2 * 86400)
    table.reap()
    assert table.items == {}


def test_set_nx_ex_claims_once_and_expires(cache):
    name = f"test:{uuid.uuid4().hex}"
    assert cache.set(name, "1", nx=True, ex=60)
    assert cache.set(name, "1", nx=True, ex=60) is None
    assert cache.get(name) is not None


def test_a_cache_outside_the_transaction_has_two_crash_windows(cache):
    def guard(order):
        return lambda: (CacheGuardHandler(cache, order, prefix=uuid.uuid4().hex), DuckDBPayments())

    claim_first, work_first = outcomes(guard("claim first")), outcomes(guard("work first"))
    assert claim_first["crash before commit"] == "charge lost"
    assert "charged twice" not in claim_first.values()
    assert work_first["crash before claim id"] == "charged twice"
    assert "charge lost" not in work_first.values()


def test_a_reused_id_is_dropped_silently_without_the_guard_and_dead_lettered_with_it():
    original, reused = Message.charge("m-7f3", 1042, 40), Message.charge("m-7f3", 2001, 99)
    silent = simulate(InboxHandler(), [original, reused])
    assert silent.total_charged == 40 and silent.dead_letters == []
    guarded = simulate(InboxHandler(check_payload=True), [original, reused], max_deliveries=3)
    assert guarded.total_charged == 40
    [dead] = guarded.dead_letters
    assert dead.message == reused and "different payload" in dead.reason


def test_the_guard_lets_a_true_duplicate_through_as_a_duplicate():
    result = simulate(InboxHandler(check_payload=True), [RUNNING_EXAMPLE, RUNNING_EXAMPLE])
    assert result.total_charged == 40 and result.dead_letters == []


def test_the_guard_names_the_id_and_what_to_do():
    session = DuckDBPayments().session()
    session.record_message("m-7f3", "1042:40")
    with pytest.raises(IdReused, match="m-7f3.*new ID"):
        session.record_message("m-7f3", "2001:99")


@pytest.mark.parametrize("database", [DuckDBPayments, KeyValuePayments], ids=["SQL", "key-value"])
def test_the_guard_refuses_a_reused_id_on_the_key_value_store_as_on_the_sql_stores(database):
    # Issue 10: on the key-value store the reused ID was skipped silently.
    original, reused = Message.charge("m-7f3", 1042, 40), Message.charge("m-7f3", 2001, 99)
    guarded = simulate(InboxHandler(check_payload=True), [original, reused, original], max_deliveries=2,
                       database=database())
    assert guarded.total_charged == 40
    [dead] = guarded.dead_letters
    assert dead.message == reused and "different payload" in dead.reason
    session = database().session()
    assert session.record_message("m-1", "1:5") is True
    assert session.record_message("m-1", "1:5") is False
    with pytest.raises(IdReused, match="m-1.*new ID"):
        session.record_message("m-1", "2:6")


def versioned(message_id, amount, version):
    return Message(message_id, {"order_id": 1042, "amount": amount, "version": version})


def test_a_versioned_business_row_refuses_a_late_duplicate_and_also_an_overtaken_real_message():
    m1, m2 = versioned("m-1", 40, 1), versioned("m-2", 5, 2)
    row = BusinessRowHandler(by="version")
    assert simulate(row, [m1, m2, m1]).total_charged == 45  # the late duplicate is refused
    assert simulate(BusinessRowHandler(), [m1, m2, m1]).total_charged == 85  # the last-ID row charges it again
    assert simulate(row, [m2, m1]).total_charged == 5  # a real message overtaken is refused too


def test_a_versioned_business_row_dead_letters_a_message_without_a_version():
    result = simulate(BusinessRowHandler(by="version"), [RUNNING_EXAMPLE])
    assert result.total_charged == 0 and "version" in result.dead_letters[0].reason
    with pytest.raises(ValueError, match="last id"):
        BusinessRowHandler(by="timestamp")


def test_a_late_ttl_deletion_keeps_catching_a_duplicate_until_the_marker_is_gone():
    clock = VirtualClock()
    table = KeyValueTable(clock=clock, seed=3)
    table.put("msg#m-7f3", {"expires_at": 3600})
    clock.advance_to(6 * 3600)
    assert not table.put("msg#m-7f3", {"expires_at": 7 * 3600}, if_absent=True)
    clock.advance_to(4 * 86400)
    assert table.put("msg#m-7f3", {"expires_at": 5 * 86400}, if_absent=True)


def test_a_cache_key_whose_time_to_live_passed_is_absent_at_once_unlike_a_late_dynamodb_marker(cache):
    from idemlib.stores.cache import let_pass

    name = f"ttl-test:{uuid.uuid4()}"
    assert cache.set(name, "1", nx=True, px=1000) is True
    assert cache.set(name, "1", nx=True, px=1000) is None  # still there: a duplicate is caught
    let_pass(cache, 1.05)
    assert cache.get(name) is None and cache.set(name, "1", nx=True, px=1000) is True  # gone the moment it expired


def test_cache_work_first_is_check_then_act_two_consumers_charge_twice_in_almost_every_interleaving():
    from idemlib.explore import in_every_order
    from idemlib.stores.cache import MemoryCache

    outcomes = {}
    for order in ("work first", "claim first"):
        played = in_every_order(lambda order=order: CacheGuardHandler(MemoryCache(), order), KeyValuePayments())
        outcomes[order] = ((played["outcome"] == "charged twice").sum(), len(played))
    assert outcomes == {"work first": (910, 916), "claim first": (0, 30)}
    # the same count on DuckDB, for a sample of orders: the database plays no part in the race
    from idemlib.explore import interleavings

    row = interleavings(CacheGuardHandler(MemoryCache(), "work first"), database=DuckDBPayments(),
                        schedules=["ABABABABABAB"]).iloc[0]
    assert row["outcome"] == "charged twice"


def test_one_handler_for_every_order_would_carry_a_caches_claims_from_one_order_into_the_next():
    from idemlib.explore import in_every_order
    from idemlib.stores.cache import MemoryCache

    shared = CacheGuardHandler(MemoryCache(), "work first")
    played = in_every_order(lambda: shared, KeyValuePayments())
    assert (played["outcome"] == "charged twice").sum() < 910  # later orders find the first order's claim


def test_lesson_06_shows_no_seed_in_any_output(executed_lesson):
    from idemlib.course.lessons import lesson_paths

    lesson = executed_lesson(next(path for path in lesson_paths() if path.name.startswith("06_")))
    texts = [str(output.get("text", "")) + "".join(str(output.get("data", {}).get(kind, ""))
                                                   for kind in ("text/plain", "text/html", "text/markdown"))
             for cell in lesson.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert [text for text in texts if "seed" in text.lower()] == []


def test_claim_first_loses_the_charge_when_the_claims_holder_dies_and_the_second_consumer_acks_on_finding_it():
    from idemlib.explore import places_to_remember, two_consumers_at_once
    from idemlib.faults import Crash, FaultPlan
    from idemlib.stores.cache import MemoryCache

    a_dies = FaultPlan(crashes=[Crash(before="charge", delivery=1)])
    rows = two_consumers_at_once(places_to_remember(MemoryCache()), faults=a_dies).set_index("setup")
    outcomes = rows["two consumers at once"]
    assert outcomes["cache, claim first"] == "charge lost"
    assert rows.loc["cache, claim first", "interleaving"].endswith("B:claim id → A:begin → B:ack")
    assert outcomes["key-value, put then write"] == "charge lost"
    for committed_with_the_work in ("same-database table", "business row", "key-value, TransactWriteItems"):
        assert outcomes[committed_with_the_work] == "charged once", committed_with_the_work
    lucky = two_consumers_at_once(places_to_remember(MemoryCache())).set_index("setup")["two consumers at once"]
    assert lucky["cache, claim first"] == "charged once"  # only because the scripted A finishes
