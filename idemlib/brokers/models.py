"""Brokers that cannot run here, modelled as configurations of idemlib's at-least-once broker.

Each :class:`BrokerModel` is the course's :class:`~idemlib.broker.Broker` (leases,
acks, delivery counts, a dead-letter queue) with a deduplication window in front of
it on the way in. A model says three things: how long the window lasts, what the key
is (the rule that decides two sends are "the same"), and what its lease is called on
the way out, and how it treats acks: whether the broker answers one (so a lost ack is
noticed and sent again) and whether it takes the ack of a delivery whose lease has
run out. Every figure comes from ``data/facts.csv`` with its source; what a model
leaves out is written down in its ``assumptions``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from idemlib.broker import Broker
from idemlib.brokers.sources import SOURCES, BrokerDelivery
from idemlib.clock import VirtualClock
from idemlib.facts import WholeText, fact, fact_seconds, load_facts, whole_text
from idemlib.messages import Message
from idemlib.trace import Trace

KEY_RULES = ("deduplication ID", "message body", "producer sequence", "none")
"""How a model decides that a send repeats an earlier one: the ID the sender gives, a hash of the body,
the producer's own (producer ID, sequence number) pair, or not at all."""

LEASE_SECONDS = 30.0
"""The modelled lease on the virtual clock, the same for every model. Each service's own default is the
fact named by :attr:`BrokerModel.lease_default`; the length changes when an unacked message comes back,
not whether it does."""
REPLAY_DELAY_SECONDS = 6 * 3600.0
"""How long after the dead-lettering the operator replays the queue in the model: hours, long past every window."""


@dataclass(frozen=True)
class BrokerModel:
    """One broker's deduplication on the way in and its lease on the way out.

    ``window`` is in seconds (``math.inf``: no time limit, only the ``key_rule``
    stops it; None: no deduplication). ``acks_answered``: the broker answers every
    ack, so a consumer whose ack got lost learns it and acks again. ``late_acks``:
    "taken" when an ack after the lease ran out still settles the message,
    "refused" when only the current delivery's ack counts. ``claims`` names the
    duplicate sources the broker's feature says it removes; the lesson never scores
    a feature on the others. ``lease_default`` is the fact holding the service's own
    default lease. ``limits`` and ``assumptions`` are what the lesson prints next to
    the model, so a reader knows where it stops being true.
    """

    name: str
    key_rule: str
    window: float | None
    lease: str
    limits: str
    assumptions: tuple[str, ...] = ()
    window_source: str = ""
    lease_default: str = ""
    acks_answered: bool = True
    late_acks: str = "taken"
    claims: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.key_rule not in KEY_RULES:
            raise ValueError(f"{self.name}: key_rule must be one of {KEY_RULES}, not {self.key_rule!r}")
        if self.window is not None and self.window <= 0:
            raise ValueError(f"{self.name}: a deduplication window must be positive, or None for no deduplication")
        if self.late_acks not in ("taken", "refused"):
            raise ValueError(f"{self.name}: late_acks is 'taken' or 'refused', not {self.late_acks!r}")
        if unknown := set(self.claims) - set(SOURCES):
            raise ValueError(f"{self.name}: no duplicate sources named {sorted(unknown)}")

    def open(self) -> ModelChannel:
        """A fresh, empty queue with this configuration, on its own virtual clock."""
        return ModelChannel(self)


class ModelChannel:
    """A model broker driven through the :class:`~idemlib.brokers.sources.Channel` verbs on a virtual clock."""

    def __init__(self, model: BrokerModel, *, max_deliveries: int = 5) -> None:
        self.model, self.name = model, model.name
        self.clock = VirtualClock()
        self.trace = Trace(self.clock)
        self.broker = Broker(self.clock, self.trace, visibility_timeout=LEASE_SECONDS, max_deliveries=max_deliveries)
        self._seen: dict[str, float] = {}  # deduplication key -> when it was first accepted
        self._sequence = 0  # the producer's sequence number (Kafka's idempotent producer)
        self._given_up: list[Message] = []
        self._letters_taken = 0  # the broker's dead letters already handed to the operator
        self._replayed = 0
        self._latest: dict[int, int] = {}  # position -> receipt of its latest delivery

    @property
    def claims(self) -> tuple[str, ...]:
        """The duplicate sources the modelled feature claims to remove."""
        return self.model.claims

    def __enter__(self) -> ModelChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def key_for(self, message: Message, key: str, *, retry: bool) -> str | None:
        """The key this model deduplicates ``message`` on, or None where it does not deduplicate."""
        rule = self.model.key_rule
        if rule == "deduplication ID":
            return key
        if rule == "message body":
            return hashlib.sha256(body_as_sent(message)).hexdigest()
        if rule == "producer sequence":
            if not retry:  # a new send gets the next sequence number; the client's retry resends the last one
                self._sequence += 1
            return f"sequence {self._sequence}"
        return None

    def publish(self, message: Message, key: str, *, retry: bool = False) -> bool:
        """Accept ``message``, or drop it when its key was accepted inside the window."""
        self.clock.advance(1.0)  # a retry follows its send by a second or so
        dedup = self.key_for(message, key, retry=retry)
        now = self.clock.now()
        if dedup is not None and self.model.window is not None:
            first = self._seen.get(dedup)
            if first is not None and now - first < self.model.window:
                self.trace.record("broker", "duplicate dropped", str(message.message_id), 0, dedup)
                return False
            self._seen[dedup] = now
        self.broker.publish(message)
        return True

    def receive(self) -> BrokerDelivery | None:
        delivery = self.broker.receive("consumer")
        if delivery is None:
            return None
        self._latest[delivery.position] = delivery.receipt
        return BrokerDelivery(delivery.message, delivery.count, delivery.redelivered, delivery)

    def ack(self, delivery: BrokerDelivery, *, lost: bool = False) -> bool:
        """Settle the message; see :meth:`~idemlib.brokers.sources.Channel.ack` for ``lost``."""
        if lost:
            if self.model.acks_answered:
                return False  # no answer came: the consumer knows the ack did not land
            self._past_lease()  # nothing tells the consumer; the broker takes the message back
            return True
        handle = delivery.handle
        expired = self.clock.now() >= handle.lease_expires_at or self._latest[handle.position] != handle.receipt
        if expired and self.model.late_acks == "refused":
            return False
        return self.broker.ack(handle)

    def _past_lease(self) -> None:
        self.clock.advance(LEASE_SECONDS + 1.0)

    def drop(self, delivery: BrokerDelivery) -> None:
        self._past_lease()  # no ack comes; the lease runs out on its own

    def outlive_lease(self, delivery: BrokerDelivery) -> None:
        self._past_lease()

    def give_up(self, delivery: BrokerDelivery) -> None:
        # Settled with the broker like an ack, and kept aside as the dead-letter queue would keep it.
        self.broker.ack(delivery.handle)
        self._given_up.append(delivery.message)

    def dead_letters(self) -> list[tuple[Message, dict[str, Any]]]:
        """Take every message from the dead-letter queue, with why it is there."""
        new = list(self.broker.dead_letters)[self._letters_taken:]
        self._letters_taken += len(new)
        letters = [(letter.message, {"reason": letter.reason, "deliveries": letter.deliveries}) for letter in new]
        letters += [(message, {"reason": "given up by the consumer"}) for message in self._given_up]
        self._given_up = []
        return letters

    def replay_dead_letters(self) -> int:
        """Put every dead letter back as a new send (a replay is a new message to the broker)."""
        letters = [message for message, _ in self.dead_letters()]
        for message in letters:
            self._replayed += 1
            self.publish(message, f"{message.message_id}:replay-{self._replayed}")
        return len(letters)

    def pass_window(self) -> None:
        window = self.model.window
        self.clock.advance(REPLAY_DELAY_SECONDS if window is None or math.isinf(window) else window + 1.0)


def body_as_sent(message: Message) -> bytes:
    """The bytes a producer sends as ``message``'s body: its JSON in the order the producer wrote the fields.

    Content-based deduplication hashes these bytes, not a canonical form, so the same
    event serialised in another field order, or with a field added, hashes differently.
    """
    if isinstance(message.body, str):
        return message.body.encode()  # raw text on the wire is sent as it is
    return json.dumps(message.body).encode()


def asb_window(seconds: float | None = None, *, tier: str = "Standard") -> float:
    """An Azure Service Bus duplicate-detection window, checked against what the service allows.

    None gives the default; the Basic tier has no duplicate detection at all.
    """
    if tier == "Basic":
        raise ValueError("Azure Service Bus's Basic tier has no duplicate detection; use Standard or Premium")
    if seconds is None:
        return fact_seconds("asb_dup_detection_default")
    low, high = fact_seconds("asb_dup_detection_min"), fact_seconds("asb_dup_detection_max")
    if not low <= seconds <= high:
        raise ValueError(f"a duplicate-detection window must be between {fact('asb_dup_detection_min')} and "
                         f"{fact('asb_dup_detection_max')}, not {seconds:g} seconds")
    return seconds


def pubsub_delivery(subscription: str = "pull", regions: int = 1) -> str:
    """What Google Cloud Pub/Sub promises a subscription with exactly-once delivery turned on, in words.

    Exactly-once delivery exists for pull subscriptions only, and holds only while every
    subscriber connects to the service in one region; anywhere else the subscription is
    at-least-once, like every other queue in this lesson.
    """
    if subscription not in ("pull", "push"):
        raise ValueError(f"a Pub/Sub subscription is 'pull' or 'push', not {subscription!r}")
    if isinstance(regions, bool) or not isinstance(regions, int) or regions < 1:
        raise ValueError(f"regions counts where the subscribers connect: 1 or more, not {regions!r}")
    if subscription == "push":
        return "no exactly-once delivery: the feature is for pull subscriptions only"
    if regions > 1:
        return f"at-least-once only: subscribers connect in {regions} regions, and the guarantee holds in one"
    return "exactly-once delivery: no redelivery after a successful ack, none while the ack deadline runs"


_IDEMPOTENCE_SINCE = load_facts().loc["kafka_idempotence_default_since", "value"]
ON_THE_WAY_IN = ("client library's own retry", "application resend inside the window")
"""What an ID window on the way in claims to remove: the same ID sent again before the window closes."""

SQS_FIFO = BrokerModel(
    "SQS FIFO", "deduplication ID", fact_seconds("sqs_fifo_dedup_interval"), "visibility timeout",
    limits=f"only within the {fact('sqs_fifo_dedup_interval')} deduplication interval, and only on the way in; "
           "a message not deleted before its visibility timeout expires is received again",
    assumptions=("the producer sets MessageDeduplicationId to the event ID",
                 "one message group, so ordering never holds a message back",
                 "DeleteMessage answers, so a consumer whose delete got lost deletes again",
                 "a delete with an expired receipt handle is refused, as FIFO queues were seen to do (observed, not "
                 "documented by AWS; a standard queue takes it)"),
    window_source="sqs_fifo_dedup_interval", lease_default="sqs_visibility_timeout_default", late_acks="refused",
    claims=ON_THE_WAY_IN,
)
SQS_FIFO_CONTENT = replace(
    SQS_FIFO, name="SQS FIFO, content-based", key_rule="message body",
    assumptions=("content-based deduplication: the key is a SHA-256 hash of the body as sent, byte for byte "
                 "(the same event sent with its fields in another order, or a new timestamp, is a new key)",
                 "the producer sends no MessageDeduplicationId (SQS would use one it sends instead of the hash)",
                 *SQS_FIFO.assumptions[1:]),
    claims=(*ON_THE_WAY_IN, "relay republish with a new ID"),
)
SERVICE_BUS = BrokerModel(
    "Azure Service Bus", "deduplication ID", asb_window(), "peek-lock",
    limits=f"a window of {fact('asb_dup_detection_default')} for a queue made in the portal, "
           f"{fact('asb_dup_window_sdk_default')} for one made with the .NET SDK's CreateQueueOptions (other SDKs differ), "
           f"{fact('asb_dup_detection_min')} to {fact('asb_dup_detection_max')}; turned on only when the queue is "
           "created; none on the Basic tier; a peek-lock message whose lock expires is delivered again",
    assumptions=("duplicate detection is on (Standard or Premium tier), keyed on MessageId = the event ID",
                 "the window runs from the send the queue stored; a repeat it drops does not restart it",
                 "completing a message answers, so a consumer whose complete got lost completes again",
                 "completing after the lock expired is refused (MessageLockLostException)"),
    window_source="asb_dup_detection_default", lease_default="asb_lock_duration_default", late_acks="refused",
    claims=ON_THE_WAY_IN,
)
PUBSUB = BrokerModel(
    "Pub/Sub exactly-once", "none", None, "acknowledgement deadline",
    limits="the consumer's side only: an ack answers whether it succeeded, no redelivery after a successful ack, "
           "and an ack whose deadline has expired (or that a newer delivery superseded) fails; pull subscriptions "
           "in one region only; a publisher's resend is a new message; a message whose deadline expires comes back",
    assumptions=("a pull subscription with exactly-once delivery on, subscribers in one region",
                 "the subscriber acks through the client library's ack-with-response call (a plain ack's failure "
                 "is a silent redelivery)",
                 "no redelivery after a successful ack or while the deadline runs: the base broker's behaviour"),
    lease_default="pubsub_ack_deadline_default", late_acks="refused", claims=("ack lost on the way",),
)
KAFKA_IDEMPOTENT = BrokerModel(
    "Kafka idempotent producer", "producer sequence", math.inf, "poll interval (group rebalance)",
    limits="the client library's own retries only: the broker discards a resend by producer ID and sequence "
           "number; an application that sends again gets a new sequence number; a consumer that crashes after "
           "processing but before committing its offset reads the record again",
    assumptions=(f"enable.idempotence on: the Java client's default since Kafka {_IDEMPOTENCE_SINCE}; librdkafka's "
                 "(confluent-kafka for Python, Go, .NET) is off, Connect turns it off, conflicting settings turn "
                 "it off without an error",
                 "a restarted producer, or an application that sends again, gets a new sequence number",
                 "a consumer that stops polling for too long loses its partition; the next owner reads from the "
                 "last committed offset (this plays the lease)",
                 "the consumer commits each offset itself with commitSync, which answers, so a lost commit is "
                 "sent again (the Java default, enable.auto.commit, commits in the background, with no answer "
                 "per record)",
                 "a commit after the partition went to another member is refused (CommitFailedException)",
                 "the application keeps a dead-letter topic and replays it (Kafka has no dead-letter queue of its own)"),
    lease_default="kafka_max_poll_interval_default", late_acks="refused", claims=("client library's own retry",),
)
KAFKA_TRANSACTIONS = replace(
    KAFKA_IDEMPOTENT, name="Kafka transactions",
    limits="a consume-process-produce loop commits its output records and input offsets atomically, for effects "
           "inside Kafka only; for output written elsewhere, store the offset in the same place as the output",
    assumptions=("everything the idempotent producer's model assumes",
                 "a fixed transactional.id, so a restarted producer fences the old one (ProducerFencedException)",
                 "readers downstream set isolation.level=read_committed (the Java default, read_uncommitted, "
                 "reads aborted records too)",
                 "the consumer's effect (the charge) is a database row, outside Kafka's transaction"),
)

MODELS: tuple[BrokerModel, ...] = (SQS_FIFO, SERVICE_BUS, PUBSUB, KAFKA_IDEMPOTENT, KAFKA_TRANSACTIONS)
"""The five simulated brokers of the lesson's table, in its column order."""


def model_named(name: str) -> BrokerModel:
    """The model called ``name`` (also the content-based SQS variant), with the list of names if none is."""
    for model in (*MODELS, SQS_FIFO_CONTENT):
        if model.name == name:
            return model
    raise KeyError(f"no broker model named {name!r}; choose one of {[m.name for m in (*MODELS, SQS_FIFO_CONTENT)]}")


def model_table(models: tuple[BrokerModel, ...] = MODELS) -> pd.DataFrame:
    """What each model deduplicates on the way in, for how long, its lease with the service's own default, and its acks.

    "late ack": whether an ack after the lease ran out is taken or refused; "ack answered":
    whether the consumer learns that an ack arrived (SQS's DeleteMessage, Service Bus's
    complete, Pub/Sub's ack response, Kafka's offset commit all answer).
    """
    def window(model: BrokerModel) -> str:
        if model.window is None:
            return "none"
        if math.isinf(model.window):
            return "the producer's session"
        return fact(model.window_source) if model.window_source else f"{model.window:g} s"
    return pd.DataFrame([{"broker": m.name, "key on the way in": m.key_rule, "window": window(m),
                          "lease": m.lease, "its default": fact(m.lease_default) if m.lease_default else "",
                          "late ack": m.late_acks, "ack answered": "yes" if m.acks_answered else "no"}
                         for m in models]).set_index("broker")


def model_notes(models: tuple[BrokerModel, ...] = MODELS) -> WholeText:
    """Where each model's feature stops, then what the model assumes: one short row each, its text wrapped.

    A styled table, so the long notes wrap at a readable width in JupyterLab and on the site
    instead of running off as one line; ``.data`` is the plain frame.
    """
    rows = [(m.name, note, text) for m in models
            for note, text in [("stops", m.limits), *((f"assumes ({i})", a) for i, a in enumerate(m.assumptions, 1))]]
    frame = pd.DataFrame(rows, columns=["broker", "note", "text"]).set_index(["broker", "note"])
    return whole_text(frame, ["text"]).set_properties(subset=["text"], **{"max-width": "42em"})


def kafka_transaction_effects(output: str, *, crash_before_commit: bool = True) -> int:
    """How many copies of the consumer's output survive one crash in a consume-process-produce loop.

    ``output`` is where the effect goes: ``"Kafka topic"`` (written in the same
    transaction as the input offset, so an abort hides it from read_committed readers),
    ``"database"`` (outside the transaction: written, then the offset commit is lost
    and the record is read again), or ``"database with offset"`` (the offset stored
    in the same database transaction as the output, as Kafka's documentation suggests,
    so the re-read record is recognised and skipped).
    """
    if output not in ("Kafka topic", "database", "database with offset"):
        raise ValueError(f"output must be 'Kafka topic', 'database' or 'database with offset', not {output!r}")
    visible = 0
    committed_offset = -1  # where the consumer group resumes from
    stored_offset = -1  # the offset the database keeps next to its output
    for attempt in (1, 2):
        record_offset = committed_offset + 1
        if output == "database with offset" and record_offset <= stored_offset:
            committed_offset = record_offset  # already applied: skip it, move on
            continue
        crashed = crash_before_commit and attempt == 1
        if output == "Kafka topic":
            visible += 0 if crashed else 1  # an aborted transaction's records are never read_committed
        else:
            visible += 1  # the database commits on its own, crash or not
            stored_offset = record_offset if output == "database with offset" else stored_offset
        if not crashed:
            committed_offset = record_offset
            break
    return visible
