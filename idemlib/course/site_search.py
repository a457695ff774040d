"""The site's search: status codes and numbers found, and each result shown with the sentence that matched.

Sphinx's search leaves out every purely numeric word, in its index and in the query alike, so
"409" finds nothing on a course where lesson 08 is about 409s. And it fetches each result's page
to quote it, which a browser refuses for a site opened from ``file://``, and quotes the first
occurrence in the page's whole main area, its contents list included.

So the course indexes numbers (:class:`SearchWithNumbers`), and after the build
:func:`improve_search` writes two things beside Sphinx's own: the text of every page's article,
in a script the search page loads (no fetch, so ``file://`` works), and Sphinx's own
``searchtools.js`` with three small changes (:func:`patched_searchtools`), each asserted, so a
Sphinx upgrade that moves them fails the build's tests instead of silently searching less.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from sphinx.search.en import SearchEnglish

PAGE_TEXTS = "course-page-texts.js"


class SearchWithNumbers(SearchEnglish):
    """English, with numbers kept: 409, 422, 24 and 30 are words a reader of this course searches for."""

    def word_filter(self, word: str) -> bool:
        return word not in self.stopwords


def index_numbers(app: Any) -> None:
    """Use :class:`SearchWithNumbers` for this build's English index (a Sphinx ``setup`` step)."""
    from sphinx.search import languages

    languages["en"] = SearchWithNumbers


# (what Sphinx 9's searchtools.js says, what the course's says instead)
PATCHES = [
    # 1. Numbers are query words too.
    ("if (stopwords.has(queryTermLower) || queryTerm.match(/^\\d+$/)) return;",
     "if (stopwords.has(queryTermLower)) return;"),
    # 2. A result's summary from the page texts the search page loaded, when it has them.
    ("  } else if (showSearchSummary)\n    fetch(requestUrl)",
     "  } else if (showSearchSummary && window.COURSE_PAGE_TEXTS && docName in window.COURSE_PAGE_TEXTS) {\n"
     "    listItem.appendChild(Search.makeSearchSummary(window.COURSE_PAGE_TEXTS[docName], searchTerms, anchor, true));\n"
     "    if (SPHINX_HIGHLIGHT_ENABLED)\n"
     "      highlightTerms.forEach((term) => _highlightText(listItem, term, \"highlighted\"));\n"
     "  } else if (showSearchSummary)\n    fetch(requestUrl)"),
    # 3. The summary starts at the sentence holding the first search word the text has.
    ("  makeSearchSummary: (htmlText, keywords, anchor) => {\n    const text = Search.htmlToText(htmlText, anchor);",
     "  makeSearchSummary: (htmlText, keywords, anchor, isText) => {\n"
     "    const text = isText ? htmlText : Search.htmlToText(htmlText, anchor);"),
    ("    const actualStartPosition = [...keywords]\n      .map((k) => textLower.indexOf(k.toLowerCase()))\n"
     "      .filter((i) => i > -1)\n      .slice(-1)[0];\n"
     "    const startWithContext = Math.max(actualStartPosition - 120, 0);",
     # The query as typed first ("24 h"), then its words, longest first, each at a word's start (so "lease"
     # is not found in "release"), then Sphinx's stemmed words ("leas" would match "least").
     "    const query = (new URLSearchParams(window.location.search).get(\"q\") || \"\").toLowerCase().trim();\n"
     "    const candidates = [query, ...query.split(/\\s+/).sort((a, b) => b.length - a.length), ...keywords];\n"
     "    const actualStartPosition = candidates.filter((w) => w)\n"
     "      .map((w) => textLower.search(new RegExp(\"(?:^|\\\\W)\" + _escapeRegExp(w.toLowerCase()))))\n"
     "      .find((i) => i > -1);\n"
     "    const dot = actualStartPosition === undefined ? -1 : text.lastIndexOf(\". \", actualStartPosition);\n"
     "    const startWithContext = actualStartPosition === undefined ? 0\n"
     "      : Math.max(dot < 0 ? 0 : dot + 2, actualStartPosition - 120);"),
]


def patched_searchtools(source: str) -> str:
    """Sphinx's ``searchtools.js`` with the course's changes; raises if one no longer applies."""
    for old, new in PATCHES:
        if source.count(old) != 1:
            raise RuntimeError(f"Sphinx's searchtools.js changed; the course's search patch no longer applies: {old[:60]!r}")
        source = source.replace(old, new)
    return source


BLOCKS = {"br", "dd", "div", "dt", "figcaption", "h1", "h2", "h3", "h4", "h5", "h6", "li", "p", "pre", "section",
          "table", "td", "th", "tr"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _ArticleText(HTMLParser):
    """The text a reader reads in a page's article: no headings' ¶ links, scripts, styles or source code."""

    SKIPPED = {"script", "style", "nav", "svg"}  # a picture's labels are not sentences

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0  # inside <article> when > 0
        self.skipping = 0
        self.words: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "article" and "bd-article" in classes:
            self.depth = 1
        elif self.depth:
            self.depth += tag not in VOID
            if self.skipping or tag in self.SKIPPED or "headerlink" in classes:
                self.skipping += tag not in VOID
            elif tag in BLOCKS:
                self.words.append(" ")  # blocks are apart; inline tags (<b>, <code>) are not

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in VOID:
            self.depth -= 1
            if self.skipping:
                self.skipping -= 1

    def handle_data(self, data: str) -> None:
        if self.depth and not self.skipping:
            self.words.append(data)


def article_text(page: str) -> str:
    """The readable text of a built page's article, its whitespace collapsed."""
    parser = _ArticleText()
    parser.feed(page)
    return " ".join("".join(parser.words).split())


def improve_search(out: Path) -> None:
    """After a build: numbers in the query, summaries from the page texts, each from its matching sentence."""
    static = out / "_static"
    tools = static / "searchtools.js"
    tools.write_text(patched_searchtools(tools.read_text(encoding="utf-8")), encoding="utf-8")
    texts = {path.relative_to(out).with_suffix("").as_posix(): article_text(path.read_text(encoding="utf-8"))
             for path in sorted(out.glob("*.html")) if path.name not in ("search.html", "genindex.html")}
    (static / PAGE_TEXTS).write_text(f"window.COURSE_PAGE_TEXTS = {json.dumps(texts, ensure_ascii=False)};\n",
                                     encoding="utf-8")
    search = out / "search.html"
    page = search.read_text(encoding="utf-8")
    if PAGE_TEXTS not in page:
        tag = f'<script src="_static/{html.escape(PAGE_TEXTS)}"></script>'
        page = re.sub(r"(<script[^>]*searchtools\.js[^>]*></script>)", lambda found: tag + found.group(1), page, count=1)
        search.write_text(page, encoding="utf-8")
