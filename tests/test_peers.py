"""The real Powertools idempotency utility on the real Redis, crashed by SIGKILL between its steps."""

from __future__ import annotations

import os

import pytest
from conftest import need
import redis

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


def test_defaults_refuse_every_redelivery_after_a_crash_past_the_claim():
    p = peers()
    run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(), faults=FaultPlan(crashes=[Crash("charge")]))
    assert (len(run.charges), run.refused, len(run.dead_letters)) == (0, 4, 1)
    assert run.outcome == "charge lost"
    assert any("register_lambda_context" in warning for warning in run.warnings)


def test_a_registered_deadline_lets_a_takeover_charge_a_second_time():
    p = peers()
    run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(deadline_ms=50),
                           faults=FaultPlan(crashes=[Crash("mark completed")]))
    assert len(run.charges) == 2 and run.refused == 0 and run.outcome == "charged twice"
    # The takeover of an orphaned record leaves the library's lock key behind, with its own time to live.
    keys = set(run.records["key (after the run's prefix)"])
    assert any(key.endswith(":lock") for key in keys)


def test_a_crash_after_completion_or_a_lost_ack_gets_the_stored_result():
    p = peers()
    for plan in (FaultPlan(crashes=[Crash("ack")]), FaultPlan(lost_acks=[LostAck()])):
        run = p.run_powertools([RUNNING_EXAMPLE], p.PeerSettings(), faults=plan)
        assert len(run.charges) == 1 and run.outcome == "charged once"


def test_the_scenarios_the_lesson_measures():
    table = compare().powertools_scenarios()
    charged = table["charged ($)"].to_dict()
    assert charged == {
        "deadline, two crashes after the claim": 0,
        "expiry 1 s, ack lost, lease 2 s": 80,
        "ID reused for $50, payload validation off": 40,
        "ID reused for $50, payload validation on": 40,
        "no key, raise_on_no_idempotency_key off, ack lost": 80,
        "no key, raise_on_no_idempotency_key on": 0,
        "duplicate published, both copies held at once": 40,
    }
    assert table.loc["ID reused for $50, payload validation on", "rejected"] >= 1
    assert table.loc["ID reused for $50, payload validation off", "rejected"] == 0
    assert table.loc["no key, raise_on_no_idempotency_key on", "dead-lettered"] == 1
    # The orphan lock of the first takeover outlives the leases: every later delivery fails until it expires.
    assert table.loc["deadline, two crashes after the claim", "failed"] == 3
    raised = table["raised"].to_dict()
    assert raised["deadline, two crashes after the claim"] == "IdempotencyInconsistentStateError"
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
    assert outcomes.loc["crash after the claim", "Powertools, defaults"] == "charge lost"
    assert outcomes.loc["crash after the claim", "in-progress record, deadline 2 leases"] == "blocked"
    said = compare().compare_outcomes(table)
    assert said.loc["crash after the claim", "Powertools, defaults"] == "charge lost: 0 charges, 4 refused, dead-lettered"


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
    with pytest.raises(ValueError, match="deadline_ms"):
        p.PeerSettings(deadline_ms=-1)


def test_the_defaults_run_is_the_library_left_to_its_own_defaults():
    p = peers()
    defaults, settings = p.library_defaults(), p.PeerSettings()
    assert defaults["records expire after (s)"] == settings.expires_after_seconds == 3600
    assert (defaults["raise_on_no_idempotency_key"], defaults["payload validation"]) == (settings.raise_on_no_key, "off")
    assert not defaults["Lambda context registered (deadline)"] and settings.deadline_ms is None
