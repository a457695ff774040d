"""The site's search, without a browser: numbers indexed, Sphinx's script patched where it says it is, page texts."""

from __future__ import annotations

from pathlib import Path

import pytest
import sphinx

from idemlib.course.site_search import PATCHES, SearchWithNumbers, article_text, patched_searchtools

SEARCHTOOLS = Path(sphinx.__file__).parent / "themes" / "basic" / "static" / "searchtools.js"


def test_numbers_are_words_of_the_index_and_stopwords_are_not():
    language = SearchWithNumbers(None)
    assert language.word_filter("409") and language.word_filter("24") and language.word_filter("lease")
    assert not language.word_filter("the")


def test_every_patch_applies_once_to_the_installed_sphinx_and_a_changed_sphinx_fails_loudly():
    patched = patched_searchtools(SEARCHTOOLS.read_text(encoding="utf-8"))
    assert all(new in patched for _, new in PATCHES)
    assert "queryTerm.match(/^\\d+$/)" not in patched
    with pytest.raises(RuntimeError, match="no longer applies"):
        patched_searchtools(SEARCHTOOLS.read_text(encoding="utf-8").replace("makeSearchSummary", "summarise"))


def test_a_pages_text_is_its_article_without_navigation_scripts_or_heading_links():
    page = ("<html><body><nav>Lessons 1. 2. 3.</nav><main><article class='bd-article'><h2>Keys"
            "<a class='headerlink' href='#k'>¶</a></h2><p>A 409 means <b>in progress</b>.</p>"
            "<script>var x = 1;</script><nav class='toc'>contents</nav><br><p>Then retry.</p></article>"
            "<div class='bd-sidebar-secondary'>On this page</div></main></body></html>")
    assert article_text(page) == "Keys A 409 means in progress. Then retry."
