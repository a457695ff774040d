"""Keeps the set-up files, the docs and the data honest with each other."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

import idemlib
from idemlib.facts import load_facts

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# conda-forge's psycopg brings libpq; its powertools needs redis-py, listed on its own, for the [redis] extra.
CONDA_NAMES = {"python-duckdb": "duckdb", "psycopg[binary]": "psycopg", "redis-py": "redis",
               "aws-lambda-powertools": "aws-lambda-powertools[redis]"}


LOCAL_DISTRIBUTION = "deliver-twice"


def requirement(spec: str) -> tuple[str, str]:
    spec = spec.partition(";")[0].replace(" ", "")  # a platform marker is pip's to read
    name, _, version = spec.partition(">=" if ">=" in spec else "==")
    return CONDA_NAMES.get(name, name).lower(), version


def test_environment_yml_installs_what_pyproject_asks_for():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(requirement(s) for s in project["dependencies"])
    for specs in project["optional-dependencies"].values():
        wanted.update(requirement(s) for s in specs if not s.startswith("idemlib["))
    conda = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    pip_part = next(item["pip"] for item in conda if isinstance(item, dict))
    listed = dict(requirement(s) for s in [*conda, *pip_part]
                  if isinstance(s, str) and not s.startswith(("python>", "pip", "-e")))
    # deliver-twice is this repository's own second distribution: installed from its folder, as make does.
    local = {name for name in wanted if name.startswith(LOCAL_DISTRIBUTION)}
    assert listed == {name: version for name, version in wanted.items() if name not in local}
    assert pip_part[-2:] == ["-e ./deliver-twice[postgres]", "-e ."]


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs: clear them"


def markdown_links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)#\s]+)\)", text)


def test_every_relative_link_in_the_lessons_and_the_readme_resolves():
    sources = [(ROOT / "README.md", (ROOT / "README.md").read_text())]
    for path in NOTEBOOKS:
        sources.append((path, "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)))
    for path, text in sources:
        for link in markdown_links(text):
            if not link.startswith(("http://", "https://")):
                assert (path.parent / link).exists(), f"{path.name} links to missing {link}"


def test_the_readme_and_the_map_in_lesson_00_list_every_lesson():
    readme = (ROOT / "README.md").read_text()
    course_map = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
    map_text = "\n".join(c.source for c in course_map.cells)
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in readme, f"README.md does not list {path.name}"
        assert f"({path.name})" in map_text, f"the map in 00_start_here does not link {path.name}"


def test_every_fact_has_a_claim_a_source_a_quote_and_the_version_it_holds_for_and_every_quoted_fact_exists():
    facts = load_facts()
    missing = facts[["value", "subject", "source", "quote", "holds_for"]].isna()
    assert not missing.any().any(), f"facts without a claim, source, quote or version: {list(facts.index[missing.any(axis=1)])}"
    assert not facts["source"].str.contains(r"\bseed\s*\d", regex=True).any(), "cite the page the figure is read from"
    quoted = set()
    for path in NOTEBOOKS:
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        quoted |= set(re.findall(r"fact\([\"'](\w+)[\"']\)", source))
    assert quoted <= set(facts.index)


def test_every_fact_is_one_row():
    """A merge that keeps both sides of a row makes fact(name) return a table, and every lesson reading it fails."""
    names = pd.read_csv(ROOT / "data" / "facts.csv", dtype=str)["fact"]
    assert not names.duplicated().any(), f"facts.csv holds these facts twice: {sorted(set(names[names.duplicated()]))}"


def test_a_fact_that_a_lesson_shows_on_its_server_names_no_version_by_hand():
    """The lessons print the version of the server a cell ran on; a version typed beside "in lesson N" drifts
    from it (rows once said PostgreSQL 15 and NATS 2.9 where the lessons print 18.6 and 2.15.1)."""
    typed = {}
    for name, holds_for in load_facts()["holds_for"].items():
        for clause in re.split(r"[;()]", holds_for):
            if "lesson" in clause and re.search(r"\d", re.sub(r"lessons? \d+(\s*(,|and|or)\s*\d+)*", "", clause)):
                typed[name] = clause.strip()
    assert not typed, f"say 'on the server whose version the lesson prints' instead: {typed}"


def test_a_table_of_quotes_reads_whole_as_plain_text_and_wraps_as_html():
    """An executed lesson read in a terminal or a diff shows text/plain: a Styler's would be only its address."""
    rows = load_facts().loc[["pg_skip_locked", "rfc9110_idempotent_definition"], ["quote", "holds_for"]]
    styled = rows.style.set_properties(**{"text-align": "left"})
    plain = repr(styled)
    assert "Styler" not in plain and "object at" not in plain
    for quote in rows["quote"]:
        assert f"quote: {quote}" in plain  # whole, never cut at display.max_colwidth
    assert "pg_skip_locked" not in plain  # the course's key is not for readers
    html = styled.to_html()
    assert "white-space: normal" in html and rows["quote"].iloc[0] in html and "pg_skip_locked" not in html


def test_unknown_facts_are_refused_with_the_fix():
    with pytest.raises(KeyError, match="add a row"):
        idemlib.fact("kafka_magic_number")


def test_every_public_name_says_what_it_does():
    missing = [name for name in idemlib.__all__
               if (inspect.isclass(obj := getattr(idemlib, name)) or inspect.isfunction(obj)) and not inspect.getdoc(obj)]
    assert missing == []


def test_the_readme_names_every_module_of_the_package():
    readme = (ROOT / "README.md").read_text()
    modules = {p.stem for p in (ROOT / "idemlib").glob("*.py") if p.stem not in {"__init__", "clock", "trace"}}
    modules.add("stores/")
    for module in modules:
        assert f"`{module}`" in readme, f"README.md does not mention idemlib's {module}"


def test_every_fact_cites_a_source_a_reader_can_open():
    """A reader checks a figure at its source; the course's own reference texts are not given to students, so a
    row citing them would send a reader nowhere (and cite the course for a vendor's figure)."""
    facts = load_facts()
    own = facts[facts["source"].str.contains(r"\breference (card|article)\b", case=False, regex=True)]
    assert list(own.index) == [], "cite the vendor's or the standard's own page for these"
