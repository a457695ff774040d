import pytest

from idemlib.faults import Crash, FaultPlan, LostAck


def test_a_named_crash_strikes_only_its_step_delivery_and_message():
    plan = FaultPlan(crashes=[Crash("commit", delivery=2, message_id="m-7f3")])
    assert plan.crashes_before("commit", "m-7f3", 2)
    assert not plan.crashes_before("commit", "m-7f3", 1)
    assert not plan.crashes_before("charge", "m-7f3", 2)
    assert not plan.crashes_before("commit", "m-8a1", 2)


def test_a_lost_ack_without_a_message_id_applies_to_every_message():
    plan = FaultPlan(lost_acks=[LostAck(delivery=1)])
    assert plan.loses_ack("m-7f3", 1) and plan.loses_ack("m-9c2", 1)
    assert not plan.loses_ack("m-7f3", 2)


def test_drawn_faults_depend_on_seed_message_and_delivery_not_on_call_order():
    plan = FaultPlan(ack_loss_rate=0.5, seed=3)
    keys = [(f"p-{n}", d) for n in range(200) for d in (1, 2)]
    forward = [plan.loses_ack(*key) for key in keys]
    backward = [plan.loses_ack(*key) for key in reversed(keys)][::-1]
    assert forward == backward
    assert 0.4 < sum(forward) / len(forward) < 0.6
    assert forward != [FaultPlan(ack_loss_rate=0.5, seed=4).loses_ack(*key) for key in keys]


def test_a_zero_rate_never_fires():
    plan = FaultPlan()
    assert not any(plan.loses_ack(f"p-{n}", 1) or plan.crashes_before("charge", f"p-{n}", 1) for n in range(500))


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_rates_outside_zero_to_one_are_refused(rate):
    with pytest.raises(ValueError, match="ack_loss_rate"):
        FaultPlan(ack_loss_rate=rate)
