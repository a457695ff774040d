"""Every real server the course uses, by its short name: where it is found, and how the course starts its own.

Its own module, below :mod:`idemlib.servers.policy`, so the policy's list of what
``IDEMLIB_REQUIRE_SERVERS`` may name is this one, not a copy of it.
"""

from __future__ import annotations

from idemlib.servers import nats, postgres, valkey
from idemlib.servers.base import Server

POSTGRES = Server("PostgreSQL", "postgres", "IDEMLIB_POSTGRES_URL",
                  "postgresql://postgres:postgres@127.0.0.1:5432/idemlib", ".ci/start-postgres",
                  postgres.POSTGRES_KIND, postgres.version)
REDIS = Server("Redis", "redis", "IDEMLIB_REDIS_URL", "redis://127.0.0.1:6379/0", ".ci/start-redis",
               valkey.VALKEY_KIND, valkey.version)
NATS = Server("NATS JetStream", "nats", "IDEMLIB_NATS_URL", "nats://127.0.0.1:4222", ".ci/start-nats",
              nats.NATS_KIND, nats.version)
RABBITMQ = Server("RabbitMQ", "rabbitmq", "IDEMLIB_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F",
                  ".ci/start-rabbitmq")
SERVERS = {server.key: server for server in (POSTGRES, REDIS, NATS, RABBITMQ)}
"""Every real server, by its short name."""
OWN_KINDS = {server.key: server.kind for server in SERVERS.values() if server.kind is not None}
"""The servers the course can start by itself from pip, by short name."""
