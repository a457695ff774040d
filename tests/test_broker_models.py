"""The modelled brokers: each deduplication window and key rule, inside and outside, and what still gets through."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from idemlib.brokers import MODELS, SOURCES, SQS_FIFO_CONTENT, Consumer, exactly_once_table, model_named, run_broker
from idemlib.brokers.models import (
    KAFKA_IDEMPOTENT,
    PUBSUB,
    SERVICE_BUS,
    SQS_FIFO,
    BrokerModel,
    asb_window,
    kafka_transaction_effects,
    pubsub_delivery,
)
from idemlib.facts import fact_seconds
from idemlib.messages import Message

M7F3 = Message.charge("m-7f3", 1042, 40)


def stored_after(model: BrokerModel, gap: float, *, key2: str = "m-7f3", body2: dict | None = None,
                 retry: bool = True) -> int:
    """Publish m-7f3, wait ``gap`` seconds, publish again; how many copies the queue delivers."""
    channel = model.open()
    channel.publish(M7F3, "m-7f3")
    channel.clock.advance(gap)
    channel.publish(Message("m-7f3", body2 or M7F3.body), key2, retry=retry)
    count = 0
    while (delivery := channel.receive()) is not None:
        channel.ack(delivery)
        count += 1
    return count


@pytest.mark.parametrize(("model", "window"), [(SQS_FIFO, fact_seconds("sqs_fifo_dedup_interval")),
                                                (SERVICE_BUS, fact_seconds("asb_dup_detection_default"))])
def test_an_id_window_drops_a_repeat_inside_it_and_stores_one_after_it(model, window):
    assert stored_after(model, window - 10) == 1
    assert stored_after(model, window + 10) == 2
    assert stored_after(model, 5, key2="m-7f3:again") == 2  # a new ID is a new message


def test_the_windows_come_from_the_facts():
    assert SQS_FIFO.window == 300 and SERVICE_BUS.window == 600
    assert asb_window(20) == 20 and asb_window(7 * 86400) == 7 * 86400


@pytest.mark.parametrize("seconds", [19, 7 * 86400 + 1])
def test_service_bus_refuses_a_window_outside_20_seconds_to_7_days(seconds):
    with pytest.raises(ValueError, match="between 20 seconds and 7 days"):
        asb_window(seconds)


def test_service_bus_basic_tier_has_no_duplicate_detection():
    with pytest.raises(ValueError, match="Basic tier"):
        asb_window(tier="Basic")


def test_content_based_deduplication_keys_on_the_body_not_the_id():
    assert stored_after(SQS_FIFO_CONTENT, 5, key2="another-id") == 1  # same bytes, other ID: dropped
    assert stored_after(SQS_FIFO_CONTENT, 5, body2={"order_id": 1042, "amount": 41}) == 2  # other bytes: kept
    assert stored_after(SQS_FIFO, 5, key2="another-id") == 2  # the ID rule keeps it


def test_content_based_deduplication_collapses_two_real_payments_with_the_same_bytes():
    assert stored_after(SQS_FIFO_CONTENT, 60, key2="m-8a1") == 1  # a second real $40 charge of order 1042, lost


def test_kafka_discards_only_the_producers_own_retry():
    assert stored_after(KAFKA_IDEMPOTENT, 1, retry=True) == 1
    assert stored_after(KAFKA_IDEMPOTENT, 86400, retry=True) == 1  # no time limit on the producer's own retry
    assert stored_after(KAFKA_IDEMPOTENT, 1, retry=False) == 2  # a new send is a new sequence number


def test_pubsub_does_not_deduplicate_publishes():
    assert PUBSUB.window is None
    assert stored_after(PUBSUB, 1) == 2


def test_a_model_refuses_a_nonsense_configuration():
    with pytest.raises(ValueError, match="key_rule"):
        BrokerModel("x", "guesswork", 10, "lease", "none")
    with pytest.raises(ValueError, match="positive"):
        replace(SQS_FIFO, window=0)
    with pytest.raises(KeyError, match="SQS FIFO"):
        model_named("MSMQ")
    with pytest.raises(ValueError, match="no duplicate sources"):
        replace(SQS_FIFO, claims=("wishful thinking",))
    with pytest.raises(ValueError, match="late_acks"):
        replace(SQS_FIFO, late_acks="sometimes")


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_model_redelivers_after_a_crash_and_after_a_lease_runs_out(model):
    runs = run_broker(model.open, M7F3).set_index("source")
    for source in ("consumer crash after commit, before ack", "lease expires while the handler works",
                   "dead-letter replay", "application resend after the window", "relay republish with a new ID"):
        assert runs.loc[source, "charges without inbox"] == 2, (model.name, source)
    assert (runs["charges with inbox"] == 1).all()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_source_a_feature_claims_is_removed(model):
    runs = run_broker(model.open, M7F3).set_index("source")
    assert set(runs.index[runs["claimed"]]) == set(model.claims)
    assert (runs.loc[list(model.claims), "charges without inbox"] == 1).all()


def test_the_table_of_the_five_models():
    consumer = Consumer()
    table = exactly_once_table([run_broker(model.open, M7F3, consumer) for model in MODELS])
    assert list(table.index) == list(SOURCES)
    assert list(table.loc["client library's own retry"]) == [
        "removed", "removed", "reached", "removed", "removed", "caught (1 charge)"]
    # an application's second send is a new sequence number to Kafka, the same ID to the windows
    assert list(table.loc["application resend inside the window"]) == [
        "removed", "removed", "reached", "reached", "reached", "caught (1 charge)"]
    # every model's broker answers acks, so a consumer whose ack was lost acks again: no copy is made at all,
    # and no broker is credited with removing one
    assert (table.loc["ack lost on the way"].iloc[:-1] == "not redelivered: ack answered").all()
    later = ["application resend after the window", "relay republish with a new ID",
             "consumer crash after commit, before ack", "lease expires while the handler works", "dead-letter replay"]
    assert (table.loc[later].drop(columns="with the inbox (any broker)") == "reached").all().all()
    assert (table["with the inbox (any broker)"] == "caught (1 charge)").all()


def test_a_lost_ack_reaches_the_consumer_where_acks_are_not_answered():
    from idemlib.brokers.compare import RABBITMQ_MODEL

    runs = run_broker(RABBITMQ_MODEL.open, M7F3).set_index("source")
    assert runs.loc["ack lost on the way", "charges without inbox"] == 2
    assert runs.loc["ack lost on the way", "charges with inbox"] == 1


def test_pubsub_refuses_an_expired_ack_id_and_redelivers_nothing_after_a_successful_ack():
    from idemlib.brokers.demos import deadline_then_ack

    seen = deadline_then_ack(PUBSUB, M7F3)["what happened"]
    assert list(seen) == ["delivery 1", "nothing", "delivery 2", "ack failed", "ack succeeded", "nothing"]
    taking = deadline_then_ack(replace(PUBSUB, late_acks="taken"), M7F3)["what happened"]
    assert taking.iloc[3] == "ack succeeded"  # the setting alone makes the difference


def test_a_late_ack_from_a_superseded_delivery_is_refused_by_pubsub_and_the_message_comes_back():
    from idemlib.brokers.demos import late_ack_while_redelivered

    seen = late_ack_while_redelivered(PUBSUB.open, M7F3)
    assert (seen["A's late ack"], seen["after B dies"], seen["charges with the inbox"]) == ("refused", "delivery 3", 1)
    taken = late_ack_while_redelivered(replace(PUBSUB, late_acks="taken").open, M7F3)
    assert (taken["A's late ack"], taken["after B dies"]) == ("taken", "nothing")  # as JetStream does


@pytest.mark.parametrize(("output", "copies"), [("Kafka topic", 1), ("database", 2), ("database with offset", 1)])
def test_kafka_transactions_cover_effects_inside_kafka_only(output, copies):
    assert kafka_transaction_effects(output) == copies
    assert kafka_transaction_effects(output, crash_before_commit=False) == 1


def test_kafka_transactions_refuse_an_unknown_output():
    with pytest.raises(ValueError, match="Kafka topic"):
        kafka_transaction_effects("email")


def test_the_kafka_window_is_the_producer_session_not_a_time():
    assert math.isinf(KAFKA_IDEMPOTENT.window)


def test_a_model_dead_letters_a_poison_message_after_its_limit_and_replays_it_once():
    from functools import partial

    from idemlib.brokers.compare import RABBITMQ_MODEL
    from idemlib.brokers.demos import crash_on_every_delivery
    from idemlib.brokers.models import ModelChannel

    deliveries, dead = crash_on_every_delivery(partial(ModelChannel, RABBITMQ_MODEL, max_deliveries=3), M7F3)
    assert list(deliveries["delivery count"]) == [1, 2, 3]
    assert dead == [{"reason": "no ack before the lease expired", "deliveries": 3}]
    channel = ModelChannel(RABBITMQ_MODEL, max_deliveries=1)
    channel.publish(M7F3, "m-7f3")
    channel.drop(channel.receive())
    assert channel.receive() is None  # the one delivery allowed is spent: dead-lettered
    assert channel.replay_dead_letters() == 1 and channel.replay_dead_letters() == 0
    assert channel.receive().message == M7F3


def test_pubsub_exactly_once_holds_for_pull_subscriptions_in_one_region_only():
    assert pubsub_delivery("pull", 1).startswith("exactly-once delivery")
    assert pubsub_delivery("pull", 2).startswith("at-least-once only")
    assert pubsub_delivery("push", 1).startswith("no exactly-once delivery")
    for subscription, regions in (("streaming", 1), ("pull", 0), ("pull", True)):
        with pytest.raises(ValueError, match="subscription|regions"):
            pubsub_delivery(subscription, regions)


def test_the_experiments_that_need_a_real_server_say_so_when_none_runs(monkeypatch):
    import idemlib.brokers.compare as compare

    monkeypatch.setattr(compare, "_running", lambda server: False)
    assert "start it with .ci/start-rabbitmq" in compare.dead_letter_strategies(M7F3).iloc[0, 0]
    assert "start it with .ci/start-nats" in compare.jetstream_double_acks(M7F3).iloc[0, 0]
    settings = compare.jetstream_settings()
    assert list(settings["documented default (no server running)"]) == [120.0, 30.0, -1]
    assert compare.rabbitmq().func is compare.ModelChannel and compare.jetstream() == compare.JETSTREAM_MODEL.open


def test_the_grid_outlines_each_claimed_source_and_writes_every_outcome_in_words():
    import matplotlib

    matplotlib.use("Agg")
    from idemlib.brokers.compare import plot_source_grid

    results = [run_broker(model.open, M7F3) for model in MODELS]
    ax = plot_source_grid(results)
    outlines = [p for p in ax.patches if not p.get_fill()]
    assert len(outlines) == sum(len(model.claims) for model in MODELS)
    words = [t.get_text() for t in ax.texts]
    assert len(words) == len(MODELS) * len(SOURCES)
    kept = sum(int((r["charges without inbox"] == 1).sum()) for r in results)
    answered = sum(int(((r["charges without inbox"] == 1) & (r["source"] == "ack lost on the way")).sum()) for r in results)
    assert words.count("ack answered:\nnot redelivered") == answered == len(MODELS)
    assert words.count("removed by\nthe broker") == kept - answered
    assert all(label.endswith("(model)") for label in (t.get_text().replace("\n", " ") for t in ax.get_xticklabels()))


def test_every_model_but_jetstreams_refuses_a_late_ack():
    from idemlib.brokers.compare import JETSTREAM_MODEL, RABBITMQ_MODEL

    # SQS FIFO rejects an expired receipt handle, Service Bus raises MessageLockLostException, Kafka
    # CommitFailedException; among the course's brokers only JetStream takes a late ack.
    assert {m.name: m.late_acks for m in (*MODELS, RABBITMQ_MODEL)} == dict.fromkeys(
        [m.name for m in (*MODELS, RABBITMQ_MODEL)], "refused")
    assert JETSTREAM_MODEL.late_acks == "taken"
    channel = MODELS[0].open()
    channel.publish(M7F3, "m-7f3")
    first = channel.receive()
    channel.outlive_lease(first)
    assert channel.ack(first) is False


def test_content_based_deduplication_hashes_the_body_as_sent():
    from idemlib.brokers.models import SQS_FIFO_CONTENT
    from idemlib.messages import Message

    channel = SQS_FIFO_CONTENT.open()
    reordered = Message("m-7f3", {"amount": 40, "order_id": 1042})
    assert channel.publish(Message("m-7f3", {"order_id": 1042, "amount": 40}), "a")
    assert not channel.publish(Message("m-7f3", {"order_id": 1042, "amount": 40}), "b")  # the same bytes
    assert channel.publish(reordered, "c")  # the same event, its fields in another order: a new key
