"""One real server: its name, the variable that points at it, its default address, and where the course finds it.

The order, first match wins: the ``IDEMLIB_NAME_URL`` variable; a server already
listening at the default address (one the learner or ``.ci/start-NAME`` runs);
the course's own, started on first use from a pip-installed binary (PostgreSQL,
Redis, NATS). The first time a process finds a server it prints one line saying
which server and version it is, so every lesson shows what its figures ran on.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from idemlib.servers import local
from idemlib.servers.local import CannotStart, Kind


class Unavailable(str):
    """Why a server cannot be reached, and how to get one: a sentence that knows which server it is about."""

    server: str

    def __new__(cls, text: str, server: str) -> Unavailable:
        reason = super().__new__(cls, text)
        reason.server = server
        return reason


@dataclass(frozen=True)
class Server:
    """One real server the course can use."""

    name: str
    key: str
    """Its short name in ``IDEMLIB_REQUIRE_SERVERS`` and ``python -m idemlib.servers``."""
    variable: str
    default_url: str
    start_script: str
    kind: Kind | None = None
    """How the course runs one from pip; None where only root and apt can (RabbitMQ)."""
    version: Callable[[str], str] | None = field(default=None, compare=False)
    """Asks a server at a URL for its name and version, for the line a lesson prints."""

    def url(self) -> str:
        """Where the course finds this server (see the module's docstring); starts the course's own if need be."""
        given = os.environ.get(self.variable)
        if given:
            _note(self, given, f"from {self.variable}")
            return given
        with _lock:
            known = _found.get(self)
            if known is not None and _answers(known):
                return known
            if self.kind is None or _answers(self.default_url):
                found, where = self.default_url, "already running there"
            elif self in _failed:
                return self.default_url
            else:
                try:
                    running = local.ensure(self.kind)
                except CannotStart as error:
                    _failed[self] = str(error)
                    return self.default_url
                found = running.url
                where = f"the course's own, run from the pip package {self.kind.package}; `make stop` stops it"
            _found[self] = found
        _note(self, found, where)
        return found

    def how_to_start(self) -> str:
        """One sentence telling a reader how to get this server running."""
        if self.kind is None:
            return (f"It has no pip package, so it needs root: `sudo {self.start_script}` installs and starts one on "
                    f"loopback (Debian or Ubuntu), or point {self.variable} at a server of your own.")
        failed = _failed.get(self)
        because = f" It could not: {failed}." if failed else ""
        return (f"The course starts its own from the pip package {self.kind.package} when nothing answers.{because} "
                f"Point {self.variable} at a server of your own, or run `sudo {self.start_script}` (Debian or Ubuntu).")

    def reason(self, error: str) -> Unavailable:
        """The sentence a lesson prints (or a test skips with) when the server at :meth:`url` does not answer."""
        return Unavailable(f"{self.name} is not reachable at {_where(self.url())} ({error}). {self.how_to_start()}",
                           self.key)

    def unavailable(self, timeout: float = 2.0) -> Unavailable | None:
        """None when something accepts connections at this server's address; otherwise why not, and how to start one.

        A TCP connection is enough to tell "not running" from "running"; the clients
        report anything subtler (a wrong password, a missing feature) themselves.
        """
        where = urlsplit(self.url())
        try:
            with socket.create_connection((where.hostname or "127.0.0.1", where.port or 0), timeout=timeout):
                return None
        except OSError as error:
            return self.reason(type(error).__name__)


_lock = threading.Lock()
_found: dict[Server, str] = {}
_failed: dict[Server, str] = {}
_noted: set[tuple[str, str]] = set()


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    return local.answers(parts.hostname or "127.0.0.1", parts.port or 0)


def _where(url: str) -> str:
    """``host:port`` of a URL, without its user and password."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def _note(server: Server, url: str, where: str) -> None:
    """Print, once per process and address, which server and version the course found."""
    if server.version is None or (server.key, url) in _noted:
        return
    _noted.add((server.key, url))
    try:
        version = server.version(url)
    except Exception:  # noqa: BLE001 - a server that does not answer is reported where it is used
        return
    print(f"{server.name} used here: {version} at {_where(url)} ({where}).")


def forget() -> None:
    """Forget the servers this process found, so the next use looks again (for tests that stop them)."""
    with _lock:
        _found.clear()
        _failed.clear()
        _noted.clear()
