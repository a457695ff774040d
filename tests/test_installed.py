"""The course installed as an image holds it: from its wheel, not editable, in an environment the learner cannot write.

The learner (another Unix user where the tests run as root) starts the course's
servers; their records, data and secret go to ``~/.cache/idemlib/var`` in the
learner's home, readable by the learner alone, and nothing is written to the
environment or the repository.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from other_users import REPOSITORY, as_account, installed_course, learner_account, python_for_anyone

from idemlib.servers.local import open_temp


@pytest.fixture(scope="module")
def environment() -> Iterator[Path]:
    if python_for_anyone() is None:
        pytest.skip("no Python here that another user may run")
    folder = Path(tempfile.mkdtemp(prefix="idemlib-installed-", dir=open_temp()))
    folder.chmod(0o755)
    python = installed_course(folder / "env")
    subprocess.run(["chmod", "-R", "a-w", str(folder / "env")], check=True)
    yield python
    subprocess.run(["chmod", "-R", "u+w", str(folder)], check=True)
    shutil.rmtree(folder, ignore_errors=True)


def as_learner(python: Path, account, *arguments: str) -> subprocess.CompletedProcess[str]:
    variables = {key: value for key, value in os.environ.items()
                 if not key.startswith("IDEMLIB_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), *arguments], capture_output=True, text=True, timeout=180,
                          cwd=account.pw_dir, env={**variables, "HOME": account.pw_dir}, **as_account(account))


def test_the_installed_course_keeps_its_servers_in_the_learner_s_home(environment, request):
    root = Path(tempfile.mkdtemp(prefix="idemlib-homes-", dir=open_temp()))
    root.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    with learner_account(f"idemlib-ro-{os.getpid() % 100000}", root / "learner") as account:
        home = Path(account.pw_dir)
        try:
            where = as_learner(environment, account, "-c", "import idemlib, os, sys; from idemlib.servers.local "
                               "import servers_dir; print(idemlib.__file__); print(servers_dir()); "
                               "print(os.access(sys.prefix, os.W_OK))")
            assert where.returncode == 0, where.stderr
            module, folder, writable = where.stdout.split()
            assert Path(module).is_relative_to(environment.parent.parent)  # the wheel's copy, not the repository's
            assert not Path(module).is_relative_to(REPOSITORY) and writable == "False"
            assert Path(folder) == home / ".cache" / "idemlib" / "var"
            started = as_learner(environment, account, "-m", "idemlib.servers", "start")
            assert started.returncode == 0, started.stderr
            urls = dict(line.split("=", 1) for line in started.stdout.splitlines())
            assert sorted(urls) == ["IDEMLIB_NATS_URL", "IDEMLIB_POSTGRES_URL", "IDEMLIB_REDIS_URL"]
            secret = (Path(folder) / "secret").read_text().strip()
            assert all(secret in url for url in urls.values())
            assert stat.S_IMODE((Path(folder) / "secret").stat().st_mode) == 0o600
            assert (Path(folder) / "secret").stat().st_uid == account.pw_uid
            assert {path.name for path in Path(folder).glob("*.json")} == {"postgres.json", "redis.json", "nats.json"}
            used = as_learner(environment, account, "-c", "from idemlib.stores import postgres_unavailable; "
                              "from idemlib.stores.cache import redis_unavailable; from idemlib.servers import NATS; "
                              "print(postgres_unavailable(), redis_unavailable(), NATS.unavailable())")
            assert used.returncode == 0, used.stderr
            assert used.stdout.split("\n")[-2] == "None None None"  # each found again, and each takes the login
        finally:
            stopped = as_learner(environment, account, "-m", "idemlib.servers", "stop")
        assert stopped.returncode == 0 and len(stopped.stdout.splitlines()) == 3, stopped.stderr
