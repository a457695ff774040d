"""The tests' own tools (repo2docker, JupyterHub) are built once per user, even by two test runs at the same moment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tools

BUILDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import tools
tools.TOOLS = Path(sys.argv[2])

def build(folder):
    with open(tools.TOOLS / "builds.log", "a") as log:
        log.write("start\\n")
        log.flush()
        folder.mkdir()
        time.sleep(1.0)  # long enough for the other run to arrive while this one builds
        if sys.argv[3] == "crash":
            raise SystemExit("cut off")
        (folder / "bin").mkdir()
        (folder / "bin" / "tool").write_text("whole")
        log.write("end\\n")

with tools.tool("fake-1.0", build) as folder:
    print((folder / "bin" / "tool").read_text())
"""


def run_builders(shared: Path, *modes: str) -> list[subprocess.CompletedProcess[str]]:
    """Start one builder process per mode at once, all on the tools folder ``shared``; wait for them all."""
    started = [subprocess.Popen([sys.executable, "-c", BUILDER, str(Path(tools.__file__).parent), str(shared), mode],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for mode in modes]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=60), *p.communicate()) for p in started]


def test_two_runs_at_once_build_a_tool_once_and_both_use_the_whole_of_it(tmp_path):
    done = run_builders(tmp_path, "ok", "ok")
    assert [(d.returncode, d.stdout) for d in done] == [(0, "whole\n")] * 2, [d.stderr for d in done]
    assert (tmp_path / "builds.log").read_text() == "start\nend\n"  # one build, and the second run waited for it
    assert run_builders(tmp_path, "ok")[0].stdout == "whole\n"  # kept between runs: no build at all
    assert (tmp_path / "builds.log").read_text() == "start\nend\n"


def test_a_build_cut_off_is_begun_again_from_nothing_by_the_next_run(tmp_path):
    [cut] = run_builders(tmp_path, "crash")
    assert cut.returncode != 0 and not (tmp_path / "fake-1.0" / tools.BUILT).exists()
    [again] = run_builders(tmp_path, "ok")
    assert again.returncode == 0 and again.stdout == "whole\n", again.stderr
    assert (tmp_path / "builds.log").read_text() == "start\nstart\nend\n"


def tools_folder_under(temporary: Path) -> Path:
    """Where a test run whose TMPDIR is ``temporary`` builds its tools."""
    here = str(Path(tools.__file__).parent)
    return Path(subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); import tools; "
                                "print(tools.TOOLS)"], env={"TMPDIR": str(temporary), "PATH": "/usr/bin:/bin"},
                               capture_output=True, text=True, check=True).stdout.strip())


def test_a_private_temporary_folder_still_gives_tools_every_user_can_reach(tmp_path):
    """A TMPDIR only its owner may enter (mode 700) would refuse the hub's learners its venv: the tools go to /tmp."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert tools_folder_under(private).parent == Path("/tmp")
    shared = Path("/tmp") / f"idemlib-open-{tmp_path.name}"
    shared.mkdir(mode=0o755)
    try:
        assert tools_folder_under(shared).parent == shared  # a TMPDIR every user may enter is kept
    finally:
        shared.rmdir()
