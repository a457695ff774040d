"""Lesson 09's in-progress record: the lease first, every crash point, takeovers, and the deadline as a safety net."""

from __future__ import annotations

import pytest
from conftest import need, need_postgres

from idemlib.broker import Broker
from idemlib.clock import VirtualClock
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan
from idemlib.long_work.inprogress import (
    BACKED_OFF,
    CLAIM_LOST,
    COMPLETED,
    ROW_TWICE,
    STUCK,
    TAKEN_OVER,
    WAITED,
    InProgressHandler,
    outcome_of_effects,
    records_database,
    run_long,
)
from idemlib.long_work.sizing import deadline_situations, inprogress_matrix, lease_choices, outcomes_by_engine
from idemlib.servers import NATS
from idemlib.trace import Trace

LEASE = 30.0
WORK = 45.0  # the long work outlives one lease
COPIES = [RUNNING_EXAMPLE, RUNNING_EXAMPLE]  # a publish retried by the producer


@pytest.fixture(params=["DuckDB", "PostgreSQL"])
def engine(request) -> str:
    if request.param == "PostgreSQL":
        need_postgres()
    return request.param


# Each crash point of the five steps, and the lost ack: what each handler must do.
EXPECTED = {
    "deadline, key, row with completion": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": WAITED,
        "crash before call provider": WAITED, "crash before mark completed": WAITED,
        "crash before ack": "charged once", "ack lost": "charged once"},
    "no deadline": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": STUCK,
        "crash before call provider": STUCK, "crash before mark completed": STUCK,
        "crash before ack": "charged once", "ack lost": "charged once"},
    "plain local insert": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": WAITED,
        "crash before call provider": ROW_TWICE, "crash before mark completed": ROW_TWICE,
        "crash before ack": "charged once", "ack lost": "charged once"},
    "no provider key": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": WAITED,
        "crash before call provider": WAITED, "crash before mark completed": "charged twice",
        "crash before ack": "charged once", "ack lost": "charged once"},
}
HANDLERS = {
    "deadline, key, row with completion": InProgressHandler(2 * LEASE),
    "no deadline": InProgressHandler(None),
    "plain local insert": InProgressHandler(2 * LEASE, local_write="own commit"),
    "no provider key": InProgressHandler(2 * LEASE, keyed=False),
}


def test_every_crash_point_of_every_variant_has_its_outcome(engine):
    matrix = inprogress_matrix(HANDLERS, engine)
    found = {(row.handler, row.fault): row.outcome for row in matrix.itertuples()}
    assert found == {(label, fault): outcome for label, faults in EXPECTED.items() for fault, outcome in faults.items()}
    waited = matrix[matrix["outcome"] == WAITED]
    assert (waited["refused"] == 1).all() and (waited["waited (leases)"] == 1.0).all()
    stuck = matrix[matrix["outcome"] == STUCK]
    assert (stuck["refused"] == 4).all() and (stuck["dead-lettered"] == 1).all()
    # Stuck after the provider call: the card was charged, and the picture's dollars say so.
    assert stuck["total charged"].tolist() == [0, 0, 40]


def test_the_record_ends_completed_with_the_providers_result(engine):
    database = records_database(engine)
    run = run_long(InProgressHandler(60.0), database=database)
    records = database.records()
    assert records[["message_id", "status", "result"]].values.tolist() == [["m-7f3", COMPLETED, "ch_81"]]
    assert run.card_charges == run.local_rows == 1


def test_a_lease_shorter_than_the_work_spends_a_delivery_with_no_fault_and_sizing_or_extending_it_does_not():
    table = lease_choices(WORK, lease=LEASE)
    short, sized, extended = table.index
    assert table.loc[short, ["deliveries", "refused"]].tolist() == [2, 1]
    assert table.loc[sized, ["deliveries", "refused", "extensions"]].tolist() == [1, 0, 0]
    assert table.loc[extended, ["deliveries", "refused", "extensions"]].tolist() == [1, 0, 3]
    assert (table["card charges"] == 1).all() and (table["provider calls"] == 1).all()


def test_an_extension_moves_the_lease_and_a_lease_that_ran_out_cannot_be_extended():
    clock = VirtualClock()
    broker = Broker(clock, Trace(clock), visibility_timeout=LEASE)
    broker.publish(RUNNING_EXAMPLE)
    delivery = broker.receive("consumer A")
    clock.advance_to(20.0)
    assert broker.extend(delivery)
    assert broker.next_lease_expiry() == 50.0
    clock.advance_to(40.0)
    assert broker.receive("consumer B") is None, "the old lease's moment passed without a redelivery"
    clock.advance_to(50.0)
    rival = broker.receive("consumer B")
    assert rival is not None and rival.count == 2
    assert not broker.extend(delivery), "A's lease has moved on to B"


def test_an_in_progress_ack_keeps_the_real_jetstream_from_redelivering_to_a_consumer_still_at_work():
    need(NATS.unavailable())
    from idemlib.long_work.jetstream_lease import extend_on_jetstream

    table = extend_on_jetstream(ack_wait=1.0, hold=2.2)
    plain, extended = table.index
    assert table.loc[plain, "deliveries"] == 2 and table.loc[plain, "redelivered while held"].startswith("yes")
    assert table.loc[extended, "deliveries"] == 1 and table.loc[extended, "redelivered while held"] == "no"
    assert (table["left unacked"] == 0).all(), "the last delivery's ack, confirmed, leaves nothing pending"


def test_a_deadline_shorter_than_the_work_lets_a_copy_take_over_live_work_and_the_derived_key_charges_once(engine):
    handler = InProgressHandler(20.0, extend_lease=True, work_parts=3)
    run = run_long(handler, COPIES, consumers=2, work_seconds=WORK, database=records_database(engine))
    assert len(run.result.events(TAKEN_OVER)) >= 1
    assert len(run.result.events("provider answered")) >= 2, "the takeover repeats the call"
    assert run.card_charges == 1 and run.local_rows == 1
    assert len(run.result.events(CLAIM_LOST)) >= 1, "the live consumer finds its claim gone and writes nothing"


def test_a_takeover_repeats_a_plain_local_insert_and_a_call_without_key():
    plain = run_long(InProgressHandler(20.0, local_write="own commit", extend_lease=True, work_parts=3), COPIES,
                     consumers=2, work_seconds=WORK)
    assert plain.card_charges == 1 and plain.local_rows >= 2 and plain.outcome == ROW_TWICE
    unkeyed = run_long(InProgressHandler(20.0, keyed=False, extend_lease=True, work_parts=3), COPIES,
                       consumers=2, work_seconds=WORK)
    assert unkeyed.card_charges >= 2 and unkeyed.local_rows == 1 and unkeyed.outcome == "charged twice"


def test_a_deadline_longer_than_the_work_makes_the_copy_back_off():
    run = run_long(InProgressHandler(60.0, extend_lease=True, work_parts=3), COPIES, consumers=2, work_seconds=WORK)
    assert len(run.result.events(BACKED_OFF)) >= 1 and len(run.result.events(TAKEN_OVER)) == 0
    assert run.outcome == WAITED and len(run.result.events("provider answered")) == 1


def test_deadlines_shorter_and_longer_than_the_work_and_than_the_brokers_patience():
    table = deadline_situations((15.0, 30.0, 60.0, 300.0), work_seconds=WORK, lease=LEASE)
    table = table.set_index(["deadline (s)", "situation"])
    crashed = table.xs("crashed after its claim", level="situation")
    assert crashed["takeovers"].tolist() == [1, 1, 1, 0]
    assert crashed["outcome"].tolist() == ["charged once", "charged once", WAITED, STUCK]
    assert crashed.loc[300.0, "dead-lettered"] == 1 and crashed.loc[300.0, "card charges"] == 0
    copy = table.xs("second copy while at work", level="situation")
    assert (copy.loc[[15.0, 30.0], "takeovers"] >= 1).all(), "a deadline shorter than the work hands live work over"
    assert (copy.loc[[60.0, 300.0], "takeovers"] == 0).all()
    assert (copy["card charges"] == 1).all() and (copy["local rows"] == 1).all()


def test_an_expired_record_is_new_work_again():
    run = run_long(InProgressHandler(10.0, expires_after=20.0), faults=FaultPlan(crashes=[Crash("ack")]))
    assert run.card_charges == 1, "the provider's key still remembers the call"
    assert run.local_rows == 2, "the expired record no longer stops the local write"


def test_each_outcome_has_one_meaning():
    assert outcome_of_effects((1, 1), 0) == "charged once"
    assert outcome_of_effects((1, 1), 2) == WAITED
    assert outcome_of_effects((0, 0), 4, stuck=True) == STUCK
    assert outcome_of_effects((1, 0), 4, stuck=True) == STUCK
    assert outcome_of_effects((1, 2), 0) == ROW_TWICE
    assert outcome_of_effects((2, 1), 1) == "charged twice"
    assert outcome_of_effects((0, 0), 0) == "charge lost"


def test_bad_settings_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="local_write"):
        InProgressHandler(local_write="sometimes")
    with pytest.raises(ValueError, match="positive"):
        InProgressHandler(0)
    with pytest.raises(ValueError, match="work_parts"):
        InProgressHandler(work_parts=0)
    with pytest.raises(ValueError, match="engine"):
        records_database("Oracle")


def test_the_crash_matrix_plot_gives_each_new_outcome_its_own_colour_and_hatching():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from idemlib.pictures import plots

    matrix = inprogress_matrix({"deadline 60 s": InProgressHandler(2 * LEASE), "no deadline": InProgressHandler(None),
                                "plain local insert": InProgressHandler(2 * LEASE, local_write="own commit")})
    ax = plots.plot_crash_matrix(matrix)
    for outcome, (colour, hatch, _) in plots.LONG_WORK_OUTCOMES.items():
        cells = [p for p in ax.patches if p.get_facecolor() == matplotlib.colors.to_rgba(colour)]
        assert len(cells) == (matrix["outcome"] == outcome).sum() > 0
        assert all(p.get_hatch() == hatch for p in cells)
    assert set(plots.LONG_WORK_OUTCOMES) <= {t.get_text() for t in ax.get_legend().get_texts()}
    # Each cell also says its outcome in words: a cue that needs no colour vision.
    cells = [t.get_text() for t in ax.texts]
    assert [text.rsplit(": ", 1)[-1] for text in cells] == list(matrix["outcome"])
    plt.close("all")


def test_the_lesson_shows_the_same_outcomes_on_duckdb_and_postgresql():
    need_postgres()
    handlers = {"deadline 60 s": InProgressHandler(2 * LEASE)}
    table = outcomes_by_engine(inprogress_matrix(handlers), "deadline 60 s", handlers)
    assert list(table.columns) == ["DuckDB", "PostgreSQL"]
    expected = list(EXPECTED["deadline, key, row with completion"].values())
    assert table["DuckDB"].tolist() == table["PostgreSQL"].tolist() == expected


def test_a_heartbeat_keeps_a_short_claim_from_a_copy_while_a_crashed_one_is_taken_over():
    from idemlib.long_work.sizing import heartbeat_situations

    table = heartbeat_situations(20.0).set_index(["claim", "situation"])
    without = table.loc["no heartbeat (lease extended)"]
    beating = table.loc["heartbeat every 15 s"]
    # A 20 s deadline against 45 s of work: without renewal the copy takes live work over again and again...
    assert without.loc["second copy while at work", "takeovers"] > 1
    assert without.loc["second copy while at work", "completions refused"] > 0
    # ...with it the copy is refused while the work runs, and the work runs once.
    assert beating.loc["second copy while at work", "takeovers"] == 0
    assert beating.loc["second copy while at work", "provider calls"] == 1
    assert beating.loc["crashed after its claim", "takeovers"] == 1
    assert (table["card charges"] == 1).all()


def test_a_heartbeat_needs_a_deadline():
    import pytest

    from idemlib.long_work.inprogress import InProgressHandler

    with pytest.raises(ValueError, match="deadline"):
        InProgressHandler(None, heartbeat=True)
