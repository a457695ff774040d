"""What the broker sees, and what its retry settings can and cannot change."""

from __future__ import annotations

from idemlib import RUNNING_EXAMPLE, Crash, FaultPlan, LostAck, NaiveHandler, payment_stream, simulate
from idemlib.explore import broker_view, retry_settings


def test_the_broker_sees_deliveries_expiries_and_acks_but_not_what_the_consumer_did():
    crashed = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(crashes=[Crash("commit")]))
    ack_lost = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]))
    view = broker_view(ack_lost.trace)
    assert list(view["the broker"]) == ["published", "delivered", "lease expired", "delivered", "ack received"]
    assert list(view["delivery"]) == [0, 1, 1, 2, 2]
    assert view.equals(broker_view(crashed.trace))
    assert (crashed.total_charged, ack_lost.total_charged) == (40, 80)


def test_fewer_deliveries_or_a_longer_lease_make_duplicates_rarer_and_no_retries_loses_payments():
    grid = retry_settings(NaiveHandler(), payment_stream(30), FaultPlan(ack_loss_rate=0.2, crash_rate=0.05, seed=7),
                          leases=[30, 60], max_deliveries=[5, 2, 1], step_seconds={"charge": 40}, consumers=8)
    by = grid.set_index(["lease (s)", "max deliveries"])
    assert by.loc[(60, 2), "extra charges"] <= by.loc[(60, 5), "extra charges"]
    assert by.loc[(60, 2), "extra charges"] > 0, "more care never takes the duplicates to zero"
    assert by.loc[(60, 1), "extra charges"] == 0 and by.loc[(60, 1), "payments never made"] > 0
    assert by.loc[(60, 5), "payments never made"] == 0
    # at one delivery the duplicates do not vanish: they wait in the dead-letter queue, already charged
    assert 0 < by.loc[(60, 1), "dead-lettered, already charged"] < by.loc[(60, 1), "dead-lettered"]
    assert (by["dead-lettered, already charged"] <= by["dead-lettered"]).all()


def test_the_seconds_a_delivery_takes_are_each_step_s_own_or_the_simulator_s_default():
    from idemlib.explore import handler_seconds
    from idemlib.sim import DEFAULT_STEP_SECONDS

    needs = handler_seconds(NaiveHandler(), {"charge": 40})
    assert list(needs) == list(NaiveHandler().steps)
    assert needs["charge"] == 40 and sum(needs.values()) == 40 + 3 * DEFAULT_STEP_SECONDS
    # the lease that lesson 01 calls too short is shorter than a whole delivery on the simulator's clock
    slow = simulate(NaiveHandler(), [RUNNING_EXAMPLE], step_seconds={"charge": 40}, visibility_timeout=1000)
    assert slow.trace[slow.trace["event"] == "acked"]["time"].iloc[0] == sum(needs.values())
