"""Shared fixtures: the engines, with PostgreSQL skipped locally when no server runs, but never in CI."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from filelock import FileLock
from nbformat import NotebookNode

from idemlib.course.lessons import lesson_paths
from idemlib.stores import (
    DuckDBPayments,
    PostgresPayments,
    SQLitePayments,
    postgres_unavailable,
    require_servers,
)

_OWNER = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Mark the servers the course starts during this run as this run's, unless ``make`` already named an owner."""
    if not os.environ.get("IDEMLIB_SERVERS_OWNER"):
        os.environ["IDEMLIB_SERVERS_OWNER"] = config.stash[_OWNER] = f"pytest-{os.getpid()}"


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the servers this run started (lesson kernels inherit the owner), and no one else's."""
    owner = config.stash.get(_OWNER, None)
    if owner is not None:
        from idemlib.servers import OWN_KINDS, local

        local.stop(list(OWN_KINDS.values()), owner=owner)
        del os.environ["IDEMLIB_SERVERS_OWNER"]


# The slowest tests first (each prefix's tests in this order, then every other test as collected; measured with
# --durations on CI), so that on the workers (``--dist loadgroup``, see the Makefile) the long ones start together
# at the outset instead of one of them running on alone at the end. Every lesson's run comes first, then one test
# that builds the site from them; the other tests of the site come after work that needs no site, so no worker
# sits waiting for it. (The groups of tests that share one graded class go out first anyway: loadgroup hands out
# the largest groups first.)
FIRST = (
    "tests/test_notebooks.py::test_only_cells_tagged_raises_exception_raise",  # one test per lesson: every lesson's run
    "tests/test_glossary.py::test_the_site_has_the_glossary",  # the site, built from every lesson's run
    "tests/test_grade.py::test_a_function_answer_is_restarted_in_its_own_sandbox_and_graded_right",
    "tests/test_jupyterhub.py",
    "tests/test_determinism.py",  # the student copies' runs
    "tests/test_browser.py::test_no_page_has_a_serious_accessibility_violation",
    "tests/test_browser.py::test_every_page_loads_cleanly",
    "tests/test_browser.py::test_on_a_phone",
    "tests/test_binder.py",
    "tests/test_installed.py",
    "tests/test_exercises_05.py",
    "tests/test_exercises_04.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of :data:`FIRST` first, in its order (a stable sort: each keeps its place among its own),
    and under ``--dist loadgroup`` name each test's ``xdist_group`` in its ID, as pytest-xdist means to.

    pytest-xdist 3.8 tells the scheduler a test's group by writing ``@group`` into the test's ID through a
    field pytest 9.2 no longer reads (pytest-xdist issue 1386): the groups are silently ignored, and each
    worker that draws a test of a graded class grades the whole class again. After pytest-xdist's own hook
    (``trylast``), a grouped ID without its ``@group`` gets it here, as that issue's fix (pull request 1388) does.
    """
    def rank(item: pytest.Item) -> int:
        return next((place for place, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))

    items.sort(key=rank)
    if not getattr(config.option, "loadgroup", False):  # set on pytest-xdist's workers only
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(groups)}")


def need(reason: str | None) -> None:
    """Given why a server is missing (None: it answers), skip with instructions, or fail where
    ``IDEMLIB_REQUIRE_SERVERS`` requires that server (CI)."""
    if reason is not None:
        if require_servers(getattr(reason, "server", None)):
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS requires it. {reason}")
        pytest.skip(reason)


def need_postgres() -> None:
    """Skip with instructions when no PostgreSQL answers; fail instead where servers are required (CI)."""
    need(postgres_unavailable())


@pytest.fixture
def postgres() -> PostgresPayments:
    need_postgres()
    return PostgresPayments()


@pytest.fixture(params=["DuckDB", "SQLite", "PostgreSQL"])
def engine(request):
    """A fresh payments database on each engine in turn."""
    if request.param == "PostgreSQL":
        need_postgres()
        return PostgresPayments()
    return {"DuckDB": DuckDBPayments, "SQLite": SQLitePayments}[request.param]()


# `make test` runs on four workers (pytest-xdist, TEST_WORKERS in the Makefile). A lesson's run, its student
# copy's run and the site are made once per test run, not once per worker: the first worker that needs one makes it under a
# lock in the folder the workers share, and every other reads it from there (pytest-xdist's recipe for
# a session fixture run once). Two workers may run two lessons side by side; that is safe because
# every run on a shared server works in names of its own (a schema, stream or queue named after its
# process), and it keeps the lessons honest: they run while the machine is busy.
_made: dict[str, NotebookNode] = {}


def _shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run sees (the run's own base folder without workers)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[], NotebookNode]) -> NotebookNode:
    """``make()``'s notebook, made by one worker of the run and read by the others."""
    if name not in _made:
        stored = _shared_folder(tmp_path_factory) / f"{name}.ipynb"
        with FileLock(f"{stored}.lock"):
            if not stored.exists():
                notebook = make()
                nbformat.write(notebook, f"{stored}.part")
                os.replace(f"{stored}.part", stored)  # whole, or not there at all
            _made[name] = nbformat.read(stored, as_version=4)
    return _made[name]


@pytest.fixture(scope="session")
def executed_lesson(tmp_path_factory):
    """Execute a lesson once per test run, however many tests (on however many workers) read its outputs."""
    from idemlib.course.publish import execute

    return lambda path: _once(tmp_path_factory, f"executed-{path.stem}", lambda: execute(path))


@pytest.fixture(scope="session")
def site(tmp_path_factory, executed_lesson):
    """The whole site, built once per test run from the executed lessons: its folder and Sphinx's warnings."""
    from idemlib.course.site import render_site

    shared = _shared_folder(tmp_path_factory)
    out, warnings = shared / "site" / "html", shared / "site-warnings.json"
    # Every lesson first, each under its own lock; odd workers go from the last lesson back, so two
    # workers that both need the site execute half the lessons each instead of one waiting for the other.
    paths = lesson_paths()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    executed = {path: executed_lesson(path) for path in (paths[::-1] if int(worker[2:]) % 2 else paths)}
    with FileLock(f"{warnings}.lock"):
        if not warnings.exists():
            warnings.write_text(json.dumps(render_site({path: executed[path] for path in paths}, out)))
    return out, json.loads(warnings.read_text())


@pytest.fixture(scope="session")
def executed_student_copy(tmp_path_factory):
    """A lesson's student copy (solutions blanked), executed once per test run in a fresh kernel.

    The determinism test compares it with the lesson's own run; the publishing test reads its checks.
    """
    from nbclient import NotebookClient

    from idemlib.course.publish import build_student

    def make(path: Path) -> NotebookNode:
        [written] = build_student(tmp_path_factory.mktemp("student"), [path])
        notebook = nbformat.read(written, as_version=4)
        NotebookClient(notebook, timeout=180, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        return notebook

    return lambda path: _once(tmp_path_factory, f"student-{path.stem}", lambda: make(path))


@pytest.fixture(params=["in-process model", "real Redis"])
def cache(request):
    """A cache with Redis's SET NX EX: the in-process model, then the real server (skipped or failed as PostgreSQL is)."""
    from idemlib.stores.cache import MemoryCache, real_redis, redis_unavailable

    if request.param == "in-process model":
        return MemoryCache()
    need(redis_unavailable())
    return real_redis()


@pytest.fixture
def servers_dir(monkeypatch):
    """A folder of the test's own for the course's servers (``IDEMLIB_SERVERS_DIR``), which ``nobody`` (their user
    under root) can reach; every server started in it is stopped afterwards, and no other."""
    from idemlib.servers import OWN_KINDS, forget, local

    folder = Path(tempfile.mkdtemp(prefix="idemlib-servers-", dir=local.open_temp()))
    folder.chmod(0o755)
    monkeypatch.setenv("IDEMLIB_SERVERS_DIR", str(folder))
    forget()
    yield folder
    local.stop(list(OWN_KINDS.values()), folder)
    forget()
    shutil.rmtree(folder, ignore_errors=True)


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's build, driven by playwright). Skipped with a message where it is
    missing; where servers are required (CI), that is a failure."""
    if not Path(CHROMIUM).exists():
        message = "Chromium is not installed: `sudo apt-get install chromium` (Debian) to run the browser tests."
        if require_servers("chromium"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield browser
        browser.close()


AXE_VERSION = "4.14.1"  # axe-core from npm, the accessibility engine the browser tests run in each page


@pytest.fixture(scope="session")
def axe_script(tmp_path_factory) -> str:
    """axe-core's script, installed from npm (pinned) into the venv on first use. Skipped where npm is missing;
    where servers are required (CI), that is a failure."""
    folder = Path(sys.prefix) / "node"
    script = folder / "node_modules" / "axe-core" / "axe.min.js"
    with FileLock(str(_shared_folder(tmp_path_factory) / "axe.lock")):
        if not script.exists() and shutil.which("npm"):
            subprocess.run(["npm", "install", "--prefix", str(folder), "--no-save", "--no-audit", "--no-fund",
                            f"axe-core@{AXE_VERSION}"], check=False, capture_output=True, timeout=300)
    if not script.exists():
        message = ("axe-core is not installed and npm could not install it: "
                   f"`npm install --prefix {folder} axe-core@{AXE_VERSION}`.")
        if require_servers("axe-core"):
            pytest.fail(message)
        pytest.skip(message)
    return script.read_text(encoding="utf-8")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


LESSON_01 = "01_why_duplicates_arrive.ipynb"


@pytest.fixture
def jupyterlab(tmp_path):
    """The course's JupyterLab on loopback with lesson 01, started as a learner's would be; yields its URL."""
    lessons, settings = tmp_path / "lessons", tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    lessons.mkdir()
    settings.mkdir(parents=True)
    shutil.copy(lesson_paths()[1].parent / LESSON_01, lessons / LESSON_01)
    # Render every cell, not only those in view, so the whole notebook's outputs are in the page;
    # start the notebook's kernel without asking, as a learner who ticked "always start" would.
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none", "autoStartDefaultKernel": true}')
    port, token = free_port(), "course-smoke-test"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={lessons}",
         f"--LabApp.user_settings_dir={tmp_path / 'settings'}", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "jupyterlab.log").open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    # A first start on a busy machine (both cores taken by other tests) took over 60 s as a user without root.
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                what = "exited before it answered" if server.poll() is not None else "did not answer within 180 s"
                server.kill()
                log = (tmp_path / "jupyterlab.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"JupyterLab {what}; the end of its log:\n{log}")
            time.sleep(0.5)
    yield f"{base}/lab/tree/{LESSON_01}?token={token}"
    server.terminate()
    server.wait(timeout=20)
