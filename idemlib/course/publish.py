"""Publishing the course: a static HTML site for readers, and student copies for a classroom.

Solutions are written once, in cells tagged ``solution``. The site folds them
into a ``<details>`` a reader opens on purpose; a student copy replaces each one
with a blank to fill in, so its check says *Not answered yet* until the student
answers. Run as ``python -m idemlib.course html|student [folder]``.
"""

from __future__ import annotations

import ast
import copy
import html
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

import mistune
import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from nbformat import NotebookNode
from traitlets.config import Config

from idemlib.course.lessons import LESSONS, ROOT, lesson_paths, title_of

TEMPLATES = Path(__file__).resolve().parent / "templates"
STUB_NOTE = "# Your answer: replace ... below, run this cell, then run the check underneath."


def execute(path: Path, timeout: int = 180) -> NotebookNode:
    """Run a lesson top to bottom on a fresh kernel, in its own folder, and return it with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    # The kernel talks to us over local sockets (IPC) instead of loopback TCP: nothing
    # to eavesdrop on, and no "running over TCP without encryption" warning per lesson.
    # The socket files need an absolute path, since the kernel runs in the lesson's folder.
    with tempfile.TemporaryDirectory(prefix="idemlib-kernel-") as sockets:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(Path(sockets) / "kernel")
        NotebookClient(notebook, timeout=timeout, kernel_name="python3", config=config,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


_MARKDOWN = mistune.create_markdown(escape=True)


def inline_html(markdown: str) -> str:
    """One line of lesson markdown (emphasis, code, links) as HTML, without a wrapping paragraph."""
    rendered = str(_MARKDOWN(markdown.replace("\\\\$", "$"))).strip()  # no MathJax on the index
    return re.sub(r"^<p>(.*)</p>$", r"\1", rendered, flags=re.DOTALL)


def first_goal(notebook: NotebookNode) -> str:
    """The lesson's first learning goal, which the site's index shows as its one-line description."""
    found = re.search(r"you will\*\*\s*\n\s*\n- (.+)", notebook.cells[0].source)
    return found.group(1).rstrip(";.") if found else ""


def answer_names(solution: str, check: str) -> list[str]:
    """The names a solution assigns that the following check reads: what a student must fill in."""
    assigned = set()
    for node in ast.parse(solution).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                assigned |= {name.id for name in names if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned.add(node.name)
    read = [node.id for node in ast.walk(ast.parse(check)) if isinstance(node, ast.Name)]
    return [name for name in dict.fromkeys(read) if name in assigned]


def student_copy(notebook: NotebookNode, lesson: str = "") -> NotebookNode:
    """The lesson with every solution replaced by a blank (``name = ...``) and all outputs cleared.

    ``lesson`` (the lesson's file stem) is recorded in the copy's metadata, so grading
    knows which lesson a handed-in copy is, whatever the student renamed it to.
    """
    copied = copy.deepcopy(notebook)
    if lesson:
        copied.metadata["idemlib"] = {"lesson": lesson}
    for position, cell in enumerate(copied.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if "solution" not in cell.metadata.get("tags", []):
            continue
        following = copied.cells[position + 1].source if position + 1 < len(copied.cells) else ""
        names = answer_names(cell.source, following)
        if not names:
            raise ValueError(f"the solution cell {cell.source[:60]!r} assigns nothing its check reads")
        cell.source = "\n".join([STUB_NOTE, *(f"{name} = ..." for name in names)])
        cell.metadata["tags"] = [tag for tag in cell.metadata["tags"] if tag != "solution"] + ["answer"]
    return copied


def build_student(out: Path, lessons: Iterable[Path] | None = None) -> list[Path]:
    """Write a student copy of every lesson into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in lessons or lesson_paths():
        target = out / path.name
        nbformat.write(student_copy(nbformat.read(path, as_version=4), path.stem), target)
        written.append(target)
    return written


def _exporter() -> HTMLExporter:
    config = Config()
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_input_tags = {"hide-input"}
    config.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    # With no kernel behind the page, a widget's own static HTML (the storyboard) is
    # what a reader should see, not the empty box of a widget without saved state.
    config.NbConvertBase.display_data_priority = [
        "text/html", "application/vnd.jupyter.widget-view+json", "image/svg+xml", "image/png", "image/jpeg",
        "text/markdown", "text/plain",
    ]
    exporter = HTMLExporter(config=config, template_name="course", extra_template_basedirs=[str(TEMPLATES)])
    exporter.exclude_anchor_links = True
    return exporter


def _nav(pages: list[tuple[str, str]], index: int) -> str:
    links = ['<a href="index.html">contents</a>']
    if index > 0:
        links.insert(0, f'<a href="{pages[index - 1][0]}">← {html.escape(pages[index - 1][1])}</a>')
    if index + 1 < len(pages):
        links.append(f'<a href="{pages[index + 1][0]}">{html.escape(pages[index + 1][1])} →</a>')
    return f'<nav class="course">{"".join(links)}</nav>'


def render_site(executed: dict[Path, NotebookNode], out: Path) -> list[Path]:
    """Write executed lessons as a static site in ``out``: an index and one page each, linked in order."""
    out.mkdir(parents=True, exist_ok=True)
    exporter = _exporter()
    ordered = sorted(executed.items())
    pages = [(path.with_suffix(".html").name, title_of(notebook)) for path, notebook in ordered]
    written = []
    for index, (_, notebook) in enumerate(ordered):
        page = copy.deepcopy(notebook)
        section = pages[index][1]
        for cell in page.cells:
            if cell.cell_type == "markdown":  # a lesson links to lessons; the site links to pages
                cell.source = _site_links(cell.source)
                # \\$ keeps JupyterLab's MathJax off a dollar amount; the site loads no MathJax.
                cell.source = cell.source.replace("\\\\$", "&#36;")
                if heading := re.search(r"^##+ (.+)$", cell.source, re.MULTILINE):
                    section = heading.group(1)
            for output in cell.get("outputs", []):
                if "image/png" in output.get("data", {}):
                    output.setdefault("metadata", {})["alt"] = f"Figure in '{section}', {pages[index][1]}"
        body, _ = exporter.from_notebook_node(page, resources={"course_nav": _nav(pages, index)})
        target = out / pages[index][0]
        target.write_text(body, encoding="utf-8")
        written.append(target)
    prose = render_prose([p for p in (LESSONS / "GLOSSARY.md", ROOT / "TEACHING.md") if p.exists()], out)
    titles = dict(PROSE_PAGES.values())
    prose_links = " · ".join(f'<a href="{page.name}">{html.escape(titles[page.name])}</a>' for page in prose)
    # Each title carries the lesson's own number (00, 01, ... 08), so the list adds none:
    # a numbered list would count 0-7 past a lesson that is not written yet.
    items = "".join(
        f'<li><a href="{name}">{html.escape(title)}</a>: {inline_html(first_goal(notebook))}</li>'
        for (name, title), (_, notebook) in zip(pages, ordered)
    )
    index_page = out / "index.html"
    index_page.write_text(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>The Idempotent Consumer</title>'
        '<link rel="icon" href="data:,">'
        '<style>body{font-family:sans-serif;max-width:800px;margin:2em auto;padding:0 1em;line-height:1.5}</style>'
        "</head><body><h1>The Idempotent Consumer, taught by breaking one</h1>"
        "<p>An executable course on the Inbox pattern and the Idempotency-Key header. Each page is a lesson, "
        "run top to bottom; solutions are folded until you open them.</p>"
        f'<ul style="list-style:none;padding-left:0">{items}</ul><p>{prose_links}</p></body></html>',
        encoding="utf-8",
    )
    return [index_page, *written, *prose]


# Pages of prose beside the lessons: the glossary (lessons link their terms to it) and the teacher's guide.
PROSE_PAGES = {"GLOSSARY.md": ("glossary.html", "Glossary"), "TEACHING.md": ("teaching.html", "Teaching the course")}


def _site_links(text: str) -> str:
    """Links between lessons and prose pages, as the site names them."""
    text = re.sub(r"\((?:\.\./notebooks/|notebooks/)?(\d\d_[\w]+)\.ipynb", r"(\1.html", text)
    for source, (page, _) in PROSE_PAGES.items():
        text = re.sub(rf"\((?:\.\./|notebooks/)?{re.escape(source)}", f"({page}", text)
    return text


def render_prose(sources: Iterable[Path], out: Path) -> list[Path]:
    """Write each markdown page (the glossary, the teacher's guide) as a page of the site."""
    from nbconvert.filters.markdown import markdown2html

    written = []
    for source in sources:
        page, title = PROSE_PAGES[source.name]
        body = markdown2html(_site_links(source.read_text(encoding="utf-8")))
        target = out / page
        target.write_text(
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            '<link rel="icon" href="data:,"><style>body{font-family:sans-serif;max-width:800px;margin:2em auto;'
            'padding:0 1em;line-height:1.5}table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:2px 6px}'
            '</style></head><body><nav class="course"><a href="index.html">contents</a></nav>'
            f"{body}</body></html>", encoding="utf-8")
        written.append(target)
    return written


def build_html(out: Path, lessons: Iterable[Path] | None = None) -> list[Path]:
    """Execute every lesson and write the static site into ``out``."""
    return render_site({path: execute(path) for path in lessons or lesson_paths()}, out)
