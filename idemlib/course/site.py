"""The notes as a website: Sphinx with MyST-NB and the Book theme, the engine under Jupyter Book.

Every page has its lesson's title, a sidebar of all lessons with the glossary and
the teacher's guide, search over every page, an "on this page" list and linkable
headings; nothing is loaded from the network. Lessons are executed by
:func:`idemlib.course.publish.execute` and kept in a cache keyed by the lesson and
the code and data it runs on, so a second build with nothing changed only renders.

Before Sphinx sees a lesson, :func:`site_notebook` prepares it for a reader: a
solution and its check's confirmation are folded together (the check's "Correct"
gives the answer away), a deliberate error shows as its one-line message, and no
path of the machine that built the site appears on a page.

A lesson page can carry launch buttons (Binder, the class's JupyterHub) that open the
learner's own copy of that lesson; a teacher sets them in one place, ``[tool.idemlib.launch]``
in ``pyproject.toml`` (:class:`Launch`), and a site built without them has none.
"""

from __future__ import annotations

import copy
import hashlib
import html
import io
import json
import re
import shutil
import tomllib
from collections.abc import Iterable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import nbformat
from nbformat import NotebookNode

from idemlib.course.lessons import LESSONS, NAV_LINE, ROOT, lesson_paths, title_of
from idemlib.course.publish import execute, first_goal

STATIC = Path(__file__).resolve().parent / "templates" / "site"
# The glossary and the teacher's guide, as the site names them, with their titles.
PROSE_PAGES = {"GLOSSARY.md": ("glossary", "Glossary"), "TEACHING.md": ("teaching", "Teaching the course")}
PROSE_SOURCES = {"GLOSSARY.md": LESSONS / "GLOSSARY.md", "TEACHING.md": ROOT / "TEACHING.md"}

# Said by every Sphinx build after the first in one process (docutils keeps the nodes, directives and
# roles extensions register for the process): about the process, not the site, so they are left out
# and a second build's warnings equal the first's.
REBUILT_IN_ONE_PROCESS = re.compile(r"while setting up extension [\w.]+: .* is already registered")

CONF = '''# Written by idemlib.course.site; the site's settings live there.
project = "The Idempotent Consumer"
author = "The course's authors"
extensions = ["myst_nb"]
html_theme = "sphinx_book_theme"
html_title = "The Idempotent Consumer"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = ["course.js"]
html_favicon = "_static/favicon.svg"  # a page without one makes the browser ask the server for /favicon.ico
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "navigation_with_keys": True,
    # No top bar: the sidebar has the search. The bar's own sidebar buttons, hidden here, come first in the
    # page, so pydata-sphinx-theme 0.20 wired them instead of the Book theme's visible ones and a phone's
    # ☰ did nothing (pydata-sphinx-theme issue 2451, sphinx-book-theme issue 988).
    "navbar_persistent": [],
}
html_context = {"default_mode": "light"}  # the plots are drawn for a white page
myst_heading_anchors = 3
nb_execution_mode = "off"
# With no kernel behind a page, a widget's own HTML (the step-through's storyboard and player)
# is what a reader should see; and no widget manager is fetched from a CDN.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "text/html", 0), ("html", "application/vnd.jupyter.widget-view+json", None)]
nb_merge_streams = True
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type"]


def setup(app):
    from idemlib.course.site import open_the_learners_copy
    from idemlib.course.site_search import index_numbers

    index_numbers(app)  # 409, 422 and 24 are words a reader of this course searches for
    app.connect("html-page-context", open_the_learners_copy, priority=502)  # after the theme's launch buttons
'''
# Where binder/start leaves each learner's own copies of the lessons, relative to their home.
LEARNERS_COPIES = "lessons"


@dataclass(frozen=True)
class Launch:
    """The launch buttons of every lesson page, as ``[tool.idemlib.launch]`` in ``pyproject.toml`` sets them.

    ``repository`` is the course's repository on GitHub (``https://github.com/OWNER/REPO``), which Binder builds
    and nbgitpuller pulls; ``binderhub`` a BinderHub (``https://mybinder.org``) and ``jupyterhub`` the class's hub
    (``https://hub.example.edu``), each a button when set. No repository, or neither hub: no buttons."""

    repository: str = ""
    branch: str = "main"
    binderhub: str = ""
    jupyterhub: str = ""

    def theme_options(self) -> dict[str, Any]:
        """sphinx-book-theme's options for these buttons (none when there is nothing to launch)."""
        if not self.repository or not (self.binderhub or self.jupyterhub):
            return {}
        return {"repository_url": self.repository, "repository_branch": self.branch,
                # The page's lesson in the learner's copies (binder/start makes them), never the full lesson with
                # its solutions: Binder opens lessons/NN_*.ipynb in the home, where it puts the repository.
                "path_to_docs": LEARNERS_COPIES,
                "launch_buttons": {"binderhub_url": self.binderhub, "jupyterhub_url": self.jupyterhub,
                                   "notebook_interface": "jupyterlab"}}


def launch_settings(pyproject: Path = ROOT / "pyproject.toml") -> Launch:
    """The teacher's launch buttons from ``pyproject``'s ``[tool.idemlib.launch]`` (none when it has no such table);
    a setting the course does not know is refused by name, so a typo never silently drops a button."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("idemlib", {}).get("launch", {})
    known = {field.name for field in fields(Launch)}
    if unknown := sorted(set(table) - known):
        raise ValueError(f"[tool.idemlib.launch] in {pyproject} has {', '.join(unknown)}; "
                         f"it takes {', '.join(sorted(known))}")
    return Launch(**{name: str(value) for name, value in table.items()})


def open_the_learners_copy(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """The JupyterHub button's nbgitpuller link opens the learner's copy in their home after pulling: the theme
    points it inside the pulled repository (``REPO/lessons/...``), where there is none."""
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            if button.get("text") != "JupyterHub":
                continue
            parts = urlsplit(button["url"])
            query = dict(parse_qsl(parts.query))
            query["urlpath"] = f"lab/tree/{LEARNERS_COPIES}/{pagename}.ipynb"
            button["url"] = urlunsplit(parts._replace(query=urlencode(query, safe="/")))


def _fingerprint(path: Path) -> str:
    """What a lesson's outputs depend on: the lesson, the package it imports, and the data it reads."""
    digest = hashlib.sha256(path.read_bytes())
    # The course's own machinery (this module, grading, publishing) changes no lesson's output; its checks do.
    machinery = set((ROOT / "idemlib" / "course").glob("*.py"))
    sources = [p for p in sorted((ROOT / "idemlib").rglob("*.py")) if p not in machinery]
    for source in sources + sorted((ROOT / "data").glob("*")):
        digest.update(source.relative_to(ROOT).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def executed_lessons(lessons: Iterable[Path], cache: Path) -> dict[Path, NotebookNode]:
    """Each lesson executed, or read back from ``cache`` when neither it nor what it runs on has changed."""
    cache.mkdir(parents=True, exist_ok=True)
    executed = {}
    for path in lessons:
        stored = cache / f"{path.stem}-{_fingerprint(path)}.ipynb"
        if not stored.exists():
            for stale in cache.glob(f"{path.stem}-*.ipynb"):
                stale.unlink()
            nbformat.write(execute(path), stored)
        executed[path] = nbformat.read(stored, as_version=4)
    return executed


def site_links(text: str) -> str:
    """Links between lessons and prose pages, as the site's sources name them."""
    text = re.sub(r"\((?:\.\./notebooks/|notebooks/)(\d\d_\w+\.ipynb)", r"(\1", text)
    for source, (page, _) in PROSE_PAGES.items():
        text = re.sub(rf"\((?:\.\./|notebooks/)?{re.escape(source)}", f"({page}.md", text)
    return text


def _scrub(text: str) -> str:
    """No path of the building machine on a page: the repository's own paths become relative."""
    for root in {str(ROOT), str(ROOT.resolve())}:
        text = text.replace(root + "/", "").replace(root, ".")
    return re.sub(r"/(?:tmp|home/[^/\s]+|root)/[^\s'\"<>:]*", "…", text)


def _alt_text(cell: NotebookNode, section: str, lesson: str) -> str:
    """What a cell's figures show, in words: each PNG's own description (idemlib.pictures.alt_text),
    or, for a figure drawn without it, at least where it is."""
    images = [output for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    described = [output.get("metadata", {}).get("image/png", {}).get("alt", "") for output in images]
    if not images:
        return ""
    return " ".join(alt for alt in described if alt) or f"Figure in '{section}', {lesson}"


# A table cell a reader would see as pandas' word for "nothing here" (in an output's JSON-escaped HTML).
EMPTY_CELL = re.compile(r"(<td[^>]*>)\s*(?:None|NaN|nan|NaT|&lt;NA&gt;|<NA>)\s*(</td>)")


def _reader_table(text: str) -> str:
    """Tables as a reader reads them: an empty cell shows a dash, not pandas' None, NaN or <NA>."""
    return EMPTY_CELL.sub(r"\1—\2", text)


# Names the theme's and MyST-NB's buttons give themselves that differ from the words they show (WCAG 2.5.3,
# "label in name"): without them, a button is named by its visible words, as a speech-input user says them.
MISMATCHED_NAMES = re.compile(r'(<button class="btn search-button-field[^>]*?|<summary)'
                              r'\s+aria-label="(?:Search|Toggle hidden content)"')


def _finish_pages(out: Path) -> None:
    """The built pages' last touches: buttons named by their words, and the search (idemlib.course.site_search)."""
    from idemlib.course.site_search import improve_search

    for page in out.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = MISMATCHED_NAMES.sub(r"\1", text)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")
    improve_search(out)


def _one_line_error(output: NotebookNode) -> NotebookNode:
    """A deliberate error as the line a reader needs: its type and message."""
    return nbformat.v4.new_output("stream", name="stderr", text=f"{output.ename}: {output.evalue}\n")


def _check_html(outputs: list[NotebookNode]) -> str:
    """A check's outputs as one block of HTML, for the fold that holds its solution."""
    parts = []
    for output in outputs:
        data = output.get("data", {})
        if "text/html" in data:
            parts.append(data["text/html"])
        elif "text/plain" in data or "text" in output:
            parts.append(f"<pre>{html.escape(data.get('text/plain', output.get('text', '')))}</pre>")
    return " ".join(" ".join(part.split("\n")) for part in parts)


def _solution_fold(solution: NotebookNode, check: NotebookNode) -> NotebookNode:
    """A markdown cell that folds a solution together with what its check said about it."""
    return nbformat.v4.new_markdown_cell(
        '<details class="solution"><summary>Solution and its check (try the exercise first)</summary>\n\n'
        f"```python\n{solution.source}\n```\n\n"
        f'<div class="check-output">{_check_html(check.get("outputs", []))}</div>\n</details>\n')


def site_notebook(notebook: NotebookNode) -> NotebookNode:
    """An executed lesson made ready for the site (see the module's docstring)."""
    page = copy.deepcopy(notebook)
    page.metadata.pop("widgets", None)  # the widgets' own HTML stands in; no widget manager to load
    cells: list[NotebookNode] = []
    lesson, section = title_of(notebook), title_of(notebook)
    for index, cell in enumerate(page.cells):
        if cell.cell_type == "markdown" and (heading := re.search(r"^##+ (.+)$", cell.source, re.MULTILINE)):
            section = heading.group(1)
        if alt := _alt_text(cell, section, lesson):
            cell.metadata["mystnb"] = {"image": {"alt": alt}}
        if cell.cell_type == "markdown":
            # A lesson writes \\$ so JupyterLab does not typeset dollar amounts as maths; the site has no maths.
            cell.source = site_links(NAV_LINE.sub("", cell.source)).replace("\\\\$", "&#36;").strip("\n")
            if cell.source:
                cells.append(cell)
            continue
        tags = cell.metadata.get("tags", [])
        outputs = [_one_line_error(o) if o.output_type == "error" and "raises-exception" in tags else o
                   for o in cell.get("outputs", [])]
        cell.outputs = [nbformat.from_dict(json.loads(_reader_table(_scrub(json.dumps(o))))) for o in outputs]
        follows_solution = index > 0 and "solution" in page.cells[index - 1].metadata.get("tags", [])
        if "solution" in tags and index + 1 < len(page.cells):
            cells.append(_solution_fold(cell, page.cells[index + 1]))
            continue
        if follows_solution:
            cell.outputs = []  # its confirmation is inside the fold above
        cells.append(cell)
    page.cells = cells
    return page


def _glossary_targets(text: str) -> str:
    """The glossary's ``<a id>`` anchors as MyST targets, so a lesson's link to a term resolves."""
    return re.sub(r'^(## .+)\n<a id="([\w-]+)"></a>\n', r"(\2)=\n\1\n", text, flags=re.MULTILINE)


def _index(executed: dict[Path, NotebookNode]) -> str:
    items = "\n".join(f"- [{title_of(notebook)}]({path.name}): {site_links(first_goal(notebook))}"
                      for path, notebook in sorted(executed.items()))
    lessons = "\n".join(path.name for path in sorted(executed))
    prose = "\n".join(f"{page}.md" for source, (page, _) in PROSE_PAGES.items() if PROSE_SOURCES[source].exists())
    return (
        "# The Idempotent Consumer, taught by breaking one\n\n"
        "An executable course on the Inbox pattern and the Idempotency-Key header. Each page is a lesson, "
        "run top to bottom; solutions are folded until you open them.\n\n"
        f"{items}\n\n"
        "Beside the lessons: the [glossary](glossary.md), which every lesson links its terms to, and the "
        "[teacher's guide](teaching.md).\n\n"
        f"```{{toctree}}\n:hidden:\n:caption: Lessons\n\n{lessons}\n```\n\n"
        f"```{{toctree}}\n:hidden:\n:caption: Reference\n\n{prose}\n```\n"
    )


def _write_if_changed(target: Path, text: str) -> None:
    """Sphinx rebuilds what is newer than its last build, so an unchanged page is not written again."""
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def write_sources(executed: dict[Path, NotebookNode], source: Path, launch: Launch | None = None) -> None:
    """The site's Sphinx sources in ``source``: settings (with ``launch``'s buttons), the index, the lessons and
    the prose pages."""
    (source / "_static").mkdir(parents=True, exist_ok=True)
    options = launch.theme_options() if launch else {}
    _write_if_changed(source / "conf.py", CONF + (f"html_theme_options.update({options!r})\n" if options else ""))
    for name in ("course.css", "course.js", "favicon.svg"):
        _write_if_changed(source / "_static" / name, (STATIC / name).read_text(encoding="utf-8"))
    _write_if_changed(source / "index.md", _index(executed))
    for path, notebook in executed.items():
        _write_if_changed(source / path.name, nbformat.writes(site_notebook(notebook)))
    for name, (page, _) in PROSE_PAGES.items():
        if PROSE_SOURCES[name].exists():
            text = site_links(PROSE_SOURCES[name].read_text(encoding="utf-8"))
            _write_if_changed(source / f"{page}.md", _glossary_targets(text) if name == "GLOSSARY.md" else text)


def render_site(executed: dict[Path, NotebookNode], out: Path, work: Path | None = None,
                launch: Launch | None = None) -> list[str]:
    """Build the site from executed lessons into ``out``, with ``launch``'s buttons (default: the teacher's, from
    pyproject.toml); returns Sphinx's warnings (none, in a good build)."""
    from sphinx.application import Sphinx

    work = work or out.parent / f".{out.name}-sphinx"
    source = work / "source"
    write_sources(executed, source, launch_settings() if launch is None else launch)
    for stale in source.glob("[0-9][0-9]_*.ipynb"):
        if stale.name not in {path.name for path in executed}:
            stale.unlink()
    warnings = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        app = Sphinx(str(source), str(source), str(out), str(work / "doctrees"), "html",
                     status=None, warning=warnings, freshenv=False)
        app.build()
    shutil.rmtree(out / ".doctrees", ignore_errors=True)
    _finish_pages(out)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue())  # Sphinx colours its warnings for a terminal
    return [line for line in plain.splitlines() if ("WARNING" in line or "ERROR" in line)
            and not REBUILT_IN_ONE_PROCESS.search(line)]


def build_html(out: Path, lessons: Iterable[Path] | None = None) -> list[str]:
    """Execute every lesson (or take it from the cache) and write the site into ``out``."""
    cache = out.parent / ".executed"
    return render_site(executed_lessons(lessons or lesson_paths(), cache), out)
