import pytest

from idemlib.messages import BadMessage, Charge, Message, parse_charge, payment_stream


def test_the_running_example_parses_into_its_charge():
    assert parse_charge(Message.charge("m-7f3", 1042, 40)) == Charge(order_id=1042, amount=40)


def test_a_json_text_body_is_accepted():
    assert parse_charge(Message("m-1", '{"order_id": 7, "amount": 5}')) == Charge(7, 5)


@pytest.mark.parametrize(
    ("message", "names"),
    [
        (Message(None, {"order_id": 1, "amount": 5}), ["message without an ID", "message_id", "dead-letter"]),
        (Message("  ", {"order_id": 1, "amount": 5}), ["message_id"]),
        (Message("m-1", "{oops"), ["m-1", "not valid JSON", "order_id"]),
        (Message("m-2", [1, 2]), ["m-2", "JSON object", "list"]),
        (Message("m-3", {"amount": 5}), ["m-3", "'order_id' is missing"]),
        (Message("m-4", {"order_id": 1, "amount": "40"}), ["m-4", "'amount'", "'40'"]),
        (Message("m-5", {"order_id": 1, "amount": True}), ["m-5", "'amount'"]),
        (Message("m-6", {"order_id": 1, "amount": -40}), ["m-6", "positive"]),
    ],
)
def test_bad_messages_are_refused_naming_the_message_and_the_field(message, names):
    with pytest.raises(BadMessage) as refused:
        parse_charge(message)
    for name in names:
        assert name in str(refused.value)


def test_a_payment_stream_is_the_same_for_the_same_seed_and_has_distinct_ids():
    first, again, other = payment_stream(50), payment_stream(50), payment_stream(50, seed=1)
    assert first == again
    assert first != other
    assert len({m.message_id for m in first}) == 50
    assert all(5 <= m.body["amount"] <= 100 for m in first)
