"""The real servers the course uses, where it finds them, and what it says when one is missing.

PostgreSQL, Redis (Valkey) and NATS need no root: where ``IDEMLIB_NAME_URL`` is not
set and nothing listens at the default address, the course starts its own on first
use from the binaries its pip packages ship (:mod:`idemlib.servers.local`), and
``make lab`` / ``make test`` stop it when they end (``make stop`` stops any left).
RabbitMQ has no such package: ``sudo .ci/start-rabbitmq`` (Debian or Ubuntu), or
the lesson's model. ``IDEMLIB_REQUIRE_SERVERS`` turns a missing server from a
skip into an error (:mod:`idemlib.servers.policy`).
"""

from __future__ import annotations

from idemlib.servers import nats, postgres, valkey
from idemlib.servers.base import Server, Unavailable, forget
from idemlib.servers.policy import ServerMissing, ready, require_servers, required

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


def available(server: Server) -> bool:
    """True when ``server`` answers. When it does not, print why and how to start it, or raise
    :class:`ServerMissing` where it is required, so a lesson can fall back to a model."""
    return ready(server.unavailable(), "Using the simulated model for this part instead.")


__all__ = ["NATS", "OWN_KINDS", "POSTGRES", "RABBITMQ", "REDIS", "SERVERS", "Server", "ServerMissing", "Unavailable",
           "available", "forget", "ready", "require_servers", "required"]
