"""Lesson 01's exercises: a plan that charges m-7f3 three times, and the overcharge of a faulty day."""

from __future__ import annotations

import re
from decimal import Decimal

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.handlers import NaiveHandler
from idemlib.messages import payment_stream
from idemlib.sim import simulate


def _overcharge() -> tuple[int, int, int, int]:
    run = simulate(NaiveHandler(), payment_stream(200), faults=FaultPlan(ack_loss_rate=0.25, seed=7))
    extra = len(run.payments) - run.payments["message_id"].nunique()
    return run.total_charged - run.expected_total, run.total_charged, run.expected_total, extra


OVER, TOTAL, OWED, EXTRA_CHARGES = _overcharge()

BANKS = {
    "check_triple_charge": Bank(
        right=[
            (FaultPlan(lost_acks=[LostAck(1), LostAck(2)]),),
            (FaultPlan(lost_acks=[LostAck(delivery=1, message_id="m-7f3"), LostAck(delivery=2, message_id="m-7f3")]),),
            # a crash after the commit, before the ack, loses the ack just the same
            (FaultPlan(crashes=[Crash("ack", delivery=1), Crash("ack", delivery=2)]),),
            (FaultPlan(lost_acks=[LostAck(1)], crashes=[Crash("ack", delivery=2)]),),
            # delivery numbers as a pandas column gives them, and as digit strings
            (FaultPlan(lost_acks=[LostAck(np.int64(1)), LostAck(np.int64(2))]),),
            (FaultPlan(lost_acks=[LostAck("1")], crashes=[Crash("ack", delivery=" 2")]),),
            # a third delivery that dies before its charge costs nothing: the fourth charges and acks
            (FaultPlan(lost_acks=[LostAck(1), LostAck(2)], crashes=[Crash("charge", delivery=3)]),),
            # named faults in a tuple, with random settings that draw nothing for this consumer
            (FaultPlan(lost_acks=(LostAck(1), LostAck(2)), seed=12345, per_copy=True, response_loss_rate=0.5),),
            # the crash first and the lost ack second, and delivery numbers written as floats
            (FaultPlan(crashes=[Crash("ack", delivery=1)], lost_acks=[LostAck(2)]),),
            (FaultPlan(lost_acks=[LostAck(1.0), LostAck(2.0)]),),
            # an extra fault that cannot happen does no harm when the plan triples anyway
            (FaultPlan(lost_acks=[LostAck(1), LostAck(2), LostAck(3, message_id="m-8a1")]),),
        ],
        wrong=[
            Wrong((FaultPlan(lost_acks=[LostAck(1)]),), "Each extra charge"),
            Wrong((FaultPlan(crashes=[Crash("commit"), Crash("commit", delivery=2)]),), "Each extra charge"),
            Wrong((FaultPlan(lost_acks=[LostAck(1), LostAck(2), LostAck(3)]),), "too many"),
            # counted from 0: the first delivery is acked, so nothing is repeated
            Wrong((FaultPlan(lost_acks=[LostAck(2), LostAck(3)]),), "charged $40"),
            # a crash before the charge saves nothing, so only one extra charge
            Wrong((FaultPlan(crashes=[Crash("charge", delivery=1), Crash("ack", delivery=2)]),), "charged $80"),
            Wrong((FaultPlan,), "FaultPlan(...)"),
            Wrong((FaultPlan(lost_acks=[LostAck(n) for n in range(1, 6)]),), "dead-letter"),
            # faults for a message this run does not have never happen: the hint says so, not just "$40"
            Wrong((FaultPlan(lost_acks=[LostAck(1, message_id="m-8a1"), LostAck(2, message_id="m-8a1")]),),
                  "the only message in this run"),
            # a crash before a step the naive consumer does not have never happens either
            Wrong((FaultPlan(crashes=[Crash("acknowledge", delivery=1), Crash("acknowledge", delivery=2)]),), "names no step"),
            Wrong((FaultPlan(crashes=[Crash("Ack", delivery=1), Crash("Ack", delivery=2)]),), "names no step"),
            Wrong((FaultPlan(lost_acks=[LostAck(1)], crashes=[Crash("after commit", delivery=2)]),), "names no step"),
            Wrong(([LostAck(1), LostAck(2)],), "FaultPlan"),
            # the same mistakes in other spellings are still mistakes
            Wrong((FaultPlan(lost_acks=[LostAck(np.int64(2)), LostAck("3")]),), "charged $40"),
            Wrong((FaultPlan(lost_acks=[LostAck("one"), LostAck("two")]),), "charged $40"),
            # faults at a rate whose draws happen to triple m-7f3 ($120 here), but not when drawn afresh
            Wrong((FaultPlan(ack_loss_rate=0.6),), "random draws"),
            Wrong((FaultPlan(crash_rate=0.3, seed=5),), "random draws"),
            Wrong((FaultPlan(ack_loss_rate=0.6, seed=3, per_copy=True),), "random draws"),
            # the right two lost acks, plus a rate that may lose the third as well
            Wrong((FaultPlan(lost_acks=[LostAck(1), LostAck(2)], ack_loss_rate=0.3),), "random draws"),
        ],
    ),
    "check_overcharge": Bank(
        right=[(OVER,), (float(OVER),), (np.int64(OVER),), (str(OVER),), (f"${OVER:,}",),
               (np.float64(OVER),), (f" {OVER} ",), (f"{OVER} dollars",), (f"USD {OVER}",),
               (Decimal(OVER),), (f"{OVER}.00",), (f"$ {OVER:,}",)],
        wrong=[
            Wrong((TOTAL,), "everything charged"),
            Wrong((OWED,), "what the customers owe"),
            Wrong((-OVER,), "sign"),
            Wrong((OVER + 40,), "compare total_charged"),
            # the number of extra charges, a count, read as the answer in dollars
            Wrong((EXTRA_CHARGES,), "count of rows"),
            Wrong((str(EXTRA_CHARGES),), "count of rows"),
            Wrong(("a lot",), "number of dollars"),
            Wrong((True,), "number of dollars"),
            Wrong((np.bool_(True),), "number of dollars"),
            Wrong((np.int64(TOTAL),), "everything charged"),
            Wrong((str(OWED),), "what the customers owe"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_lucky_plans_of_the_bank_do_triple_as_given_so_only_fresh_draws_refuse_them():
    # Without this, a "lucky" wrong answer that did not even triple would be refused for the wrong reason.
    for plan in (FaultPlan(ack_loss_rate=0.6), FaultPlan(crash_rate=0.3, seed=5),
                 FaultPlan(ack_loss_rate=0.6, seed=3, per_copy=True),
                 FaultPlan(lost_acks=[LostAck(1), LostAck(2)], ack_loss_rate=0.3)):
        assert simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=plan).total_charged == 120


def test_no_hint_about_luck_names_the_deliveries_to_fault():
    from idemlib.course.exercises import check_triple_charge

    message = check_triple_charge(FaultPlan(ack_loss_rate=0.6)).message
    assert "LostAck" not in message and "delivery=" not in message and "seed" not in message.lower(), message


def test_no_hint_gives_the_overcharge_away():
    from idemlib.course.exercises import check_overcharge

    for wrong in (TOTAL, OWED, -OVER, OVER + 40, 0, OVER + 0.4, OVER - 0.4, EXTRA_CHARGES):
        message = check_overcharge(wrong).message
        # the learner's own 3,840.40 may be echoed; 3,840 alone, followed by no decimals, would give it away
        for shown in (f"${OVER}", f"${OVER:,}"):
            assert re.search(re.escape(shown) + r"(?!\d|\.\d)", message) is None, message
