"""The code's types are checked and its lint is clean, so `make test` (and CI) fails on either.

Both tools read their settings from pyproject.toml ([tool.mypy], [tool.ruff]); the versions are
pinned in its ``test`` extra, so a new release's new checks arrive by a commit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_finds_no_type_error() -> None:
    result = run("mypy")  # the files and the strictness are [tool.mypy]'s
    assert result.returncode == 0, f"mypy found type errors:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout


def test_ruff_finds_no_lint() -> None:
    result = run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert result.returncode == 0, f"ruff found lint:\n{result.stdout}{result.stderr}"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A file with a type error and an unused import is caught by each tool with the project's settings."""
    bad = tmp_path / "bad.py"
    bad.write_text('import os\n\n\ndef twice(n: int) -> int:\n    return "no"\n', encoding="utf-8")
    typed = run("mypy", "--config-file", str(ROOT / "pyproject.toml"), str(bad))
    assert typed.returncode == 1 and '"str", expected "int"' in typed.stdout, typed.stdout
    linted = run("ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert linted.returncode == 1 and "F401" in linted.stdout, linted.stdout


def test_steps_are_generators_so_a_value_returned_or_a_close_is_checked(tmp_path: Path) -> None:
    """The simulator closes a handler's steps when its process dies, and a helper may end its steps with a
    value (``fresh = yield from self._pay(...)``): Steps says the first, StepsThen the second."""
    steps = tmp_path / "steps.py"
    steps.write_text("from idemlib.handlers import Steps, StepsThen\n\n\n"
                     "def run() -> Steps:\n    yield 'charge'\n    return True\n\n\n"
                     "def pay() -> StepsThen[bool]:\n    yield 'call provider'\n    return True\n\n\n"
                     "def drive(job: Steps) -> None:\n    job.close()\n\n\n"
                     "def settle() -> Steps:\n    fresh: bool = yield from pay()\n    yield str(fresh)\n", encoding="utf-8")
    typed = run("mypy", "--config-file", str(ROOT / "pyproject.toml"), str(steps))
    errors = [line for line in typed.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "steps.py:6: error: No return value expected" in errors[0], typed.stdout
