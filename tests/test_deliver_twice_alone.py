"""deliver-twice installed alone (``pip install --target`` of just its folder) runs a small project's tests with
nothing else on the path: its done-condition of depending on pytest alone, measured rather than assumed."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deliver-twice" / "examples"))

import install_alone  # noqa: E402 - the script the README and lesson 11 show, run as it is

PYTEST_AND_ITS_OWN = ["deliver_twice", "iniconfig", "packaging", "pluggy", "pygments", "pytest"]


def test_installed_alone_it_brings_pytest_only_and_the_projects_tests_pass_and_catch(tmp_path):
    measured = install_alone.main(tmp_path / "alone")
    assert measured["packages"] == PYTEST_AND_ITS_OWN, "pytest's own dependencies, nothing of the course"
    assert measured["tests exit code"] == 0 and str(measured["tests"]).startswith("2 passed"), measured
    assert measured["also importable"] == [], "no idemlib, pandas or psycopg reachable in the isolated run"
    assert float(str(measured["size MB"])) < 20
