"""The course's image, as repo2docker builds it (BinderHub, Zero to JupyterHub images): ``binder/``.

repo2docker renders its Dockerfile without Docker (``--no-build --debug``); then
``binder/postBuild`` and ``binder/start`` run as a user who is not root, in a fresh
environment that holds the course's dependencies but not the course, as the image
runs them: postBuild once, start at each of the learner's server starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_users import REPOSITORY, as_account, fresh_environment, learner_account, python_for_anyone
from tools import tool

from idemlib.servers.local import open_temp

BINDER = REPOSITORY / "binder"
REPO2DOCKER = "jupyter-repo2docker==2026.4.0"


def test_the_image_s_requirements_are_pyproject_s():
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    listed = [line for line in (BINDER / "requirements.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    # deliver-twice is this repository's own second distribution, not on PyPI: postBuild installs it from its folder
    # (repo2docker installs requirements.txt before the rest of the repository is in the image).
    assert listed == [spec for spec in [*project["dependencies"], *project["optional-dependencies"]["lab"]]
                      if not spec.startswith("deliver-twice")]
    assert "python -m pip install --no-cache-dir ./deliver-twice ." in (BINDER / "postBuild").read_text()
    runtime = (BINDER / "runtime.txt").read_text().strip()
    wanted = re.search(r">=(\d+\.\d+)", project["requires-python"]).group(1)
    assert runtime == f"python-{wanted}"


def repo2docker() -> Path:
    """repo2docker, pinned, in a venv of the tests' own (installed on first use)."""

    def build(venv: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=600)
        installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", REPO2DOCKER],
                                   capture_output=True, text=True, timeout=600)
        if installed.returncode != 0:
            pytest.fail(f"could not install {REPO2DOCKER}: {installed.stderr[-600:]}")

    with tool(REPO2DOCKER.replace("==", "-"), build) as venv:
        return venv / "bin" / "repo2docker"


def test_repo2docker_renders_the_image_from_binder():
    done = subprocess.run([str(repo2docker()), "--no-build", "--debug", "--user-name", "jovyan", "--user-id", "1000",
                           str(REPOSITORY)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    dockerfile = done.stdout + done.stderr
    assert "Building conda environment for python=3.11" in dockerfile  # the Python the course needs ...
    requirements = dockerfile.index('pip install --no-cache-dir -r "binder/requirements.txt"')  # ... its packages
    post_build = dockerfile.index("RUN ./binder/postBuild")  # then the course, its settings and lessons
    assert requirements < post_build
    assert re.findall(r"^USER (.+)$", dockerfile[:post_build], re.MULTILINE)[-1] == "${NB_USER}"  # not as root
    assert 'ENV R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile  # the lessons left in each home at start


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[Path, Path, object]]:
    """A repository copy and a fresh environment owned by the image's user (not root), after postBuild ran there."""
    if python_for_anyone() is None:
        pytest.skip("no Python here that another user may run")
    root = Path(tempfile.mkdtemp(prefix="idemlib-image-", dir=open_temp()))
    root.chmod(0o755)
    with learner_account(f"idemlib-img-{os.getpid() % 100000}", root / "home") as account:
        environment = root / "env"
        python = fresh_environment(environment)
        repository = root / "repo"
        shutil.copytree(REPOSITORY, repository, ignore=shutil.ignore_patterns(
            ".venv", "build", ".git", ".pytest_cache", ".hypothesis", "__pycache__", "*.egg-info"))
        if os.geteuid() == 0:  # repo2docker's user owns the environment and the repository's copy
            subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", str(environment), str(repository)],
                           check=True)
        built = run_as(account, python, repository, [str(repository / "binder" / "postBuild")])
        assert built.returncode == 0, built.stderr[-2000:]
        yield python, repository, account
    shutil.rmtree(root, ignore_errors=True)


def run_as(account, python: Path, folder: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    variables = {key: value for key, value in os.environ.items()
                 if not key.startswith("IDEMLIB_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    variables |= {"HOME": account.pw_dir, "PATH": f"{python.parent}:/usr/bin:/bin"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=folder, env=variables,
                          **as_account(account))


def test_post_build_installs_the_course_and_its_settings_not_editable(image):
    python, repository, account = image
    where = run_as(account, python, Path(account.pw_dir), [str(python), "-c",
                   "import idemlib, sys; from idemlib.facts import load_facts; "
                   "print(idemlib.__file__); print(sys.prefix); print(len(load_facts()))"])
    assert where.returncode == 0, where.stderr
    module, prefix, facts = where.stdout.split()
    assert Path(module).is_relative_to(prefix) and not Path(module).is_relative_to(repository)
    assert int(facts) > 0  # the lessons' quoted facts, from the environment's share/idemlib
    settings = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert settings.read_text() == (REPOSITORY / "jupyter" / "overrides.json").read_text()


def test_start_leaves_the_lessons_in_the_learner_s_home_once_and_keeps_their_work(image):
    python, repository, account = image
    started = run_as(account, python, Path(account.pw_dir),
                     [str(repository / "binder" / "start"), "sh", "-c", "echo Jupyter would start here"])
    assert started.returncode == 0 and started.stdout.strip().endswith("Jupyter would start here"), started.stderr
    lessons = Path(account.pw_dir) / "lessons"
    names = {path.name for path in (REPOSITORY / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert names <= {path.name for path in lessons.glob("*.ipynb")}
    mine = lessons / sorted(names)[0]
    mine.write_text(mine.read_text().replace('"cells": [', '"cells": [ ', 1))  # the learner's work
    again = run_as(account, python, Path(account.pw_dir), [str(repository / "binder" / "start"), "true"])
    assert again.returncode == 0, again.stderr
    assert '"cells": [ ' in mine.read_text()  # a restart never overwrites it
    assert all(path.stat().st_uid == account.pw_uid for path in lessons.iterdir())
