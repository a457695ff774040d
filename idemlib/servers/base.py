"""One real server: its name, the variable that points at it, its default address, and where the course finds it.

The order, first match wins: the ``IDEMLIB_NAME_URL`` variable; a server at the
default address (one the learner or ``.ci/start-NAME`` runs) that takes the
course's login and is a version the lessons can use; the course's own, started on
first use from a pip-installed binary (PostgreSQL, Redis, NATS). A server at the
default address that answers but refuses the login (a learner's own PostgreSQL
under other credentials), or that the lessons cannot use, is said to be so, and
the course starts its own on another port. The first time a process finds a
server it prints one line saying which server and version it is, so every lesson
shows what its figures ran on.
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
            if known is not None and self._still_there(known):
                return known
            _own.discard(self)
            if self.kind is None:
                found, where = self.default_url, "already running there"
            elif self in _failed:
                return self.default_url
            elif (refusal := self._refusal(self.default_url) if _answers(self.default_url) else "") is None:
                found, where = self.default_url, "already running there"
            else:
                if refusal:  # something answered there, and the course will not use it: say so, never "not reachable"
                    _refused[self] = refusal
                    print(f"{refusal}; the course starts its own on another port.")
                try:
                    running = local.ensure(self.kind)
                except CannotStart as error:
                    _failed[self] = str(error)
                    return self.default_url
                found = running.url
                _own.add(self)
                where = f"the course's own, run from the pip package {self.kind.package}; `make stop` stops it"
            _found[self] = found
        _note(self, found, where)
        return found

    def address(self) -> str:
        """``host:port`` of :meth:`url`, without the user and secret: what a lesson may print."""
        return _where(self.url())

    def how_to_start(self) -> str:
        """One sentence telling a reader how to get this server running."""
        if self.kind is None:
            return (f"It has no pip package, so it needs root: `sudo {self.start_script}` installs and starts one on "
                    f"loopback (Debian or Ubuntu), or point {self.variable} at a server of your own.")
        failed = _failed.get(self)
        because = f" It could not: {failed}." if failed else ""
        return (f"The course starts its own from the pip package {self.kind.package} when nothing at "
                f"{_where(self.default_url)} takes its login.{because} Point {self.variable} at a server of your "
                f"own, or run `sudo {self.start_script}` (Debian or Ubuntu).")

    def reason(self, error: BaseException | str) -> Unavailable:
        """The sentence a lesson prints (or a test skips with) when the server at :meth:`url` cannot be used:
        refused the login, or is not reachable, never the one for the other."""
        url = self.url()
        refusal = _refused.get(self) if url == self.default_url else None
        words = self.kind.refused(error) if self.kind is not None and isinstance(error, BaseException) else None
        if refusal:
            text = f"{refusal}, and the course could not start its own."
        elif words:
            text = f"The {self.name} at {_where(url)} refused the course's login ({words})."
        else:
            text = f"{self.name} is not reachable at {_where(url)} ({_name(error)})."
        return Unavailable(f"{text} {self.how_to_start()}", self.key)

    def unavailable(self, timeout: float = 2.0) -> Unavailable | None:
        """None when the server at this server's address takes the course's login; otherwise why not, and how to get
        one. (RabbitMQ, which the course does not run itself: when it accepts a TCP connection.)"""
        url = self.url()
        try:
            if self.kind is not None:
                self.kind.check(url)
            else:
                where = urlsplit(url)
                socket.create_connection((where.hostname or "127.0.0.1", where.port or 0), timeout=timeout).close()
        except Exception as error:  # noqa: BLE001 - each client fails in its own way; reason() tells them apart
            return self.reason(error)
        return None

    def _still_there(self, url: str) -> bool:
        """Whether the server found at ``url`` earlier is still the one there. The course's own: while its record
        names a live server of the course's at that URL, since a program that took the port after the server exited
        answers there too. One found at the default address (the learner's, which took the login): while it answers."""
        if self in _own:
            assert self.kind is not None
            running = local.find(self.kind)
            return running is not None and running.url == url
        return _answers(url)

    def _refusal(self, url: str) -> str | None:
        """None when the server at ``url`` takes the course's login and is one the lessons can use; else a sentence
        saying what it is and why the course will not use it."""
        assert self.kind is not None
        where = _where(url)
        try:
            version = self.kind.check(url)
        except Exception as error:  # noqa: BLE001 - a refusal is told from any other failure below
            words = self.kind.refused(error)
            if words:
                return f"A {self.name} on {where} refused the course's login ({words})"
            return f"Something on {where} does not answer as a {self.name} does ({_name(error)})"
        why = self.kind.unsuitable(url, version)
        return f"The {self.name} on {where} is {version}: {why}" if why else None


_lock = threading.Lock()
_found: dict[Server, str] = {}
_failed: dict[Server, str] = {}
_refused: dict[Server, str] = {}
_own: set[Server] = set()
"""The servers whose URL in ``_found`` is the course's own, started or found by :func:`local.ensure`."""
"""The servers at a default address that answered but that the course will not use, and why."""
_noted: set[tuple[str, str]] = set()


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    return local.answers(parts.hostname or "127.0.0.1", parts.port or 0)


def _name(error: BaseException | str) -> str:
    return error if isinstance(error, str) else type(error).__name__


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
        _own.clear()
        _failed.clear()
        _refused.clear()
        _noted.clear()
