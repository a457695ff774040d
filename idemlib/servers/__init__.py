"""The real servers the course can use, where to find them, and what to say when one is missing.

Each server has an ``IDEMLIB_NAME_URL`` variable with a loopback default and a
``.ci/start-NAME`` script that installs and starts it on Debian or Ubuntu. Locally a
missing server is skipped (or replaced by a model) with a message saying how to
start it; where ``IDEMLIB_REQUIRE_SERVERS=1`` (CI), a missing server is an error.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Server:
    """One real server: its name in prose, its URL variable and default, and its start script."""

    name: str
    variable: str
    default_url: str
    start_script: str

    def url(self) -> str:
        """Where the course looks for this server: its variable, or the loopback default."""
        return os.environ.get(self.variable, self.default_url)

    def how_to_start(self) -> str:
        """One sentence telling a reader how to get this server running."""
        return (f"Start one with `sudo {self.start_script}` (Debian or Ubuntu: installs and starts it on loopback), "
                f"or point {self.variable} at a server of your own.")

    def unavailable(self, timeout: float = 2.0) -> str | None:
        """None when something accepts connections at this server's address; otherwise why not, and how to start one.

        A TCP connection is enough to tell "not running" from "running"; the clients
        report anything subtler (a wrong password, a missing feature) themselves.
        """
        parts = urlsplit(self.url())
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), timeout=timeout):
                return None
        except OSError as error:
            return f"{self.name} is not reachable at {self.url()} ({type(error).__name__}). {self.how_to_start()}"


RABBITMQ = Server("RabbitMQ", "IDEMLIB_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F", ".ci/start-rabbitmq")
NATS = Server("NATS JetStream", "IDEMLIB_NATS_URL", "nats://127.0.0.1:4222", ".ci/start-nats")


def require_servers() -> bool:
    """Whether a missing server is an error rather than a skip (CI sets ``IDEMLIB_REQUIRE_SERVERS=1``)."""
    return os.environ.get("IDEMLIB_REQUIRE_SERVERS", "") not in ("", "0")


class ServerMissing(RuntimeError):
    """A server the run needs is not there, and servers are required (``IDEMLIB_REQUIRE_SERVERS=1``)."""


def available(server: Server) -> bool:
    """True when ``server`` answers. When it does not, print why and how to start it, or raise
    :class:`ServerMissing` where servers are required, so a lesson can fall back to a model."""
    return ready(server.unavailable(), "Using the simulated model for this part instead.")


def ready(reason: str | None, otherwise: str) -> bool:
    """True when ``reason`` (why a server cannot be reached, from any ``..._unavailable()``) is None.

    Otherwise raise :class:`ServerMissing` where servers are required, or print the
    reason and ``otherwise``, what the lesson does instead.
    """
    if reason is None:
        return True
    if require_servers():
        raise ServerMissing(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
    print(f"{reason} {otherwise}")
    return False
