"""The real RabbitMQ and NATS JetStream, as lesson 07 uses them. Skipped locally without a server, failed in CI."""

from __future__ import annotations

import re

import pytest
from conftest import need

from idemlib.messages import Message
from idemlib.servers import NATS, RABBITMQ, Server

M7F3 = Message.charge("m-7f3", 1042, 40)


def need_server(server: Server) -> None:
    need(server.unavailable())


@pytest.fixture
def rabbit():
    need_server(RABBITMQ)
    from idemlib.brokers.rabbitmq import RabbitChannel

    with RabbitChannel(delivery_limit=2) as channel:
        yield channel


@pytest.fixture
def stream():
    need_server(NATS)
    from idemlib.brokers.jetstream import JetStreamChannel

    with JetStreamChannel() as channel:
        yield channel


def test_rabbitmq_redelivers_after_a_dropped_connection_with_the_flag_and_the_count(rabbit):
    rabbit.publish(M7F3, "m-7f3")
    first = rabbit.receive()
    assert (first.redelivered, first.count) == (False, 1)
    rabbit.drop(first)
    again = rabbit.receive()
    assert again.message == M7F3
    assert (again.redelivered, again.count) == (True, 2)  # x-delivery-count 1
    assert rabbit.ack(again)
    assert rabbit.receive() is None


def test_rabbitmq_stores_every_publish(rabbit):
    assert rabbit.publish(M7F3, "m-7f3") and rabbit.publish(M7F3, "m-7f3", retry=True)
    assert [rabbit.receive() is not None for _ in range(3)] == [True, True, False]


def test_rabbitmq_dead_letters_past_the_delivery_limit(rabbit):
    rabbit.publish(M7F3, "m-7f3")
    counts = []
    while (delivery := rabbit.receive()) is not None:
        counts.append(delivery.count)
        rabbit.drop(delivery)
    assert counts == [1, 2, 3]  # delivery-limit 2: redelivered twice, then dead-lettered
    [(message, headers)] = rabbit.dead_letters()
    assert message == M7F3
    assert headers["x-first-death-reason"] == "delivery_limit"


def test_rabbitmq_redelivered_flag_does_not_say_whether_the_first_attempt_committed():
    need_server(RABBITMQ)
    from idemlib.brokers.demos import redelivery_hint
    from idemlib.brokers.rabbitmq import RabbitChannel

    committed = redelivery_hint(RabbitChannel, M7F3, committed=True)
    not_committed = redelivery_hint(RabbitChannel, M7F3, committed=False)
    for key in ("redelivered flag", "delivery count"):
        assert committed[key] == not_committed[key]
    assert committed["charges before the redelivery"] == 1 and not_committed["charges before the redelivery"] == 0
    assert committed["charges after it, with the inbox"] == not_committed["charges after it, with the inbox"] == 1


def test_rabbitmq_consumer_timeout_closes_the_channel_and_requeues(rabbit):
    rabbit.publish(M7F3, "m-7f3")
    slow = rabbit.receive()
    rabbit.outlive_lease(slow)
    again = rabbit.receive()
    assert again.redelivered
    assert not rabbit.ack(slow)  # the slow consumer's channel is gone; its late ack is refused
    assert rabbit.ack(again)


def test_rabbitmq_queues_are_deleted_when_the_channel_closes():
    need_server(RABBITMQ)
    import pika.exceptions

    from idemlib.brokers.rabbitmq import RabbitChannel, _connect

    with RabbitChannel() as channel:
        name = channel.queue
    connection = _connect()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
        connection.channel().queue_declare(name, passive=True)
    connection.close()


def test_jetstream_deduplicates_inside_the_window_only(stream):
    assert stream.publish(M7F3, "m-7f3")
    assert not stream.publish(M7F3, "m-7f3", retry=True)
    stream.pass_window()
    assert stream.publish(M7F3, "m-7f3")
    assert [s.sequence for s in stream.stored] == [1, 1, 2]  # the duplicate is answered with the original's sequence
    assert stream.stream_state()["messages"] == 2


def test_jetstream_redelivers_after_the_ack_wait_with_the_count(stream):
    stream.publish(M7F3, "m-7f3")
    first = stream.receive()
    assert first.count == 1 and stream.receive(patience=0) is None  # nothing new while the ack wait runs
    stream.drop(first)
    again = stream.receive()
    assert (again.count, again.redelivered, again.message) == (2, True, M7F3)
    stream.ack(again)
    assert [d["stream sequence"] for d in stream.deliveries] == [1, 1]


def test_jetstream_replays_a_terminated_message_from_the_stream(stream):
    stream.publish(M7F3, "m-7f3")
    stream.give_up(stream.receive())
    assert stream.receive() is None
    stream.pass_window()
    assert stream.replay_dead_letters() == 1
    replayed = stream.receive()
    assert replayed.message == M7F3 and replayed.count == 1
    assert stream.deliveries[-1]["stream sequence"] == 2


def test_jetstream_stops_after_max_deliver_and_keeps_no_dead_letter():
    need_server(NATS)
    from idemlib.brokers.demos import crash_on_every_delivery
    from idemlib.brokers.jetstream import JetStreamChannel

    deliveries, dead = crash_on_every_delivery(lambda: JetStreamChannel(max_deliver=3), M7F3)
    assert list(deliveries["delivery count"]) == [1, 2, 3]
    assert dead == []  # the stream still holds the message; nothing moved it anywhere


def test_a_consumer_timeout_too_long_to_wait_for_fails_in_ci_and_is_stood_in_for_elsewhere(rabbit, monkeypatch):
    import idemlib.brokers.rabbitmq as adapter

    monkeypatch.setattr(adapter, "LEASE_WAIT_SECONDS", 0.05)  # shorter than the server's 1 s timeout
    rabbit.publish(M7F3, "m-7f3")
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", "1")
    first = rabbit.receive()
    with pytest.raises(adapter.LeaseNotExpired, match="consumer_timeout"):
        rabbit.outlive_lease(first)
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", "0")
    rabbit.drop(first)  # still held after the error; let it go back
    held = rabbit.receive()
    rabbit.outlive_lease(held)  # closes the channel itself, as the timeout would
    assert rabbit.receive().redelivered and rabbit.last_lease_seconds is None


def test_each_real_server_names_its_version_the_lesson_states_its_measurements_under():
    from idemlib.brokers.compare import jetstream, rabbitmq, which

    need_server(RABBITMQ)
    need_server(NATS)
    assert re.fullmatch(r"the real server at [\w.-]+:\d+, RabbitMQ \d+\.\d+\.\d+", which(rabbitmq()))
    assert re.fullmatch(r"the real server at [\w.-]+:\d+, NATS \d+\.\d+\.\d+", which(jetstream()))


def test_jetstream_streams_are_deleted_when_the_channel_closes():
    need_server(NATS)
    import nats
    import nats.js.errors

    from idemlib.brokers.jetstream import JetStreamChannel, run

    with JetStreamChannel() as channel:
        channel.publish(M7F3, "m-7f3")
        name = channel.stream

    async def look() -> None:
        connection = await nats.connect(NATS.url())
        try:
            await connection.jetstream().stream_info(name)
        finally:
            await connection.close()

    with pytest.raises(nats.js.errors.NotFoundError):
        run(look())


def test_rabbitmq_queues_are_deleted_even_after_an_error_closed_the_channel():
    need_server(RABBITMQ)
    import pika.exceptions

    from idemlib.brokers.rabbitmq import RabbitChannel, _connect

    with RabbitChannel() as channel:
        name = channel.queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel._channel.queue_declare(f"{name}-missing", passive=True)  # the broker closes the channel
    connection = _connect()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="NOT_FOUND"):
        connection.channel().queue_declare(name, passive=True)
    connection.close()


@pytest.mark.parametrize(("strategy", "room_taken"), [("at-most-once", 3), ("at-least-once", 2)])
def test_a_dead_letter_its_queue_cannot_take_is_dropped_at_most_once_and_kept_at_least_once(strategy, room_taken):
    need_server(RABBITMQ)
    from idemlib.brokers.rabbitmq import dead_letter_hop

    seen = dead_letter_hop(M7F3, strategy=strategy, room=2)
    assert seen["in the dead-letter queue once it exists"] == 0  # at-least-once retries only every 3 minutes
    # the queue refuses a publish once over its length; the dead letter it keeps for the retry counts against it
    assert seen["new publishes the source queue took (x-max-length 2)"] == room_taken


def test_the_adapter_declares_at_least_once_dead_lettering():
    need_server(RABBITMQ)
    import pika.exceptions

    from idemlib.brokers.rabbitmq import RabbitChannel, _connect, _quorum_queue

    with RabbitChannel(delivery_limit=2) as channel:
        connection = _connect()
        default = _quorum_queue(channel.dead_letter_queue, "at-most-once", **{"x-delivery-limit": 2})
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="x-dead-letter-strategy"):
            connection.channel().queue_declare(channel.queue, durable=True, arguments=default)
        connection.close()


def test_a_lost_ack_on_rabbitmq_looks_done_to_the_consumer_and_the_message_comes_back(rabbit):
    rabbit.publish(M7F3, "m-7f3")
    first = rabbit.receive()
    assert rabbit.ack(first, lost=True)  # AMQP 0-9-1 never answers an ack: nothing tells the consumer
    again = rabbit.receive()
    assert (again.redelivered, again.count) == (True, 2)


def test_jetstream_reports_what_the_server_answered_to_each_ack(stream):
    from idemlib.brokers.jetstream import run

    stream.publish(M7F3, "m-7f3")
    first = stream.receive()
    assert not stream.ack(first, lost=True)  # no answer: the consumer knows its ack did not land...
    assert stream.ack(first)  # ...acks again, and the server answers
    assert not stream.ack(first)  # the client will not ack one delivery twice
    stream.drop(first)
    assert stream.receive() is None  # the answered ack holds: no redelivery
    assert [a["server's answer"] for a in stream.acks] == [
        "no answer: the ack was lost", "ack taken", "refused by the client: this delivery was already acked"]
    stream.publish(M7F3, "m-7f3:second")
    held = stream.receive()
    run(stream._js.delete_consumer(stream.stream, "payments"))
    assert not stream.ack(held)
    assert stream.acks[-1]["server's answer"] == "no responders: the consumer is gone"


def test_jetstream_takes_a_late_ack_while_another_consumer_holds_the_message_and_rabbitmq_refuses_it():
    need_server(RABBITMQ)
    need_server(NATS)
    from idemlib.brokers.demos import late_ack_while_redelivered
    from idemlib.brokers.jetstream import JetStreamChannel
    from idemlib.brokers.rabbitmq import RabbitChannel

    nats_seen = late_ack_while_redelivered(JetStreamChannel, M7F3)
    assert (nats_seen["A's late ack"], nats_seen["B's delivery"], nats_seen["after B dies"]) == ("taken", 2, "nothing")
    rabbit_seen = late_ack_while_redelivered(RabbitChannel, M7F3)
    assert (rabbit_seen["A's late ack"], rabbit_seen["after B dies"]) == ("refused", "delivery 3")
    assert nats_seen["charges with the inbox"] == rabbit_seen["charges with the inbox"] == 1


def test_jetstream_fills_in_the_documented_defaults():
    need_server(NATS)
    from idemlib.brokers.jetstream import server_defaults
    from idemlib.facts import fact_number, fact_seconds

    assert server_defaults() == {"duplicate window (s)": fact_seconds("nats_duplicate_window_default"),
                                 "ack wait (s)": fact_seconds("nats_ack_wait_default"),
                                 "max deliver": fact_number("nats_max_deliver_default")}
