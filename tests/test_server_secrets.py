"""Each learner's servers answer that learner alone: a secret only they can read, in every URL the course hands out.

On a hub host every learner's servers share one loopback. A connection without
the secret (another learner's kernel, any user of the machine) is refused by
PostgreSQL, Valkey and NATS alike; the secret and the records that carry it are
readable by their owner alone, and another Unix user cannot read them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from other_users import path_for_anyone, python_for_anyone

from idemlib.servers import NATS, POSTGRES, REDIS, local
from idemlib.servers.local import Kind, ensure, free_port, open_temp, stop, write_config
from idemlib.servers.secret import FILE, SecretUnsafe, secret

OWN = [POSTGRES, REDIS, NATS]
ANOTHER_LEARNER = 64999
"""A user id with no account here, so in no group of anyone's: another learner on the same host."""
WITHOUT = {"postgres": "postgresql://postgres:postgres@127.0.0.1:{port}/postgres",
           "redis": "redis://127.0.0.1:{port}/0", "nats": "nats://127.0.0.1:{port}"}
WRONG = {"postgres": "postgresql://postgres:{wrong}@127.0.0.1:{port}/postgres",
         "redis": "redis://:{wrong}@127.0.0.1:{port}/0", "nats": "nats://{wrong}@127.0.0.1:{port}"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def one_letter_off(learners: str) -> str:
    """The learner's secret with its first letter changed: the nearest wrong secret, never the secret itself.

    (Putting an ``x`` in front of the rest once gave the secret back whenever it began with ``x``, one run in 64.)
    """
    return ("y" if learners[0] == "x" else "x") + learners[1:]


@pytest.mark.parametrize("server", OWN, ids=lambda s: s.key)
def test_the_course_s_server_refuses_a_connection_without_the_learner_s_secret(server, servers_dir):
    running = ensure(server.kind, servers_dir)
    learners = secret(servers_dir)
    assert learners in running.url  # the URL the course hands out carries it ...
    assert server.version(running.url) == running.version  # ... and logs in with it
    for url in (WITHOUT[server.key].format(port=running.port),
                WRONG[server.key].format(port=running.port, wrong=one_letter_off(learners))):
        with pytest.raises(Exception) as refused:  # noqa: PT011 - each client has its own error class
            server.kind.check(url)
        assert server.kind.refused(refused.value), refused.value  # refused as a login, not a dead server
    stop([server.kind], servers_dir)


@pytest.mark.parametrize("learners", ["xJ3q9F2kLm0pQr7sTu8vWx1yZa4bCd5e", "J3q9F2kLm0pQr7sTu8vWx1yZa4bCd5ex"])
def test_the_wrong_secret_differs_from_the_learner_s_in_one_letter_whatever_it_begins_with(learners):
    wrong = one_letter_off(learners)
    assert wrong != learners and len(wrong) == len(learners)
    assert sum(a != b for a, b in zip(wrong, learners, strict=True)) == 1


def asking_no_password(kind: Kind) -> Kind:
    """``kind`` as a stranger on the machine runs it: the same server, asking no password (PostgreSQL: ``trust``)."""

    class Open(type(kind)):  # type: ignore[misc]
        def initialise(self, binary: Path, data: Path, as_user: dict[str, Any], secret: str) -> None:
            if self.key != "postgres":
                write_config(data / {"redis": "valkey.conf", "nats": "auth.conf"}[self.key], "", as_user)
            elif not (data / "PG_VERSION").exists():
                subprocess.run([str(binary.with_name("initdb")), "-D", str(data), "-U", "postgres", "--auth=trust",
                                "--no-sync", "--no-instructions"], check=True, capture_output=True, **as_user)

        def url(self, port: int, secret: str) -> str:
            return WITHOUT[self.key].format(port=port)

        def check_ours(self, url: str) -> str:
            return self.check(url)

    return Open()


@pytest.mark.parametrize("server", OWN, ids=lambda s: s.key)
def test_a_stranger_that_takes_the_chosen_port_first_is_not_taken_for_the_course_s_server(
        server, servers_dir, monkeypatch):
    """Many servers start at once on a shared machine: the port the course picked may be bound by another program
    before the course's server binds it. A stranger there that lets anyone in must not pass for the course's own."""
    strangers = Path(tempfile.mkdtemp(prefix="idemlib-stranger-", dir=open_temp()))
    strangers.chmod(0o755)
    stranger = asking_no_password(server.kind)
    try:
        theirs = ensure(stranger, strangers)
        ports = iter([theirs.port])  # the first port the course picks is the one the stranger just took
        monkeypatch.setattr(local, "free_port", lambda: next(ports, None) or free_port())
        ours = ensure(server.kind, servers_dir)
        assert ours.port != theirs.port and ours.pid != theirs.pid
        assert server.kind.check(theirs.url) == theirs.version  # the stranger still lets anyone in, on its own port
        with pytest.raises(Exception) as refused:  # noqa: PT011 - each client has its own error class
            server.kind.check(WITHOUT[server.key].format(port=ours.port))
        assert server.kind.refused(refused.value), refused.value
        assert server.version(ours.url) == ours.version
    finally:
        stop([stranger], strangers)
        shutil.rmtree(strangers, ignore_errors=True)
    stop([server.kind], servers_dir)


def test_the_secret_and_the_records_that_carry_it_are_the_learner_s_alone(servers_dir):
    running = [ensure(server.kind, servers_dir) for server in OWN]
    assert mode(servers_dir / FILE) == 0o600 and (servers_dir / FILE).stat().st_uid == os.geteuid()
    for server in running:
        assert mode(servers_dir / f"{server.key}.json") == mode(servers_dir / f"{server.key}.log") == 0o600
        assert secret(servers_dir) not in (servers_dir / f"{server.key}.log").read_text(errors="replace")
    # Valkey's and NATS's configuration (where their secret is) belong to the server's user, mode 0600.
    for config in (servers_dir / "redis" / "valkey.conf", servers_dir / "nats" / "auth.conf"):
        assert mode(config) == 0o600
    for server in running:  # and never on a command line, which every user reads in ps
        assert secret(servers_dir) not in Path(f"/proc/{server.pid}/cmdline").read_text()
    stop([server.kind for server in OWN], servers_dir)


def test_the_secret_is_made_once_kept_and_closed_again_if_loosened(tmp_path):
    first = secret(tmp_path)
    assert secret(tmp_path) == first and len(first) == 32
    (tmp_path / FILE).chmod(0o644)
    assert secret(tmp_path) == first and mode(tmp_path / FILE) == 0o600
    (tmp_path / FILE).write_text("it's; DROP ROLE")
    with pytest.raises(SecretUnsafe, match="not a secret the course made"):
        secret(tmp_path)


def test_a_cluster_made_under_another_password_takes_the_learner_s_secret_and_keeps_its_data(servers_dir):
    """A PostgreSQL the course made before (under ``postgres``) or before its secret was remade."""
    import psycopg

    first = ensure(POSTGRES.kind, servers_dir)
    with psycopg.connect(first.url, autocommit=True) as connection:
        connection.execute("CREATE TABLE inbox (message_id text PRIMARY KEY)")
        connection.execute("INSERT INTO inbox VALUES ('m-7f3')")
    stop([POSTGRES.kind], servers_dir)
    (servers_dir / FILE).unlink()  # a new secret: the old password must no longer open it
    second = ensure(POSTGRES.kind, servers_dir)
    assert urlsplit(second.url).password == secret(servers_dir) != urlsplit(first.url).password
    with psycopg.connect(second.url) as connection:
        assert connection.execute("SELECT message_id FROM inbox").fetchall() == [("m-7f3",)]
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(first.url.replace(str(first.port), str(second.port)), connect_timeout=3)
    stop([POSTGRES.kind], servers_dir)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another Unix user")
def test_another_unix_user_can_neither_read_the_secret_nor_log_in(servers_dir):
    running = {server.key: ensure(server.kind, servers_dir) for server in OWN}
    # Another user's own client, not the course's: psycopg, and the Redis and NATS protocols over a bare socket.
    probe = """
import json, socket, sys
from pathlib import Path
import psycopg
folder, ports = Path(sys.argv[1]), json.loads(sys.argv[2])
for name in ("secret", "postgres.json", "redis.json", "nats.json"):
    try:
        (folder / name).read_text()
        print(name, "read")
    except PermissionError:
        print(name, "denied")
try:
    psycopg.connect(f"postgresql://postgres:postgres@127.0.0.1:{ports['postgres']}/idemlib", connect_timeout=3)
    print("postgres logged in")
except psycopg.OperationalError as error:
    print("postgres", "refused" if "password authentication failed" in str(error) else error)
for key, hello in (("redis", b"PING\\r\\n"), ("nats", b"CONNECT {}\\r\\nPING\\r\\n")):
    with socket.create_connection(("127.0.0.1", ports[key]), timeout=3) as connection:
        lines = connection.makefile("rb")
        if key == "nats":
            lines.readline()  # INFO
        connection.sendall(hello)
        answer = lines.readline()
    print(key, "refused" if answer.startswith(b"-") else answer)
"""
    ports = json.dumps({key: server.port for key, server in running.items()})
    # A user of its own, neither root nor nobody (whom root's servers run as): another learner on the host.
    python = python_for_anyone()
    if python is None:
        pytest.skip("no Python here that another user may run")
    done = subprocess.run([str(python), "-c", probe, str(servers_dir), ports], capture_output=True, text=True,
                          timeout=60, user=ANOTHER_LEARNER, group=ANOTHER_LEARNER, extra_groups=[],
                          env={**os.environ, "HOME": "/nonexistent", "PYTHONPATH": path_for_anyone()}, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["secret denied", "postgres.json denied", "redis.json denied",
                                       "nats.json denied", "postgres refused", "redis refused", "nats refused", ""]
    stop([server.kind for server in OWN], servers_dir)
