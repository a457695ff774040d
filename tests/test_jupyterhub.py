"""The course on a real JupyterHub: three learners as Unix users of their own, each with servers only they reach.

JupyterHub (pinned, from PyPI) and configurable-http-proxy (pinned, from npm) run
on loopback; LocalProcessSpawner starts each learner's server as that learner,
through the hub's REST API. Each learner's kernel (through the kernels API, as a
browser's) runs the course's inbox over PostgreSQL, a Redis claim and a JetStream
de-duplication, then tries the other learners' servers, secrets and home. Two
modes: each learner's own PostgreSQL, Valkey and NATS; or a shared PostgreSQL
with a database and a role per learner (``IDEMLIB_POSTGRES_URL`` set by the
spawner), Valkey and NATS still their own. With their own servers, the learners then
hand in lesson 00 (saved through the contents API, as their browsers save it; one
hands in a link to a classmate's copy), the teacher collects the copies with the
guide's own commands and grades them. Every process stops at the end.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import nbformat
import pytest
from other_users import REPOSITORY, as_account, learner_account, python_for_anyone
from test_grade_every_lesson import solved_copy

from idemlib.course.lessons import LESSONS
from idemlib.course.publish import student_copy
from idemlib.servers import POSTGRES
from idemlib.servers.local import free_port, open_temp, stop

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("npm") is None or python_for_anyone() is None,
                                reason="a hub with learners as Unix users needs root, npm and a Python any user runs")
LEARNERS = ["ada", "grace", "linus"]

PROBE = """
import json, socket
from pathlib import Path
import psycopg
other = json.loads({other!r})
found = {{}}
for name, path in (("secret", Path(other["home"], ".cache", "idemlib", "var", "secret")), ("home", Path(other["home"]))):
    try:
        path.read_text() if path.is_file() else list(path.iterdir())
        found[name] = "read"
    except PermissionError:
        found[name] = "denied"
try:
    psycopg.connect(other["postgres"], connect_timeout=3).close()
    found["postgres"] = "logged in"
except psycopg.OperationalError as error:
    said = str(error)
    found["postgres"] = ("refused" if "password authentication failed" in said else
                         "no database access" if "permission denied for database" in said else said)
for key, hello in (("redis", b"PING\\r\\n"), ("nats", b"CONNECT {{}}\\r\\nPING\\r\\n")):
    host, port = other[key]
    with socket.create_connection((host, port), timeout=3) as connection:
        lines = connection.makefile("rb")
        if key == "nats":
            lines.readline()
        connection.sendall(hello)
        found[key] = "refused" if lines.readline().startswith(b"-") else "answered"
print("PROBE " + json.dumps(found))
"""


def collecting_commands(homes: Path, lesson: str) -> str:
    """The guide's commands that collect each learner's lesson, for the learners' homes under ``homes``."""
    guide = (REPOSITORY / "TEACHING.md").read_text()
    section = guide[guide.index("**Collecting and grading on the hub.**"):]
    block = section[section.index("```sh\n") + len("```sh\n"): section.index("```", section.index("```sh\n") + 5)]
    loop = "\n".join(line for line in block.splitlines() if not line.startswith("make grade"))
    assert "/home/*" in loop and "02_" in loop, block
    return loop.replace("/home/*", f"{homes}/*").replace("02_", f"{lesson}_")


def hand_in_and_grade(hub, root: Path, accounts: list) -> dict[str, dict[str, str]]:
    """Lesson 00 handed in by three learners (one solved, one with a wrong and a blank answer, one a link to the first
    learner's copy), collected by the guide's commands as root and graded as ``make grade`` grades; each learner's
    verdicts by exercise."""
    stem = "00_start_here"
    lesson = nbformat.read(LESSONS / f"{stem}.ipynb", as_version=4)
    solved, partly = solved_copy(lesson, stem), student_copy(lesson, stem)
    first_answer = next(cell for cell in partly.cells if "answer" in cell.metadata.get("tags", []))
    first_answer.source = 'inserts_idempotent = {"ignore a repeat": True, "fail on a repeat": True, "add on a repeat": True}'
    first, second, third = accounts
    hub.save(first.pw_name, f"lessons/{stem}.ipynb", solved)
    hub.save(second.pw_name, f"lessons/{stem}.ipynb", partly)
    status, lines = hub.execute(third.pw_name, (  # the classmate's home is closed, but a link needs no reading
        f"import os; os.makedirs('lessons', exist_ok=True); "
        f"os.symlink({first.pw_dir + '/lessons/' + stem + '.ipynb'!r}, 'lessons/{stem}.ipynb')"))
    assert status == "ok", "\n".join(lines)
    teacher = root / "teacher-desk"
    teacher.mkdir()
    subprocess.run(["sh", "-c", collecting_commands(root / "home", "00")], cwd=teacher, check=True, timeout=60)
    graded = subprocess.run([sys.executable, "-m", "idemlib.course", "grade", "handed_in", "--lesson", "00",
                             "--out", "grades"], cwd=teacher, capture_output=True, text=True, timeout=900)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    verdicts: dict[str, dict[str, str]] = {}
    with (teacher / "grades" / "grades.csv").open(encoding="utf-8") as table:
        for row in csv.DictReader(table):
            verdicts.setdefault(row["student"], {})[row["exercise"]] = row["verdict"]
    assert "2 of 4 exercises right" in graded.stdout, graded.stdout
    return verdicts


def without_secret(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:not-the-secret@{parts.hostname}:{parts.port}"))


def tagged(lines: list[str], tag: str) -> dict:
    [line] = [line for line in lines if line.startswith(f"{tag} ")]
    return json.loads(line.removeprefix(f"{tag} "))


@pytest.fixture(scope="module")
def hub_tools():
    from hub import hub_environment, proxy

    return hub_environment(), proxy()


@pytest.fixture
def class_of_three() -> Iterator[tuple[Path, list]]:
    root = Path(tempfile.mkdtemp(prefix="idemlib-hub-", dir=open_temp()))
    root.chmod(0o755)
    suffix = f"{os.getpid() % 10000}"
    with learner_account(f"{LEARNERS[0]}{suffix}", root / "home" / LEARNERS[0]) as first, \
            learner_account(f"{LEARNERS[1]}{suffix}", root / "home" / LEARNERS[1]) as second, \
            learner_account(f"{LEARNERS[2]}{suffix}", root / "home" / LEARNERS[2]) as third:
        yield root, [first, second, third]
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mode", ["own servers", "shared postgresql"])
def test_three_learners_on_a_hub_each_reach_their_own_servers_and_no_one_else_s(mode, hub_tools, class_of_three):
    from hub import LESSON, shared_postgres, start_hub

    bin_folder, _ = hub_tools
    root, accounts = class_of_three
    names = [account.pw_name for account in accounts]
    environment = {"PATH": f"{bin_folder}:/usr/bin:/bin"}
    shared: dict[str, str] = {}
    if mode == "shared postgresql":
        shared, files = shared_postgres(root, accounts)
        environment["IDEMLIB_POSTGRES_URL"] = f"@{files}/{{username}}"
    hub = start_hub(root, bin_folder, free_port(), free_port(), free_port(), environment)
    try:
        for name in names:
            hub.api("POST", f"/users/{name}")
        spawned = {name: hub.spawn(name) for name in names}
        ran = {}
        for name in names:
            status, lines = hub.execute(name, LESSON)
            assert status == "ok", "\n".join(lines)
            ran[name] = tagged(lines, "RESULT")
        for account in accounts:
            result = ran[account.pw_name]
            assert result["user"] == account.pw_name and result["home"] == account.pw_dir
            assert result["inbox"] == [1, 0] and result["claims"] == [True, False]
            assert result["duplicates"] == [False, True]
            if shared:
                assert result["urls"]["postgres"] == shared[account.pw_name]
            else:  # the course's own, with the learner's own secret, in the learner's home
                secret = Path(account.pw_dir, ".cache", "idemlib", "var", "secret")
                assert urlsplit(result["urls"]["postgres"]).password == secret.read_text().strip()
        ports = [urlsplit(r["urls"][key]).port for r in ran.values() for key in ("postgres", "redis", "nats")]
        expected_distinct = len(ports) - (2 if shared else 0)  # a shared server has one port for all three
        assert len(set(ports)) == expected_distinct
        for name, other in zip(names, names[1:] + names[:1], strict=True):
            theirs = ran[other]["urls"]
            mine = ran[name]["urls"]["postgres"]
            target = {"home": ran[other]["home"],
                      "postgres": (mine.rsplit("/", 1)[0] + "/" + other) if shared else without_secret(theirs["postgres"]),
                      "redis": ["127.0.0.1", urlsplit(theirs["redis"]).port],
                      "nats": ["127.0.0.1", urlsplit(theirs["nats"]).port]}
            status, lines = hub.execute(name, PROBE.format(other=json.dumps(target)))
            assert status == "ok", "\n".join(lines)
            assert tagged(lines, "PROBE") == {"secret": "denied", "home": "denied",
                                              "postgres": "no database access" if shared else "refused",
                                              "redis": "refused", "nats": "refused"}
        if not shared:  # the rows are named by the folders the guide's commands make: the learners' homes
            first, second, third = (Path(account.pw_dir).name for account in accounts)
            assert hand_in_and_grade(hub, root, accounts) == {
                first: {"check_idempotent_inserts": "right", "check_idempotent_statements": "right"},
                second: {"check_idempotent_inserts": "wrong", "check_idempotent_statements": "blank"},
                third: {"": "not read"}}
        print(f"\n{mode}: spawned in " + ", ".join(f"{seconds:.1f} s" for seconds in spawned.values()))
    finally:
        hub.stop()
        for account in accounts:  # the learners' course servers stop with their owners' command
            subprocess.run([str(bin_folder / "python"), "-m", "idemlib.servers", "stop"], capture_output=True,
                           timeout=120, env={"PATH": f"{bin_folder}:/usr/bin:/bin", "HOME": account.pw_dir},
                           cwd=account.pw_dir, **as_account(account))
        if shared:
            stop([POSTGRES.kind], root / "teacher")
    for account in accounts:  # nothing of any learner's still runs, once what was told to stop has exited
        deadline = time.monotonic() + 30
        while (left := subprocess.run(["pgrep", "-u", str(account.pw_uid)], capture_output=True, text=True).stdout) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == "", f"{account.pw_name} still runs {left.split()}: " + subprocess.run(
            ["ps", "-o", "pid,args", "-u", str(account.pw_uid)], capture_output=True, text=True).stdout
