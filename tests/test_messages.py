import pytest

from idemlib.messages import BadMessage, Charge, Message, expected_total, parse_charge, payment_stream


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


@pytest.mark.parametrize(
    ("message", "names"),
    [
        # What the stores cannot hold: the payments table's INTEGER columns are 32-bit.
        (Message("m-7", {"order_id": 1042, "amount": 2**31}), ["m-7", "'amount'", "2,147,483,647"]),
        (Message("m-8", {"order_id": 10**20, "amount": 40}), ["m-8", "'order_id'", "2,147,483,647"]),
        # PostgreSQL refuses a NUL byte in text, and an index entry has a size limit.
        (Message("m-\x00-9", {"order_id": 1042, "amount": 40}), ["control character", "\\x00"]),
        (Message("m-" + "x" * 20_000, {"order_id": 1042, "amount": 40}), ["20002 characters", "at most 255"]),
        (Message("m-\ud800", {"order_id": 1042, "amount": 40}), ["UTF-8"]),
        (Message(7, {"order_id": 1042, "amount": 40}), ["message_id", "text", "int"]),
        # Nested 100,000 deep the JSON parser itself raises RecursionError.
        (Message("m-10", "[" * 100_000 + "]" * 100_000), ["m-10", "nested", "100000"]),
        (Message("m-11", '{"order_id": 1042, "amount": 40, "note": ' + "[" * 100 + "]" * 100 + "}"), ["m-11", "nested"]),
        (Message("m-12", b"\xff\xfe{}"), ["m-12", "UTF-8"]),
    ],
)
def test_messages_the_stores_cannot_hold_are_refused_before_they_reach_the_database(message, names):
    with pytest.raises(BadMessage) as refused:
        parse_charge(message)
    for name in names:
        assert name in str(refused.value)
    assert len(str(refused.value)) < 600  # the error names the fault; it does not echo a huge ID or body


def test_a_deeply_nested_value_in_a_field_is_refused_without_a_recursion_error():
    nested: object = 1
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(BadMessage, match="'amount'"):
        parse_charge(Message("m-13", {"order_id": 1042, "amount": nested}))


def test_the_largest_values_the_stores_hold_are_accepted():
    largest = 2**31 - 1
    assert parse_charge(Message("m-" + "é" * 253, {"order_id": largest, "amount": largest})) == Charge(largest, largest)
    assert parse_charge(Message("m-14", '{"order_id": 1, "amount": 5, "meta": {"a": [[1]]}}')) == Charge(1, 5)


def test_expected_total_counts_each_valid_message_once_including_json_text_bodies():
    stream = [
        Message.charge("m-1", 1, 40),
        Message("m-2", '{"order_id": 2, "amount": 15}'),   # valid, as JSON text
        Message("m-3", {"order_id": 3, "amount": -5}),     # malformed: never charged
        Message("m-4", {"order_id": 4}),                   # malformed
        Message("m-5", {"order_id": 5, "amount": 2**40}),  # beyond what the store holds
        Message.charge("m-1", 1, 40),                      # a duplicate
    ]
    assert expected_total(stream) == 55
