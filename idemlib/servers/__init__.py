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

from idemlib.servers.base import Server, Unavailable, forget
from idemlib.servers.catalogue import NATS, OWN_KINDS, POSTGRES, RABBITMQ, REDIS, SERVERS
from idemlib.servers.policy import ServerMissing, ready, require_servers, required


def available(server: Server) -> bool:
    """True when ``server`` answers. When it does not, print why and how to start it, or raise
    :class:`ServerMissing` where it is required, so a lesson can fall back to a model."""
    return ready(server.unavailable(), "Using the simulated model for this part instead.")


__all__ = ["NATS", "OWN_KINDS", "POSTGRES", "RABBITMQ", "REDIS", "SERVERS", "Server", "ServerMissing", "Unavailable",
           "available", "forget", "ready", "require_servers", "required"]
