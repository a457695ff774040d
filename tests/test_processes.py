"""A real consumer process killed with SIGKILL between steps, on a DuckDB file."""

import pytest

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan
from idemlib.messages import Message
from idemlib.processes import kill_between_steps

SECOND = Message.charge("m-8a1", 1043, 15)
# m-7f3 is killed before each step of the inbox in turn, one delivery after another;
# m-8a1 after its commit, before the ack, so the next process finds it done.
KILLS = FaultPlan(crashes=[
    Crash("begin", 1, "m-7f3"), Crash("record id", 2, "m-7f3"), Crash("charge", 3, "m-7f3"),
    Crash("commit", 4, "m-7f3"), Crash("ack", 5, "m-7f3"), Crash("ack", 1, "m-8a1"),
])


@pytest.mark.parametrize("engine", ["DuckDB", "SQLite"])
def test_a_consumer_killed_before_every_step_charges_each_message_exactly_once_after_restarts(tmp_path, engine):
    result = kill_between_steps(str(tmp_path / "payments.db"), [RUNNING_EXAMPLE, SECOND], KILLS, engine=engine)
    assert dict(result.charges_per_message()) == {"m-7f3": 1, "m-8a1": 1}
    assert result.total_charged == result.expected_total == 55
    assert len(result.events("crashed")) == 6
    assert len(result.events("started")) == 7  # the first process and one after each kill
    # the deliveries killed after their commit found the charge on disk and skipped it
    assert set(result.events("duplicate skipped")["message_id"]) == {"m-7f3", "m-8a1"}
    assert result.dead_letters == []


def test_the_naive_consumer_killed_after_its_commit_charges_twice_for_real(tmp_path):
    result = kill_between_steps(str(tmp_path / "payments.duckdb"), [RUNNING_EXAMPLE],
                                FaultPlan(crashes=[Crash("ack", 1)]), handler="naive")
    assert result.total_charged == 80


def test_a_message_that_cannot_travel_to_the_process_is_refused_before_any_process_starts(tmp_path):
    with pytest.raises(ValueError, match="m-bytes.*JSON"):
        kill_between_steps(str(tmp_path / "payments.duckdb"), [Message("m-bytes", b"\x00")], FaultPlan())


@pytest.mark.parametrize(("settings", "names"), [({"engine": "PostgreSQL"}, ["DuckDB", "SQLite"]),
                                                 ({"handler": "fast"}, ["no handler named 'fast'", "inbox"])])
def test_impossible_settings_are_refused_before_any_process_starts(tmp_path, settings, names):
    with pytest.raises((ValueError, KeyError)) as refused:
        kill_between_steps(str(tmp_path / "payments.db"), [RUNNING_EXAMPLE], FaultPlan(), **settings)
    assert all(name in str(refused.value) for name in names)
