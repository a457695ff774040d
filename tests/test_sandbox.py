"""The sandbox a hand-in runs in: what it can see, write and reach, as root and as an ordinary user.

These run small programs (a shell, the system's Python) rather than a whole hand-in, so
each takes well under a second; tests/test_grade_hostile.py grades hand-ins in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from idemlib.course import budget, sandbox

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
NEEDS_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
PROBE = Path(__file__).resolve()  # a file of the teacher's checkout: never visible inside
# What the code inside finds, reported on its report pipe (the system's Python: no course needed).
LOOK = f"""
import json, os, socket
def can(action):
    try:
        action()
        return True
    except OSError:
        return False
def connect():
    socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
found = {{"uid": os.getuid(), "sees_checkout": os.path.exists({str(PROBE)!r}),
         "sees_home": os.path.exists("/root/.bashrc") or os.path.isdir("/home/" + "x"),
         "writes_tmp": can(lambda: open(os.path.join(os.environ["TMPDIR"], "x"), "w").write("x")),
         "writes_usr": can(lambda: open("/usr/x", "w").write("x")),
         "reaches_loopback_server": can(connect)}}
os.write(int("{{report}}"), json.dumps(found).encode())
"""


def look(mode: str) -> dict[str, object]:
    outcome = sandbox.run(["/usr/bin/python3", "-c", LOOK], b"", mode=mode, limits=sandbox.Limits(seconds=30))
    assert outcome.returncode == 0, outcome.stderr_tail
    found = json.loads(outcome.report)
    assert found["uid"] == outcome.uid  # the user it says it ran as is the one it ran as
    return found


@ROOT_ONLY
@NEEDS_BWRAP
def test_as_root_bubblewrap_runs_the_code_as_a_user_of_its_own_seeing_only_the_system():
    found = look(sandbox.BUBBLEWRAP)
    assert sandbox.FIRST_UID <= found.pop("uid") < sandbox.FIRST_UID + sandbox.USERS
    assert found == {"sees_checkout": False, "sees_home": False, "writes_tmp": True,
                     "writes_usr": False, "reaches_loopback_server": False}


@ROOT_ONLY
def test_the_dedicated_user_fallback_runs_as_that_user_and_writes_nothing_of_the_system():
    found = look(sandbox.DEDICATED_USER)
    # Weaker, as the grades say: it may see what every user may see, and the network.
    assert sandbox.FIRST_UID <= found["uid"] < sandbox.FIRST_UID + sandbox.USERS
    assert found["writes_tmp"] is True and found["writes_usr"] is False


@ROOT_ONLY
@NEEDS_BWRAP
def test_bubblewrap_also_works_for_an_ordinary_user(tmp_path):
    """A teacher who is not root: bubblewrap makes a user namespace. Run as an unprivileged user
    (the course's Python may live in root's home, so the program here is the system's shell)."""
    inner = ["/bin/sh", "-c", f"id -u; test -e {PROBE} && echo sees-checkout; test -e /root && echo sees-root; "
                              "echo x > /tmp/x && echo writes-tmp; (echo x > /usr/x) 2>/dev/null && echo writes-usr; "
                              "true"]
    command = sandbox.bubblewrap_command(inner, sandbox.Limits(), [], readable=[], root=False)
    user = ["setpriv", "--reuid=61099", "--regid=61099", "--clear-groups", "--inh-caps=-all", "--"]
    done = subprocess.run(user + command, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["61099", "writes-tmp"]


@ROOT_ONLY
@NEEDS_BWRAP
def test_a_fork_bomb_stops_at_the_process_limit_and_nothing_outlives_the_run():
    bomb = ("import os, time\nborn = 0\nwhile True:\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(600)\n            os._exit(0)\n        born += 1\n"
            "    except OSError:\n        break\n"
            "os.write(int('{report}'), str(born).encode())\ntime.sleep(600)")
    outcome = sandbox.run(["/usr/bin/python3", "-c", bomb], b"", mode=sandbox.BUBBLEWRAP,
                          limits=sandbox.Limits(seconds=15, processes=20))
    assert outcome.returncode is None  # it slept on, and was stopped at its time limit
    assert 0 < int(outcome.report) < 20
    left = subprocess.run(["pgrep", "-u", str(outcome.uid)], capture_output=True, text=True)
    assert left.stdout == ""


HOLD = """import sys, time
from idemlib.course.sandbox import user_of_its_own
with user_of_its_own() as uid:
    print(uid, flush=True)
    time.sleep(60)
"""


@ROOT_ONLY
def test_a_sandbox_never_gets_the_user_another_grading_command_holds():
    """Two grading commands at once (two teachers, two test workers): each sandbox's user is its own,
    so one hand-in's fork bomb or the kill that ends its run never reaches the other's."""
    others = [subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        held = {int(other.stdout.readline()) for other in others}
        outcome = sandbox.run(["/usr/bin/python3", "-c", "import os; os.write(int('{report}'), b'%d' % os.getuid())"],
                              b"", limits=sandbox.Limits(seconds=30))
        assert len(held) == 3 and int(outcome.report) == outcome.uid and outcome.uid not in held
        assert all(other.poll() is None for other in others)  # the holders were not killed by the run's end
    finally:
        for other in others:
            other.kill()
            other.wait()


@ROOT_ONLY
def test_a_user_left_behind_by_a_killed_grading_command_is_taken_again_and_emptied_first():
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    uid = int(holder.stdout.readline())
    orphan = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "sleep", "600"])
    # Until setpriv has changed its user, it is root's, and no sweep of the user's processes can see it.
    deadline = time.monotonic() + 30
    while os.stat(f"/proc/{orphan.pid}").st_uid != uid:
        assert time.monotonic() < deadline, "the orphan never ran as the sandbox's user"
        time.sleep(0.01)
    holder.kill()  # killed outright: its lock goes with it, its hand-in's process stays
    holder.wait()
    with contextlib.ExitStack() as taken:  # another grading run may hold lower users meanwhile: take until ours
        assert uid in (taken.enter_context(sandbox.user_of_its_own()) for _ in range(sandbox.USERS))
        assert orphan.wait(timeout=10) == -9


def test_without_bubblewrap_or_root_grading_refuses_rather_than_run_unconfined(monkeypatch):
    sandbox.available_mode.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="install bubblewrap"):
            sandbox.available_mode()
    finally:
        sandbox.available_mode.cache_clear()


def test_what_it_prints_is_dropped_past_a_small_tail():
    flood = "import os\nfor _ in range(2000):\n    os.write(2, b'y' * 100_000)\nos.write(2, b'the end')"
    outcome = sandbox.run([sys.executable if os.geteuid() else "/usr/bin/python3", "-c", flood], b"",
                          limits=sandbox.Limits(seconds=60))
    assert outcome.returncode == 0
    assert len(outcome.stderr_tail) <= sandbox.Limits().kept_output_bytes and outcome.stderr_tail.endswith("the end")


SYSTEM_PYTHON = "/usr/bin/python3"


@NEEDS_BWRAP
def test_the_shared_memory_folder_is_a_small_tmpfs_of_the_sandboxs_own():
    fill = ("import os\nwritten = 0\ntry:\n    with open('/dev/shm/fill', 'wb') as f:\n        for _ in range(512):\n"
            "            f.write(b'x' * (1 << 20))\n            f.flush()\n            written += 1\nexcept OSError:\n"
            "    pass\nos.write(int('{report}'), str(written).encode())")
    outcome = sandbox.run([SYSTEM_PYTHON, "-c", fill], b"", mode=sandbox.BUBBLEWRAP,
                          limits=sandbox.Limits(seconds=60, shm_bytes=32 << 20))
    assert outcome.returncode == 0, outcome.stderr_tail
    assert int(outcome.report) <= 32


def unless_the_kind_is_here(kind: str) -> None:
    """Skip, saying why, where this machine's control groups are not of ``kind`` (or none can be written)."""
    here = sandbox.budget_kind()
    if here == kind:
        return
    if kind == "cgroup v2" and (unified := next((path for path in (budget.CGROUPS / "cgroup.controllers",
                                                budget.CGROUPS / "unified" / "cgroup.controllers")
                                                if path.exists()), None)):
        pytest.skip(f"cgroup v2 here ({unified.parent}) offers only '{unified.read_text().strip()}': memory, pids and "
                    "cpu are bound to v1 hierarchies, so the v2 path runs only where the unified hierarchy holds them "
                    "(booted with systemd.unified_cgroup_hierarchy=1, the default of current distributions)")
    pytest.skip(f"a sandbox here is bounded by {here}, not {kind} (as root, with {kind} writable)")


@pytest.mark.parametrize("kind", ["cgroup v1", "cgroup v2"])
def test_a_sandboxs_memory_is_bounded_for_all_its_processes_together(kind):
    """Three children of 300 MiB each, each under the per-process limit, in a sandbox of 512 MiB: not all
    three live (the per-process limit alone would let every one through)."""
    unless_the_kind_is_here(kind)
    greedy = ("import os, time\nkids = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
              "        hold = b'x' * (300 << 20)\n        time.sleep(3)\n        os._exit(0)\n    kids.append(pid)\n"
              "alive = sum(os.waitpid(pid, 0)[1] == 0 for pid in kids)\nos.write(int('{report}'), str(alive).encode())")
    outcome = sandbox.run([SYSTEM_PYTHON, "-c", greedy], b"",
                          limits=sandbox.Limits(seconds=60, memory_bytes=1 << 30, sandbox_memory_bytes=512 << 20))
    assert outcome.returncode == 0, outcome.stderr_tail
    assert int(outcome.report) < 3


def test_a_cgroup_v2_budget_writes_the_kernels_files(tmp_path, monkeypatch):
    """What the v2 path writes, on a folder standing for the unified hierarchy (the kernel's own behaviour is
    the memory test above, where a v2 hierarchy holds the controllers): a group per sandbox under
    idemlib-sandboxes with the controllers enabled, its memory, process and CPU bounds, the command moved into it."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    monkeypatch.setattr(budget, "CGROUPS", tmp_path)
    monkeypatch.setattr(budget.os, "geteuid", lambda: 0)
    budget._v2_parent.cache_clear()
    try:
        assert budget.budget_kind() == "cgroup v2"
        limits = sandbox.Limits(processes=32, sandbox_memory_bytes=1 << 30, cpus=0.5)
        with budget.Budget(limits) as bounded:
            [group] = bounded.groups
            (group / "cgroup.procs").write_text("")
            assert group.parent == tmp_path / "idemlib-sandboxes" and bounded.kind == "cgroup v2"
            assert {name: (group / name).read_text() for name in ("memory.max", "pids.max", "cpu.max")} == {
                "memory.max": str(1 << 30), "pids.max": "32", "cpu.max": "50000 100000"}
            assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
            assert str(group / "cgroup.procs") in bounded.entering()[2]
    finally:
        budget._v2_parent.cache_clear()


def test_the_sandbox_sees_the_course_without_the_checks_code(tmp_path):
    course = sandbox.course_copy(tmp_path / "course")
    assert sorted(p.name for p in (course / "idemlib" / "course" / "exercises").iterdir()) == [
        "__init__.py", "feedback.py", "restart.py"]
    assert (course / "idemlib" / "sim.py").is_file() and (course / "data" / "facts.csv").is_file()


@ROOT_ONLY
def test_the_dedicated_user_mode_refuses_a_python_its_user_cannot_run(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to(SYSTEM_PYTHON)
    with pytest.raises(sandbox.SandboxUnavailable, match="Python every user can run"):
        sandbox.check_dedicated_user(str(private / "python3"), [])


@ROOT_ONLY
def test_the_dedicated_user_mode_refuses_while_its_user_can_read_the_submissions():
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # not under pytest's folder, closed to other users
        top = Path(folder)
        top.chmod(0o755)
        readable, hidden = top / "handed_in", top / "grades"
        readable.mkdir(mode=0o755)
        hidden.mkdir(mode=0o700)
        with pytest.raises(sandbox.SandboxUnavailable, match=f"can still read {readable}"):
            sandbox.check_dedicated_user(SYSTEM_PYTHON, [readable, hidden], needs=())
        readable.chmod(0o700)
        sandbox.check_dedicated_user(SYSTEM_PYTHON, [readable, hidden], needs=())  # now it may start
