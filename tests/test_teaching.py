"""The teacher's guide: a section for every lesson, every exercise check named in it, every link resolving."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from idemlib.course.grade import exercises_of
from idemlib.course.lessons import ROOT, lesson_paths, title_of

GUIDE = ROOT / "TEACHING.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def sections(text: str) -> dict[str, str]:
    """Each ``###`` section of the guide by its heading (links reduced to their text), with its body,
    which ends at the next heading of any level."""
    found: dict[str, str] = {}
    for part in re.split(r"^(?=#{1,3} )", text, flags=re.MULTILINE):
        heading, _, body = part.partition("\n")
        if heading.startswith("### "):
            found[re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[4:]).strip()] = body
    return found


def section_of(path: Path) -> str:
    title = title_of(nbformat.read(path, as_version=4))
    matching = [body for heading, body in sections(GUIDE.read_text(encoding="utf-8")).items() if heading == title]
    assert matching, f"TEACHING.md has no '### {title}' section for {path.name}"
    return matching[0]


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_every_lesson_has_a_section_naming_each_of_its_exercise_checks(path):
    body = section_of(path)
    checks = [exercise.name for exercise in exercises_of(nbformat.read(path, as_version=4))]
    assert checks, f"{path.name} has no exercise the guide could name"
    missing = [name for name in checks if f"`{name}`" not in body]
    assert not missing, f"the section on {path.stem} never names {missing}"


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_every_numbered_part_the_guide_names_is_a_heading_of_the_lesson(path):
    notebook = nbformat.read(path, as_version=4)
    headings = [line.lstrip("#").strip() for cell in notebook.cells if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if line.startswith("##")]
    named = re.findall(r"\*(\d+b? ?[.·] [^*\n]+)\*", section_of(path))
    assert named, f"the section on {path.stem} names none of the lesson's parts"
    missing = [name for name in named if not any(heading.startswith(name) for heading in headings)]
    assert not missing, f"the section on {path.stem} names parts the lesson does not have: {missing}"


def test_every_relative_link_resolves():
    links = LINK.findall(GUIDE.read_text(encoding="utf-8"))
    relative = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:|#", link)]
    assert relative, "the guide links to no lesson"
    broken = [link for link in relative if not (GUIDE.parent / link).exists()]
    assert not broken, f"TEACHING.md links to missing files: {broken}"


def test_sections_are_found_by_heading_with_links_reduced_to_their_text():
    assert sections("### [01 · A](notebooks/01_a.ipynb)\nbody `check_x`\n### 02 · B\n## Grading\n`check_y`\n") == {
        "01 · A": "body `check_x`\n", "02 · B": ""}


def test_the_site_page_links_lessons_as_pages(site):
    out, _ = site
    html = (out / "teaching.html").read_text(encoding="utf-8")
    assert 'href="01_why_duplicates_arrive.html"' in html and not re.search(r'href="[^"]*\.ipynb', html)
    assert 'href="glossary.html"' in html
