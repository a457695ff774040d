"""For any schedule of crashes and lost acks, the inbox charges exactly once."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler, NaiveHandler
from idemlib.messages import BadMessage, Message, parse_charge, payment_stream, valid_charges
from idemlib.sim import simulate

MESSAGES = payment_stream(3)
IDS = [m.message_id for m in MESSAGES]
MAX_DELIVERIES = 12


def schedules(handler):
    crash = st.builds(Crash, st.sampled_from(handler.steps), st.integers(1, 4), st.sampled_from(IDS))
    lost = st.builds(LostAck, st.integers(1, 4), st.sampled_from(IDS))
    return st.builds(FaultPlan, crashes=st.lists(crash, max_size=6), lost_acks=st.lists(lost, max_size=6))


@settings(max_examples=60, deadline=None)
@given(plan=schedules(InboxHandler()))
def test_the_inbox_charges_every_message_exactly_once(plan):
    result = simulate(InboxHandler(), MESSAGES, faults=plan, max_deliveries=MAX_DELIVERIES)
    assert result.dead_letters == []
    assert result.charges_per_message().tolist() == [1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(plan=schedules(NaiveHandler()))
def test_the_naive_consumer_never_charges_less_than_once(plan):
    result = simulate(NaiveHandler(), MESSAGES, faults=plan, max_deliveries=MAX_DELIVERIES)
    assert (result.charges_per_message() >= 1).all()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
HOSTILE_IDS = st.one_of(
    st.none(), st.integers(), st.text(st.characters(codec="utf-8") | st.sampled_from("\x00\ud800\n"), max_size=8),
    st.builds(lambda n: "x" * n, st.integers(250, 20_000)),
).filter(lambda message_id: not str(message_id).startswith("ok-"))
HOSTILE_BODIES = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries({"order_id": JSON_VALUES, "amount": JSON_VALUES}),
    st.fixed_dictionaries({"order_id": st.integers(-5, 2**40), "amount": st.integers(-5, 2**40)}),
    st.builds(json.dumps, st.fixed_dictionaries({"order_id": st.integers(1, 2**32), "amount": JSON_VALUES})),
    st.integers(1, 100_000).map(lambda depth: "[" * depth + "]" * depth),
    st.text(max_size=20), st.binary(max_size=20),
)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    hostile=st.lists(st.builds(Message, HOSTILE_IDS, HOSTILE_BODIES), max_size=4),
    slow_charge=st.sampled_from([1, 31, 40]),
    consumers=st.integers(1, 2),
    crash=st.sampled_from([None, *InboxHandler.steps]),
)
def test_any_mix_of_hostile_and_good_messages_ends_charged_once_or_dead_lettered(hostile, slow_charge, consumers, crash):
    good = [Message.charge(f"ok-{n}", 1000 + n, 5 * n) for n in range(1, 4)]
    stream = [hostile[0], *good[:2], *hostile[1:], good[2]] if hostile else good
    faults = FaultPlan(crashes=[Crash(crash, 1, "ok-1")] if crash else [])
    result = simulate(InboxHandler(), stream, faults=faults, consumers=consumers, max_deliveries=3,
                      step_seconds={"charge": slow_charge}, visibility_timeout=30)
    valid = valid_charges(stream)
    charged = result.payments["message_id"].value_counts()
    assert all(charged.get(message_id, 0) == 1 for message_id in valid)
    assert set(charged.index) <= set(valid)
    assert result.total_charged == result.expected_total
    refused = [m for m in stream if not _parses(m)]
    assert sorted(map(repr, (d.message for d in result.dead_letters))) == sorted(map(repr, refused))
    assert all(d.reason for d in result.dead_letters)


def _parses(message):
    try:
        parse_charge(message)
    except BadMessage:
        return False
    return True
