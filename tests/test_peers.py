"""The real Powertools idempotency utility on the real Redis, killed by SIGKILL between its steps, on the run's clock."""

from __future__ import annotations

import os

import pytest
import redis
from conftest import need

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.messages import Message
from idemlib.stores.cache import redis_unavailable, redis_url


@pytest.fixture(autouse=True)
def need_redis() -> None:
    need(redis_unavailable())


def peers():
    from idemlib.long_work import powertools as module  # imported here: it starts a fork server only when a test needs it
    return module


def compare():
    from idemlib.long_work import side_by_side as module
    return module


def test_the_version_measured_is_the_version_installed():
    assert peers().POWERTOOLS_VERSION == peers().MEASURED_VERSION


def test_defaults_refuse_every_redelivery_after_a_kill_past_the_claim():
    p = peers()
    run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(), faults=FaultPlan(crashes=[Crash("charge")]))
    assert (len(run.charges), run.refused, len(run.dead_letters)) == (0, 4, 1)
    assert run.outcome == "stuck, dead-lettered"
    assert any("register_lambda_context" in warning for warning in run.warnings)


def test_a_registered_deadline_lets_a_takeover_charge_a_second_time():
    p = peers()
    run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(time_left=20.0),
                           faults=FaultPlan(crashes=[Crash("mark completed")]))
    assert len(run.charges) == 2 and run.refused == 0 and run.outcome == "charged twice"
    # The takeover of an orphaned record leaves the library's lock key behind, with its own time to live.
    keys = run.records.set_index("key (after the run's prefix)")["seconds to live"]
    lock = [key for key in keys.index if key.endswith(":lock")]
    assert len(lock) == 1 and keys[lock[0]] == 10.0, "taken at the redelivery, the run's last moment: 10 s left"


def test_the_library_reads_the_runs_clock_not_the_wall_clock():
    p = peers()
    run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(expires_after_seconds=10),
                           faults=FaultPlan(lost_acks=[LostAck()]))
    # The record lives 10 s of the run's clock; the redelivery comes 30 s later, however fast the machine is.
    assert len(run.charges) == 2
    stored = run.records["value"].iloc[0]
    assert f'"expiration": {int(p.EPOCH) + 30 + 10}' in stored


def test_an_error_raised_deletes_the_record_where_a_kill_leaves_it_in_progress():
    table = compare().raised_or_killed()
    assert table["outcome"].to_dict() == {
        "raises before the charge": "charged once", "killed before the charge": "stuck, dead-lettered",
        "raises after the charge": "charged twice", "killed after the charge": "stuck, dead-lettered"}
    assert table.loc["raises after the charge", "refused"] == 0
    assert table.loc["killed after the charge", ["charges", "refused"]].tolist() == [1, 4]


def test_a_deadline_nothing_enforces_lets_a_live_consumer_be_taken_over():
    table = compare().deadline_enforced(work_seconds=45.0, time_left=20.0)
    loose, enforced, roomy = table.index
    assert table.loc[loose, ["charges", "stopped"]].tolist() == [2, 0], "taken over while still working"
    assert table.loc[enforced, "charges"] == 0 and table.loc[enforced, "stopped"] == 5
    assert table.loc[enforced, "outcome"] == "stuck, dead-lettered"
    assert table.loc[roomy, ["charges", "refused", "outcome"]].tolist() == [1, 1, "once, after a wait"]


def test_a_crash_after_completion_or_a_lost_ack_gets_the_stored_result():
    p = peers()
    for plan in (FaultPlan(crashes=[Crash("ack")]), FaultPlan(lost_acks=[LostAck()])):
        run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(), faults=plan)
        assert len(run.charges) == 1 and run.outcome == "charged once"


def test_the_scenarios_the_lesson_runs():
    table = compare().powertools_scenarios()
    charged = table["charged ($)"].to_dict()
    assert charged == {
        "orphan taken over, killed again; lease 2 s, shorter than the lock": 0,
        "orphan taken over, killed again; lease 30 s, longer than the lock": 40,
        "records expire after 10 s, ack lost, lease 30 s": 80,
        "ID reused for $50, payload validation off": 40,
        "ID reused for $50, payload validation on": 40,
        "no key, raise_on_no_idempotency_key off, ack lost": 80,
        "no key, raise_on_no_idempotency_key on": 0,
        "duplicate published, both copies held at once": 40,
    }
    assert table.loc["ID reused for $50, payload validation on", "rejected"] >= 1
    assert table.loc["ID reused for $50, payload validation off", "rejected"] == 0
    assert table.loc["no key, raise_on_no_idempotency_key on", "dead-lettered"] == 1
    # The orphan lock of the first takeover outlives a short lease: every later delivery fails until dead-lettered.
    assert table.loc["orphan taken over, killed again; lease 2 s, shorter than the lock", "failed"] == 3
    assert table.loc["orphan taken over, killed again; lease 30 s, longer than the lock", "failed"] == 0
    raised = table["raised"].to_dict()
    assert raised["orphan taken over, killed again; lease 2 s, shorter than the lock"] == "IdempotencyInconsistentStateError"
    assert raised["ID reused for $50, payload validation on"] == "IdempotencyValidationError"
    assert raised["no key, raise_on_no_idempotency_key on"] == "IdempotencyKeyError"
    assert raised["duplicate published, both copies held at once"] == "IdempotencyAlreadyInProgressError"
    assert raised["ID reused for $50, payload validation off"] == "-"
    assert table.loc["duplicate published, both copies held at once", "refused"] >= 1


def test_side_by_side_puts_the_library_beside_the_course():
    p = peers()
    table = compare().side_by_side({"Powertools, defaults": p.PeerSettings()})
    outcomes = table.pivot(index="fault", columns="handler", values="outcome")
    assert set(outcomes["inbox (one transaction)"]) == {"charged once"}
    assert outcomes.loc["crash after the claim", "Powertools, defaults"] == "stuck, dead-lettered"
    assert outcomes.loc["crash after the claim", "in-progress record, deadline 2 leases"] == "once, after a wait"
    said = compare().compare_outcomes(table)
    assert said.loc["crash after the claim", "Powertools, defaults"] == "stuck, dead-lettered: 0 charges, 4 refused"


def test_a_run_leaves_no_keys_behind():
    p = peers()
    # Only this process's keys: other people's runs on the shared server come and go meanwhile.
    ours = f"idemlib-peer-{os.getpid()}-*"
    before = set(redis.Redis.from_url(redis_url()).scan_iter(match=ours, count=10_000))
    run = p.run_powertools([Message.charge("m-9c2", 7, 5)], p.PeerSettings())
    assert len(run.charges) == 1 and len(run.records) == 1  # the run did write its record and its charge
    assert set(redis.Redis.from_url(redis_url()).scan_iter(match=ours, count=10_000)) <= before


def test_settings_the_library_cannot_honour_are_refused_with_a_reason():
    p = peers()
    with pytest.raises(ValueError, match="at least 1"):
        p.PeerSettings(expires_after_seconds=0)
    with pytest.raises(ValueError, match="whole number"):
        p.PeerSettings(expires_after_seconds=0.5)
    with pytest.raises(ValueError, match="time_left"):
        p.PeerSettings(time_left=-1)
    with pytest.raises(ValueError, match="stopped_at_timeout"):
        p.PeerSettings(stopped_at_timeout=True)
    with pytest.raises(ValueError, match="raises"):
        p.run_powertools([RUNNING_EXAMPLE], raises="sometimes")


def test_the_defaults_run_is_the_library_left_to_its_own_defaults():
    p = peers()
    defaults, settings = p.library_defaults(), p.PeerSettings()
    assert defaults["records expire after (s)"] == settings.expires_after_seconds == 3600
    assert (defaults["raise_on_no_idempotency_key"], defaults["payload validation"]) == (settings.raise_on_no_key, "off")
    assert not defaults["Lambda context registered (deadline)"] and settings.time_left is None
