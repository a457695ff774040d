"""The course's glossary (``notebooks/GLOSSARY.md``): its terms, and links from each lesson's first use.

Each entry is a level-two heading naming the term (other names for it in
parentheses), an anchor, a definition in a sentence or two, and links to the
lessons that show it. Lessons link the first use of each term to its entry, so a
learner who meets a word cold is one click from what it means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

GLOSSARY = Path(__file__).resolve().parent.parent.parent / "notebooks" / "GLOSSARY.md"
# Markdown a term must not be linked inside: code, existing links, headings, HTML tags.
_PROTECTED = re.compile(r"`[^`]*`|\[[^\]]*\]\([^)]*\)|^#+ .*$|<[^>]+>|\$\$.*?\$\$", re.MULTILINE)


@dataclass(frozen=True)
class Term:
    """One glossary entry: its anchor, the words that name it, its definition and the lessons that show it."""

    anchor: str
    names: tuple[str, ...]
    definition: str
    lessons: tuple[str, ...]

    def pattern(self) -> re.Pattern[str]:
        """Any of the term's names as whole words, any case, a plural 's' allowed."""
        alternatives = "|".join(re.escape(name) for name in sorted(self.names, key=len, reverse=True))
        return re.compile(rf"(?<![\w-])({alternatives})s?(?![\w-])", re.IGNORECASE)


def terms(path: Path = GLOSSARY) -> list[Term]:
    """Every entry of the glossary, in its order."""
    found = []
    for section in re.split(r"^## ", path.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]:
        heading, _, body = section.partition("\n")
        name, _, others = heading.partition(" (")
        names = (name.strip(), *(o.strip() for o in others.rstrip(") ").split(",") if o.strip()))
        anchor = re.search(r'<a id="([\w-]+)"></a>', body)
        if anchor is None:
            raise ValueError(f"glossary entry {name!r} needs an anchor: <a id=\"...\"></a>")
        lessons = tuple(dict.fromkeys(re.findall(r"\((\d\d_\w+)\.ipynb\)", body)))
        definition = re.sub(r"<a id=[^>]+></a>", "", body).strip()
        found.append(Term(anchor.group(1), names, definition, lessons))
    return found


def link_first_uses(notebook: NotebookNode, entries: list[Term], target: str = "GLOSSARY.md") -> int:
    """Link the first use of each term in the notebook's prose to its entry; returns how many were linked.

    Terms already linked to the glossary in this notebook are left alone, so linking twice
    changes nothing. The first cell (the title and the goals) is left as written.
    """
    linked = set(re.findall(rf"\]\({re.escape(target)}#([\w-]+)\)",
                            "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")))
    added = 0
    for cell in notebook.cells[1:]:
        if cell.cell_type != "markdown":
            continue
        for term in entries:
            if term.anchor in linked:
                continue
            protected = [m.span() for m in _PROTECTED.finditer(cell.source)]
            for match in term.pattern().finditer(cell.source):
                if any(start <= match.start() < end for start, end in protected):
                    continue
                start, end = match.span()
                cell.source = f"{cell.source[:start]}[{match.group(0)}]({target}#{term.anchor}){cell.source[end:]}"
                linked.add(term.anchor)
                added += 1
                break
    return added


def main() -> None:
    """Link the first use of every glossary term in every lesson (``python -m idemlib.course.glossary``)."""
    import nbformat

    from idemlib.course.lessons import lesson_paths

    entries = terms()
    for path in lesson_paths():
        notebook = nbformat.read(path, as_version=4)
        if added := link_first_uses(notebook, entries):
            nbformat.write(notebook, path)
            print(f"{path.name}: linked {added} terms")


if __name__ == "__main__":
    main()
