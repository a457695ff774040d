"""Every check: blank says so, wrong gets a hint that does not reveal the answer, right confirms."""

import pytest

from idemlib import exercises as ex
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import NaiveHandler
from idemlib.messages import Message, payment_stream
from idemlib.sim import simulate

RIGHT = {
    "check_running_example": (RUNNING_EXAMPLE,),
    "check_triple_charge": (FaultPlan(lost_acks=[LostAck(1), LostAck(2)]),),
    "check_inbox_insert": ("INSERT INTO processed_messages VALUES (?) ON CONFLICT DO NOTHING",),
    "check_crash_point": ("ID first", "crash before charge", "charge lost"),
}
WRONG = {
    "check_running_example": (Message.charge("m-7f3", 1042, 80),),
    "check_triple_charge": (FaultPlan(crashes=[Crash("commit")]),),
    "check_inbox_insert": ("INSERT INTO processed_messages VALUES (?)",),
    "check_crash_point": ("ID first", "crash before ack", "charge lost"),
}


def overcharge():
    result = simulate(NaiveHandler(), payment_stream(200), faults=FaultPlan(ack_loss_rate=0.25, seed=7))
    return result.total_charged - result.expected_total, result.total_charged


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_a_right_answer_is_confirmed(name):
    feedback = getattr(ex, name)(*RIGHT[name])
    assert feedback and repr(feedback).startswith("✓ Correct")


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_gets_a_hint(name):
    feedback = getattr(ex, name)(*WRONG[name])
    assert not feedback and repr(feedback).startswith("✗ Not yet")
    assert "<b" in feedback._repr_html_()


@pytest.mark.parametrize("name", sorted(RIGHT))
def test_an_unanswered_exercise_says_so(name):
    blanks = (...,) + RIGHT[name][1:] if name != "check_crash_point" else (..., ..., "charge lost")
    feedback = getattr(ex, name)(*blanks)
    assert not feedback and "Not answered yet" in feedback.message


def test_the_overcharge_check_is_worked_out_by_the_simulator_and_never_printed():
    right, total = overcharge()
    assert right > 0
    assert ex.check_overcharge(right)
    for wrong in (total, right + 5, 0):
        feedback = ex.check_overcharge(wrong)
        assert not feedback and f"${right}" not in feedback.message


def test_the_triple_charge_hint_tells_too_few_from_too_many():
    assert "Each extra charge" in ex.check_triple_charge(FaultPlan(lost_acks=[LostAck(1)])).message
    too_many = FaultPlan(lost_acks=[LostAck(1), LostAck(2), LostAck(3)])
    assert "too many" in ex.check_triple_charge(too_many).message


def test_the_insert_check_explains_sql_that_does_not_run():
    assert "could not run" in ex.check_inbox_insert("INSERT INTO nowhere VALUES (?)").message
    assert "exactly one ?" in ex.check_inbox_insert("INSERT INTO processed_messages VALUES ('m')").message
