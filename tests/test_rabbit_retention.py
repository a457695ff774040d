"""A real RabbitMQ queue keeps a message nobody consumes, unless a TTL expires it into the dead-letter queue."""

from __future__ import annotations

import pytest
from conftest import need

from idemlib.servers import RABBITMQ


def test_a_queue_without_a_ttl_keeps_the_message_and_one_with_a_ttl_dead_letters_it_as_expired():
    need(RABBITMQ.unavailable())
    from idemlib.brokers.rabbit_retention import kept_or_expired

    table = kept_or_expired(ttl_ms=100, wait_s=0.3)
    kept, expired = table.iloc[0], table.iloc[1]
    assert (kept["read after 0.3 s"], kept["in its dead-letter queue"]) == ("the message", 0)
    assert (expired["read after 0.3 s"], expired["in its dead-letter queue"], expired["x-death reason"]) == \
        ("nothing", 1, "expired")


def test_a_wait_no_longer_than_the_ttl_is_refused():
    with pytest.raises(ValueError, match="longer than the TTL"):
        from idemlib.brokers.rabbit_retention import kept_or_expired

        kept_or_expired(ttl_ms=500, wait_s=0.5)
