"""Lesson 09's in-progress record: every crash point, takeovers, and deadlines against the lease."""

from __future__ import annotations

import pytest

from conftest import need_postgres
from idemlib.faults import Crash, FaultPlan
from idemlib.long_work.inprogress import (BACKED_OFF, CLAIM_LOST, COMPLETED, TAKEN_OVER, InProgressHandler, deadline_versus_lease,
                                inprogress_matrix, outcomes_by_engine, records_database, run_long)

LEASE = 30.0
SLOW = {"work": 45.0}  # the long work outlives one lease


@pytest.fixture(params=["DuckDB", "PostgreSQL"])
def engine(request) -> str:
    if request.param == "PostgreSQL":
        need_postgres()
    return request.param


# Each crash point of the five steps, and the lost ack: what each handler must do.
EXPECTED = {
    "deadline, key, row with completion": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": "blocked",
        "crash before call provider": "blocked", "crash before mark completed": "blocked",
        "crash before ack": "charged once", "ack lost": "charged once"},
    "no deadline": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": "charge lost",
        "crash before call provider": "charge lost", "crash before mark completed": "charge lost",
        "crash before ack": "charged once", "ack lost": "charged once"},
    "plain local insert": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": "blocked",
        "crash before call provider": "charged twice", "crash before mark completed": "charged twice",
        "crash before ack": "charged once", "ack lost": "charged once"},
    "no provider key": {
        "no fault": "charged once", "crash before claim": "charged once", "crash before work": "blocked",
        "crash before call provider": "blocked", "crash before mark completed": "charged twice",
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
    blocked = matrix[matrix["outcome"] == "blocked"]
    assert (blocked["refused"] == 1).all() and (blocked["blocked (leases)"] == 1.0).all()
    lost = matrix[matrix["outcome"] == "charge lost"]
    assert (lost["refused"] == 4).all() and (lost["dead-lettered"] == 1).all()


def test_the_record_ends_completed_with_the_providers_result(engine):
    database = records_database(engine)
    run = run_long(InProgressHandler(60.0), database=database)
    records = database.records()
    assert records[["message_id", "status", "result"]].values.tolist() == [["m-7f3", COMPLETED, "ch_81"]]
    assert run.card_charges == run.local_rows == 1


def test_a_slow_consumer_is_taken_over_and_the_derived_key_charges_the_card_once(engine):
    run = run_long(InProgressHandler(20.0), consumers=2, step_seconds=SLOW, database=records_database(engine))
    assert len(run.result.events(TAKEN_OVER)) >= 1
    assert len(run.result.events("provider answered")) >= 2, "the takeover repeats the call"
    assert run.card_charges == 1 and run.local_rows == 1
    assert len(run.result.events(CLAIM_LOST)) >= 1, "the slow consumer finds its claim gone and writes nothing"


def test_a_takeover_repeats_a_plain_local_insert_and_a_call_without_key():
    plain = run_long(InProgressHandler(20.0, local_write="own commit"), consumers=2, step_seconds=SLOW)
    assert plain.card_charges == 1 and plain.local_rows >= 2
    unkeyed = run_long(InProgressHandler(20.0, keyed=False), consumers=2, step_seconds=SLOW)
    assert unkeyed.card_charges >= 2 and unkeyed.local_rows == 1


def test_a_deadline_longer_than_the_work_makes_the_rival_back_off():
    run = run_long(InProgressHandler(60.0), consumers=2, step_seconds=SLOW)
    assert len(run.result.events(BACKED_OFF)) == 1 and len(run.result.events(TAKEN_OVER)) == 0
    assert run.outcome == "blocked" and len(run.result.events("provider answered")) == 1


def test_deadlines_shorter_equal_and_longer_than_the_lease():
    table = deadline_versus_lease((0.5, 1.0, 2.0, 10.0), lease=LEASE).set_index(["deadline / lease", "situation"])
    crashed = table.xs("crashed after its claim", level="situation")
    assert crashed["takeovers"].tolist() == [1, 1, 1, 0]
    assert crashed["outcome"].tolist() == ["charged once", "charged once", "blocked", "charge lost"]
    assert crashed.loc[10.0, "dead-lettered"] == 1 and crashed.loc[10.0, "card charges"] == 0
    slow = table.xs("slow, alive", level="situation")
    assert (slow.loc[[0.5, 1.0], "takeovers"] >= 1).all(), "a deadline shorter than the work hands it over while alive"
    assert (slow.loc[[2.0, 10.0], "takeovers"] == 0).all()
    assert (slow["card charges"] == 1).all() and (slow["local rows"] == 1).all()


def test_an_expired_record_is_new_work_again():
    run = run_long(InProgressHandler(10.0, expires_after=20.0), faults=FaultPlan(crashes=[Crash("ack")]))
    assert run.card_charges == 1, "the provider's key still remembers the call"
    assert run.local_rows == 2, "the expired record no longer stops the local write"


def test_bad_settings_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="local_write"):
        InProgressHandler(local_write="sometimes")
    with pytest.raises(ValueError, match="positive"):
        InProgressHandler(0)
    with pytest.raises(ValueError, match="engine"):
        records_database("Oracle")


def test_the_crash_matrix_plot_shows_blocked_cells_with_their_own_colour_and_hatching():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from idemlib.pictures import plots

    matrix = inprogress_matrix({"deadline 60 s": InProgressHandler(2 * LEASE)})
    ax = plots.plot_crash_matrix(matrix)
    colour, hatch, _ = plots.BLOCKED_OUTCOME["blocked"]
    blocked = [p for p in ax.patches if p.get_facecolor() == matplotlib.colors.to_rgba(colour)]
    assert len(blocked) == (matrix["outcome"] == "blocked").sum() == 3
    assert all(p.get_hatch() == hatch for p in blocked)
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "blocked"
    # Each cell also says its outcome in words: a cue that needs no colour vision.
    cells = [t.get_text() for t in ax.texts]
    assert [text.rsplit(": ", 1)[-1] for text in cells] == list(matrix["outcome"])
    plt.close("all")


def test_the_lesson_shows_the_same_outcomes_on_duckdb_and_postgresql():
    need_postgres()
    handlers = {"deadline 60 s": InProgressHandler(2 * LEASE)}
    table = outcomes_by_engine(inprogress_matrix(handlers), "deadline 60 s", handlers)
    assert list(table.columns) == ["DuckDB", "PostgreSQL"]
    assert table["DuckDB"].tolist() == table["PostgreSQL"].tolist() == list(EXPECTED["deadline, key, row with completion"].values())
