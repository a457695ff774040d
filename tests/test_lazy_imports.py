"""``idemlib`` and ``idemlib.course.exercises`` import their names on first use (PEP 562): every public name
still imports as before, and a process that needs none of the heavy libraries (the grader's judge, a hand-in's
sandbox, the course's command) does not load them at start."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

import idemlib
import idemlib.course.exercises as exercises
import idemlib.stores

HEAVY = ("pandas", "numpy", "duckdb", "psycopg", "redis", "matplotlib")


def loaded_after(code: str) -> list[str]:
    """The top-level modules a fresh interpreter holds after running ``code``."""
    shown = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\n"
                            "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"],
                           capture_output=True, text=True, check=True)
    return json.loads(shown.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", ["import idemlib", "import idemlib.course.exercises.feedback",
                                  "from idemlib.course.exercises import Feedback, one_of",
                                  "import idemlib.course.carry, idemlib.course.judge, idemlib.course.referee"])
def test_starting_a_judge_or_a_sandbox_loads_no_heavy_library(code):
    assert [name for name in loaded_after(code) if name in HEAVY] == []


def test_the_simulator_and_duckdb_load_neither_the_postgresql_nor_the_redis_client():
    loaded = loaded_after("from idemlib.stores import DuckDBPayments\nfrom idemlib.handlers import InboxHandler\n"
                          "from idemlib.explore import crash_matrix")
    assert "duckdb" in loaded and "psycopg" not in loaded and "redis" not in loaded


@pytest.mark.parametrize("package", [idemlib, idemlib.stores], ids=lambda package: package.__name__)
def test_every_public_name_imports_and_is_its_modules_own(package):
    assert sorted(package._MODULE_OF) == sorted(package.__all__)
    for name in package.__all__:
        value = getattr(package, name)
        assert value is getattr(importlib.import_module(package._MODULE_OF[name]), name)
        assert name in dir(package)
    namespace: dict[str, object] = {}
    exec(f"from {package.__name__} import *", namespace)
    assert set(package.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'Brokr'"):
        package.Brokr  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {package.__name__} import Brokr")


def test_a_lessons_check_imports_its_lesson_only():
    loaded = loaded_after("from idemlib.course.exercises import check_inbox_insert")
    assert "idemlib" in loaded
    found = subprocess.run([sys.executable, "-c", "from idemlib.course.exercises import check_inbox_insert\n"
                            "import sys\nprint(sorted(m for m in sys.modules if '.lesson_' in m))"],
                           capture_output=True, text=True, check=True).stdout
    assert found.strip() == "['idemlib.course.exercises.lesson_02']"


def test_the_exercises_package_reexports_every_lessons_names():
    namespace: dict[str, object] = {}
    exec("from idemlib.course.exercises import *", namespace)
    lessons = [info.name for info in pkgutil.iter_modules(exercises.__path__) if info.name.startswith("lesson_")]
    assert len(lessons) == 13
    for module in lessons:
        lesson = importlib.import_module(f"idemlib.course.exercises.{module}")
        for name in lesson.__all__:
            assert namespace[name] is getattr(lesson, name) is getattr(exercises, name), name
    assert {"Feedback", "one_of", "check_key_function"} <= set(dir(exercises))
    with pytest.raises(AttributeError, match="check_nothing"):
        exercises.check_nothing  # noqa: B018
