"""Lesson 07: brokers that call themselves exactly-once, tried against the eight ways a duplicate arrives.

``sources`` plays each duplicate source on any broker; ``models`` holds the brokers
that cannot run here (SQS FIFO, Azure Service Bus, Pub/Sub, Kafka) as configurations
of idemlib's at-least-once broker; ``rabbitmq`` and ``jetstream`` are thin adapters
for the real servers (imported on their own, so the models need neither client).
"""

from idemlib.brokers.models import MODELS, SQS_FIFO_CONTENT, BrokerModel, ModelChannel, model_named
from idemlib.brokers.sources import (
    SOURCES,
    BrokerDelivery,
    Channel,
    Consumer,
    exactly_once_table,
    run_broker,
    run_source,
    scorecard,
)

__all__ = [
    "MODELS", "SOURCES", "SQS_FIFO_CONTENT", "BrokerDelivery", "BrokerModel", "Channel", "Consumer", "ModelChannel",
    "exactly_once_table", "model_named", "run_broker", "run_source", "scorecard",
]
