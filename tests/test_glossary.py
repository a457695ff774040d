"""The glossary: every term defined, each linked to a lesson that really uses it, and lessons linking back."""

from __future__ import annotations

import copy

import nbformat
import pytest

from idemlib.course.glossary import link_first_uses, terms
from idemlib.course.lessons import LESSONS, lesson_paths

ENTRIES = terms()


def prose(stem: str) -> str:
    notebook = nbformat.read(LESSONS / f"{stem}.ipynb", as_version=4)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


@pytest.mark.parametrize("term", ENTRIES, ids=lambda t: t.anchor)
def test_every_term_is_defined_and_links_to_lessons_that_use_it(term):
    assert len(term.definition.split()) >= 12, f"{term.names[0]}: define it in a sentence or two"
    assert term.lessons, f"{term.names[0]} links to no lesson"
    for stem in term.lessons:
        assert (LESSONS / f"{stem}.ipynb").exists(), f"{term.names[0]} links to a missing lesson {stem}"
        assert term.pattern().search(prose(stem)), f"{stem} never says {term.names[0]!r}"


def test_anchors_are_unique():
    anchors = [term.anchor for term in ENTRIES]
    assert len(anchors) == len(set(anchors))


@pytest.mark.parametrize("path", lesson_paths(), ids=lambda p: p.stem)
def test_each_lesson_links_the_first_use_of_every_term_it_uses(path):
    notebook = copy.deepcopy(nbformat.read(path, as_version=4))
    assert link_first_uses(notebook, ENTRIES) == 0, "run python -m idemlib.course.glossary to link the new terms"


def test_linking_skips_code_links_and_headings_and_links_once():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · Title with an inbox"),
        nbformat.v4.new_markdown_cell("## The inbox\n\n`inbox` in code, [an inbox](x.ipynb), then the inbox itself."),
        nbformat.v4.new_markdown_cell("Another inbox, and an ack."),
    ])
    assert link_first_uses(notebook, ENTRIES) == 2
    assert notebook.cells[1].source.endswith("then the [inbox](GLOSSARY.md#inbox) itself.")
    assert notebook.cells[2].source == "Another inbox, and an [ack](GLOSSARY.md#ack)."
    assert link_first_uses(notebook, ENTRIES) == 0


def test_the_site_has_the_glossary_with_links_to_lesson_pages(site):
    out, _ = site
    text = (out / "glossary.html").read_text()
    assert 'id="inbox"' in text and 'href="02_save_the_id_with_the_work.html"' in text and ".ipynb" not in text
