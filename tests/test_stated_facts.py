"""Statements in the guides and the repository's settings that the code makes true, held to it:
the teacher's guide's times and servers, the README's servers, and the paths .gitattributes names."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import nbformat
import pytest

from idemlib.course.class_time import class_minutes, code_cells, glance_table, prose_words, servers_by_lesson
from idemlib.course.lessons import ROOT, lesson_paths, title_of
from idemlib.servers import SERVERS, require_servers

GUIDE = ROOT / "TEACHING.md"
README = ROOT / "README.md"


def test_the_guides_at_a_glance_table_is_the_one_the_lessons_make() -> None:
    made = glance_table()
    assert made in GUIDE.read_text(encoding="utf-8"), (
        "TEACHING.md's at-a-glance sentence and table have drifted from the lessons (or the README's servers); "
        f"put in what `python -m idemlib.course.class_time` prints:\n{made}")


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_each_lessons_section_gives_the_time_of_the_table(path: Path) -> None:
    lesson = nbformat.read(path, as_version=4)
    guide = GUIDE.read_text(encoding="utf-8")
    section = guide.split(f"### [{title_of(lesson)}]", 1)[1].split("\n### ", 1)[0]
    stated = re.search(r"\*\*Time\.\*\* About (\d+) minutes", section)
    assert stated, f"the guide's section on {path.stem} gives no '**Time.** About N minutes'"
    assert int(stated.group(1)) == class_minutes(lesson), f"{path.stem}: the guide's rule gives {class_minutes(lesson)} minutes"


def test_the_rule_counts_prose_cells_and_exercises_and_rounds_half_up() -> None:
    prose = nbformat.v4.new_markdown_cell("[contents](00_start_here.ipynb)\n\n" + "word " * 148
                                          + "[a link](https://example.org/a/very/long/address)")
    lesson = nbformat.v4.new_notebook(cells=[prose, nbformat.v4.new_code_cell("1"), nbformat.v4.new_code_cell("  ")])
    assert prose_words(lesson) == 150  # the navigation line and the link's address are not read out
    assert code_cells(lesson) == 1  # a blank cell is not run
    assert class_minutes(lesson) == 5  # 2.5 + 1 = 3.5 minutes, rounded to five
    solution = nbformat.v4.new_code_cell("answer = 1")
    solution.metadata["tags"] = ["solution"]
    lesson.cells += [solution, nbformat.v4.new_code_cell("check_answer(answer)")]
    assert class_minutes(lesson) == 15  # 2.5 + 3 + 10 = 15.5


def test_the_servers_column_is_read_from_the_readmes_table_of_servers() -> None:
    readme = ("| server | variable | used by | without it |\n|---|---|---|---|\n"
              "| PostgreSQL | x | 02, 12 | y |\n| NATS JetStream | x | 07, 12 | y |\n\nafter the table 03\n")
    assert servers_by_lesson(readme) == {"02": ["PostgreSQL"], "07": ["NATS"], "12": ["PostgreSQL", "NATS"]}
    assert set(servers_by_lesson(README.read_text(encoding="utf-8"))) <= {path.name[:2] for path in lesson_paths()}


PRINTED = re.compile(r"^(\S+)[^\n]* used here: ", re.MULTILINE)


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_each_lesson_runs_on_the_servers_the_readme_says_it_uses(path: Path, executed_lesson) -> None:
    """Every server that prints its version when first used ("PostgreSQL used here: ..."), checked on
    the executed lesson; RabbitMQ prints none, so its column is the README's word alone."""
    printing = {server.name.split()[0]: server for server in SERVERS.values() if server.version is not None}
    named = set(servers_by_lesson(README.read_text(encoding="utf-8")).get(path.name[:2], [])) & set(printing)
    missing = {name for name in named if printing[name].unavailable() is not None}
    if missing - {name for name in missing if require_servers(printing[name].key)}:
        pytest.skip(f"not running here: {', '.join(sorted(missing))}")
    executed = executed_lesson(path)
    text = "".join(output.get("text", "") for cell in executed.cells if cell.cell_type == "code"
                   for output in cell.get("outputs", []) if output.output_type == "stream")
    printed = set(PRINTED.findall(text)) & set(printing)
    assert printed == named, (f"{path.stem} ran on {sorted(printed) or 'no server'}, the README's table of servers "
                              f"says {sorted(named) or 'none'}")


def test_every_path_gitattributes_names_exists() -> None:
    patterns = [line.split()[0] for line in (ROOT / ".gitattributes").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns, ".gitattributes names no path"
    gone = [pattern for pattern in patterns if not list(ROOT.glob(pattern))]
    assert not gone, f".gitattributes names paths that do not exist (moved?): {gone}"


def test_the_warning_filters_hide_the_sites_extensions_deprecations_not_the_courses() -> None:
    """pyproject.toml's filterwarnings, as pytest applies them inside every test."""
    with warnings.catch_warnings(record=True) as caught:
        for module in ("myst_parser.sphinx_ext.myst_refs", "sphinx_book_theme._transforms", "idemlib.course.site"):
            for category in (DeprecationWarning, PendingDeprecationWarning):
                warnings.warn_explicit(f"{category.__name__} from {module}", category, "x.py", 1, module=module)
    assert sorted(str(warning.message) for warning in caught) == [
        "DeprecationWarning from idemlib.course.site", "PendingDeprecationWarning from idemlib.course.site"]
