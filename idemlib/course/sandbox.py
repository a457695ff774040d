"""Running a hand-in's code where it can reach nothing but its own scratch space.

Two ways, the first that works here is used, and the grades name it:

- ``bubblewrap`` (Debian's ``bwrap``): a new mount, pid, network, IPC and UTS namespace.
  The only files visible are the system's programs and libraries, Python, and the
  course's package as the sandbox gets it (:func:`course_copy`: without the checks'
  code), all read-only; ``/tmp`` and ``/dev/shm`` are small empty tmpfs, the only
  writable places. Submissions, grades, lessons and home folders are not there at all.
  There is no network but a loopback of its own, and every process dies with the
  sandbox. Run as root, the code inside runs as an unprivileged user of its own
  (one per sandbox running on the machine, whichever command started it, so a fork
  bomb in one sandbox cannot starve another); run as a teacher's own user,
  bubblewrap makes a user namespace instead.
- ``dedicated user`` (where bubblewrap cannot make namespaces, as root only): the code
  runs as an unprivileged user of its own in an empty folder, so it can read only
  what every user of the machine may read and write only that folder, ``/tmp`` and
  ``/dev/shm``; it keeps the machine's network. Weaker, and said so in the grades;
  before grading, :func:`check_dedicated_user` makes sure that user can run Python
  and cannot read the lessons, the submissions or the grades.

The budget: as root, where the kernel's control groups can be written (v2, or v1's
memory, pids and cpu), each sandbox gets a group of its own bounding the memory of all
its processes together (its tmpfs pages included), their number and their CPU share
(:class:`idemlib.course.budget.Budget`). Everywhere, each process's address space, file size, open files and
CPU seconds are bounded, the processes of the sandbox's user are counted (as root a
user of its own; without root, the teacher's user, so a fork bomb is stopped at that
limit or at the time limit, whichever comes first), and the time. What the code prints
is drained and dropped past a limit.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import idemlib
from idemlib.course.budget import Budget, budget_kind  # noqa: F401 - budget_kind: how a sandbox is bounded here
from idemlib.servers.local import open_temp

BUBBLEWRAP, DEDICATED_USER = "bubblewrap", "dedicated user"
FIRST_UID = 61000  # the unprivileged users sandboxes run as, from 61000 on (no account needed)
USERS = 64  # how many sandboxes may run at once on this machine, every grading command together
# Which of those users is taken: one lock file each, held for the run. A user is machine-wide, so two
# grading commands (or two test workers) must never hand the same one out: its process limit and the
# kill at the end of a run would reach the other command's hand-in. So the locks are in /tmp itself, whatever
# TMPDIR each command has.
TAKEN = Path("/tmp") / "idemlib-sandbox-users"
# Without root, the process limit counts every task of the teacher's user, whose other programs (a
# notebook, a server, another test worker) may start threads while a hand-in runs; they get this much
# room, so a hand-in does not fail for their growth. A fork bomb is still stopped, this many on.
OTHERS_ROOM = 1024
SYSTEM = ("/usr", "/etc")  # read-only; /bin, /lib, /lib64 and /sbin are links into /usr on Debian


class SandboxUnavailable(RuntimeError):
    """Neither bubblewrap nor a dedicated user can be had: hand-ins are not run unconfined."""


@dataclass(frozen=True)
class Limits:
    """What one hand-in may use. Address space and file size are per process; processes are per sandbox user;
    ``sandbox_memory_bytes`` and ``cpus`` bound the whole sandbox where :class:`Budget` can."""

    seconds: float = 300
    memory_bytes: int = 3 << 30  # address space: pandas, DuckDB and matplotlib need about 1.5 GiB of it
    processes: int = 64
    file_bytes: int = 64 << 20
    scratch_bytes: int = 256 << 20  # the tmpfs at /tmp
    shm_bytes: int = 64 << 20  # the tmpfs at /dev/shm
    sandbox_memory_bytes: int = 4 << 30  # all its processes and tmpfs together, where a control group bounds it
    cpus: float = 1.0  # its share of the machine's CPUs, where a control group bounds it
    open_files: int = 256
    kept_output_bytes: int = 4096  # of what it prints on stderr, the last part is kept for the teacher


@dataclass(frozen=True)
class Outcome:
    """How a sandboxed run ended: its exit status (None if stopped at its time limit), its report, its last words,
    and the user it ran as (None where bubblewrap made a user namespace)."""

    returncode: int | None
    report: bytes
    stderr_tail: str
    uid: int | None = None


def _probe(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@cache
def available_mode() -> str:
    """The strongest confinement this machine allows; :class:`SandboxUnavailable` if none."""
    if shutil.which("bwrap") and _probe(["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                                         "--proc", "/proc", "--", "true"]):
        return BUBBLEWRAP
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return DEDICATED_USER
    raise SandboxUnavailable("hand-ins are run in a sandbox and none is available here: install bubblewrap "
                             "(apt-get install bubblewrap) or grade as root, which runs them as a user of their own")


def readable_paths(course: Path | None = None) -> list[Path]:
    """What the code inside needs to read besides the system: Python (the venv and the one it came from)
    and the course's package with its data folder (``course``, a folder holding both; by default the checkout's)."""
    package = Path(idemlib.__file__).resolve().parent
    shown = [course.resolve()] if course is not None else [package, package.parent / "data"]
    # Packages installed outside the venv's own folder (a site folder another one adds) are Python's too.
    base = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), *shown}
    sites = {Path(entry).resolve() for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")}
    paths = base | {site for site in sites if not any(site.is_relative_to(path) for path in base)}
    return sorted(path for path in paths if path.exists())


# Of the checks' folder, what a sandbox keeps: the verdict's type, and the runner that starts an answer's
# function again in a fresh process (a restarted consumer), which computes no expected answer.
KEPT_IN_THE_SANDBOX = ("feedback.py", "restart.py")


def course_copy(into: Path) -> Path:
    """The course's package and data as a sandbox sees them, under ``into`` (readable by every user):
    everything but the checks' code. Of ``idemlib/course/exercises`` only :data:`KEPT_IN_THE_SANDBOX` is
    there; the referee puts stand-ins for the check modules in its place."""
    package = Path(idemlib.__file__).resolve().parent
    exercises = package / "course" / "exercises"

    def left_out(folder: str, names: list[str]) -> set[str]:
        dropped = {name for name in names if name == "__pycache__"}
        if Path(folder).resolve() == exercises:
            dropped |= {name for name in names if name not in KEPT_IN_THE_SANDBOX}
        return dropped

    shutil.copytree(package, into / "idemlib", ignore=left_out)
    (into / "idemlib" / "course" / "exercises" / "__init__.py").write_text(
        '"""While grading, the checks stay with the grader: the referee puts stand-ins here."""\n')
    if (package.parent / "data").is_dir():
        shutil.copytree(package.parent / "data", into / "data")
    for path in [into, *into.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return into


def _ancestors(paths: list[Path]) -> list[Path]:
    found = {parent for path in paths for parent in path.parents if str(parent) not in ("/", *SYSTEM)}
    return sorted(found, key=lambda p: len(p.parts))


def bubblewrap_command(inner: list[str], limits: Limits, hidden: list[Path], *, readable: list[Path] | None = None,
                       root: bool | None = None) -> list[str]:
    """``bwrap`` arguments: system and ``readable`` (Python and the course) read-only, a tmpfs /tmp,
    nothing else, no network. ``root`` (whether we are root, by default as we are) picks the namespaces."""
    readable = readable_paths() if readable is None else readable
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if os.geteuid() == 0 if root is None else root:
        command.remove("--cap-drop")
        command.remove("ALL")
        # As root, no user namespace: the code drops to an unprivileged user inside (setpriv below),
        # so the process limit counts that user's processes, not root's (for whom it does not apply).
        command[1:2] = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    # The scratch tmpfs first, so Python or the course living under /tmp (a test's venv) still shows through.
    command += ["--dev", "/dev", "--perms", "1777", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm",
                "--proc", "/proc", "--perms", "1777", "--size", str(limits.scratch_bytes), "--tmpfs", "/tmp"]
    for system in SYSTEM:
        command += ["--ro-bind", system, system]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path(f"/{link}").is_symlink():
            command += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    for parent in _ancestors(readable):
        command += ["--perms", "0755", "--dir", str(parent)]  # bwrap would make them 0700, closed to the user
    for path in readable:
        command += ["--ro-bind", str(path), str(path)]
    for path in hidden:  # a submissions or grades folder inside a readable one is covered over
        if any(path.resolve().is_relative_to(shown) for shown in readable):
            command += ["--tmpfs", str(path.resolve())]
    command += ["--chdir", "/tmp", "--"]
    return command + inner


def _prlimit(limits: Limits, processes: int) -> list[str]:
    return ["prlimit", f"--as={limits.memory_bytes}", f"--fsize={limits.file_bytes}", f"--nproc={processes}",
            f"--nofile={limits.open_files}", f"--cpu={int(limits.seconds) + 5}", "--core=0", "--"]


def _as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--"]


def _own_processes() -> int:
    """How many tasks the current user has now: the process limit counts every thread of every process
    (a server's worker threads included), so a budget counted in processes alone would run out early."""
    uid = os.getuid()
    return sum(_threads(entry) for entry in Path("/proc").iterdir() if entry.name.isdigit() and _owner(entry) == uid)


def _threads(process: Path) -> int:
    try:
        return sum(1 for _ in (process / "task").iterdir())
    except OSError:  # the process ended while we counted
        return 0


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def command_for(argv: list[str], *, mode: str, uid: int | None, limits: Limits, hidden: list[Path],
                scratch: Path, course: Path | None = None) -> list[str]:
    """The whole command line for ``argv`` under ``mode``: limits, confinement, user, and a clean
    environment whose home and temporary folder are the only writable place (the tmpfs inside
    bubblewrap, the empty ``scratch`` folder for a dedicated user). ``course`` is the folder whose
    ``idemlib`` the code imports (:func:`course_copy`; by default the checkout's own)."""
    own = "/tmp" if mode == BUBBLEWRAP else str(scratch)
    path = course.resolve() if course is not None else Path(idemlib.__file__).resolve().parent.parent
    environment = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={own}", f"TMPDIR={own}", f"MPLCONFIGDIR={own}",
                   "MPLBACKEND=Agg", "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8", f"PYTHONPATH={path}"]
    if mode == BUBBLEWRAP:  # a user of its own (``uid``) only as root; otherwise bubblewrap maps one
        inner = (_as_user(uid) if uid is not None else []) + environment + argv
        processes = limits.processes if uid is not None else _own_processes() + limits.processes + OTHERS_ROOM
        return _prlimit(limits, processes) + bubblewrap_command(inner, limits, hidden,
                                                                readable=readable_paths(course))
    if uid is None:  # never run a learner's code as the caller: the dedicated user is the whole point
        raise ValueError(f"{mode} needs the uid of the user to run as")
    return _prlimit(limits, limits.processes) + _as_user(uid) + environment + argv


def run(argv: list[str], stdin: bytes, *, limits: Limits = Limits(), hidden: Sequence[Path] = (),
        mode: str | None = None, fds: dict[str, int] | None = None, course: Path | None = None) -> Outcome:
    """Run ``argv`` confined, feed it ``stdin``, and collect what it writes on its report pipe
    (whose number is put in place of ``{report}`` in ``argv``) until it ends or its time is up.
    ``fds`` are more descriptors to hand it, each put in place of ``{name}``; they are closed here once
    it has them."""
    mode = mode or available_mode()
    own_user = os.geteuid() == 0  # as root, the code drops to a user of its own; otherwise bubblewrap maps one
    fds = dict(fds or {})
    # The dedicated user works in this folder, so it sits where every user may pass (never a private TMPDIR's).
    with tempfile.TemporaryDirectory(prefix="idemlib-sandbox-", dir=open_temp()) as folder, \
            (user_of_its_own() if own_user else nullcontext(None)) as uid, Budget(limits) as budget:
        scratch = Path(folder)
        if mode == DEDICATED_USER and uid is not None:  # a dedicated user is had only as root
            os.chown(scratch, uid, uid)
        read_end, write_end = os.pipe()
        fds["report"] = write_end
        inner = argv
        for name, fd in fds.items():
            inner = [part.replace("{" + name + "}", str(fd)) for part in inner]
        command = budget.entering() + command_for(inner, mode=mode, uid=uid, limits=limits, hidden=list(hidden),
                                                  scratch=scratch, course=course)
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 pass_fds=tuple(fds.values()), cwd=scratch, start_new_session=True)
        assert child.stdin is not None and child.stderr is not None  # both are pipes, asked for above
        for fd in fds.values():
            os.close(fd)
        report, errors = bytearray(), bytearray()
        readers = [threading.Thread(target=_drain, args=(read_end, report, 1 << 20), daemon=True),
                   threading.Thread(target=_drain, args=(child.stderr.fileno(), errors, limits.kept_output_bytes,
                                                         True), daemon=True)]
        for reader in readers:
            reader.start()
        try:
            child.stdin.write(stdin)
            child.stdin.close()
        except BrokenPipeError:  # it ended before reading its job; its status says why
            pass
        try:
            returncode: int | None = child.wait(timeout=limits.seconds)
        except subprocess.TimeoutExpired:
            returncode = None
        _stop(child, uid)
        budget.stop()
        for reader in readers:
            reader.join(timeout=10)
        os.close(read_end)
        return Outcome(returncode, bytes(report), errors.decode(errors="replace"), uid)


def check_dedicated_user(python: str, unreadable: list[Path], needs: tuple[str, ...] = ("IPython", "duckdb")) -> None:
    """Before grading as a dedicated user: that user must run ``python`` and import ``needs`` with it, and
    must not read any of ``unreadable`` (lessons, submissions, grades, the checks' code).
    :class:`SandboxUnavailable` otherwise, saying how to fix it."""
    probe = FIRST_UID + USERS  # a user no sandbox takes, only for this look
    program = (f"import os, sys, json{''.join(', ' + name for name in needs)}\n"
               "print(json.dumps([p for p in sys.argv[1:] if os.access(p, os.R_OK) or os.access(p, os.X_OK)]))")
    try:
        done = subprocess.run(_as_user(probe) + ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", python, "-c",
                                                 program, *map(str, unreadable)],
                              capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailable(f"the dedicated user could not start Python ({error})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SandboxUnavailable(
            f"grading as a dedicated user needs a Python every user can run, and {python} is not one "
            f"({last}). Make the venv readable by all (chmod o+rx on it and each folder above it), "
            "or build it where every user can read it, or install bubblewrap (apt-get install bubblewrap)")
    readable = json.loads(done.stdout)
    if readable:
        raise SandboxUnavailable(
            "grading as a dedicated user runs the hand-ins as a user who can still read " + ", ".join(readable)
            + ": make them unreadable to other users (chmod -R o-rwx on each), or install bubblewrap "
            "(apt-get install bubblewrap)")


@contextmanager
def user_of_its_own() -> Iterator[int]:
    """A sandbox user no other sandbox on this machine holds, held until the block ends (root only).

    Waits while all :data:`USERS` are taken. Whatever an earlier holder left running as that
    user (a grading command killed outright) is ended first, so the new run has the whole
    process budget.
    """
    TAKEN.mkdir(mode=0o700, exist_ok=True)
    seen = TAKEN.lstat()  # a folder someone else made in /tmp, or a link, is not ours to trust
    if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.geteuid():
        raise RuntimeError(f"{TAKEN} is not a folder of this user's; remove it and grade again")
    while True:
        for uid in range(FIRST_UID, FIRST_UID + USERS):
            handle = os.open(TAKEN / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                continue
            try:
                _kill_all_of(uid)
                yield uid
            finally:
                os.close(handle)  # closing releases the lock, also when the process dies
            return
        time.sleep(0.2)


def _kill_all_of(uid: int) -> None:
    subprocess.run(_as_user(uid) + ["kill", "-9", "-1"], capture_output=True)


def _drain(fd: int, into: bytearray, keep: int, tail: bool = False) -> None:
    """Read ``fd`` to its end; keep its first (or last) ``keep`` bytes, drop the rest (a flood costs nothing)."""
    while chunk := os.read(fd, 1 << 16):
        into += chunk
        if len(into) > keep:
            del into[slice(None, len(into) - keep) if tail else slice(keep, None)]


def _stop(child: subprocess.Popen[bytes], uid: int | None) -> None:
    """End everything the run started: bubblewrap's namespace dies with it; the processes of a user of
    its own are all killed too, wherever they moved (a new session, a double fork)."""
    try:
        os.killpg(child.pid, 9)
    except ProcessLookupError:
        pass
    child.wait()
    if uid is not None:
        _kill_all_of(uid)
