"""Reading one hand-in's file, in a process of its own with bounded memory and time, into the few things
grading needs: each cell's kind, source and tags, the lesson it says it is, and its title.

The grader opens the file itself (never following a link) and hands it over as this
program's standard input; it runs as ``python -I -S handin.py`` (no site, no course
package: nothing to import but ``json``), so a notebook of a million cells, a 100 MB
cell or a nesting a thousand deep costs this process, not the grader's. What comes back
is plain JSON of bounded size, or ``{"error": ...}`` saying why the file is not a notebook.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_CELLS = 2000
MAX_SOURCE = 200_000  # characters in one cell
MAX_TAGS = 20


def text(value: Any, limit: int) -> str:
    """A cell's source as notebooks store it (a string, or a list of strings), or an error."""
    if isinstance(value, list):
        if not all(isinstance(part, str) for part in value):
            raise ValueError("a cell's source is not text")
        value = "".join(value)
    if not isinstance(value, str):
        raise ValueError("a cell's source is not text")
    if len(value) > limit:
        raise ValueError(f"a cell of {len(value):,} characters (at most {limit:,})")
    return value


def cells_of(notebook: Any) -> dict[str, Any]:
    if not isinstance(notebook, dict):
        raise ValueError("the file is JSON but not a notebook (not an object)")
    if notebook.get("nbformat") != 4:
        raise ValueError(f"not a version 4 notebook (nbformat {str(notebook.get('nbformat'))[:20]})")
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        raise ValueError("a notebook without a list of cells")
    if len(cells) > MAX_CELLS:
        raise ValueError(f"{len(cells):,} cells (at most {MAX_CELLS:,})")
    metadata = notebook.get("metadata", {})
    course = metadata.get("idemlib", {}) if isinstance(metadata, dict) else {}
    lesson = course.get("lesson") if isinstance(course, dict) else None
    found = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise ValueError("a cell that is not a code, markdown or raw cell")
        meta = cell.get("metadata", {})
        tags = meta.get("tags", []) if isinstance(meta, dict) else []
        tags = [tag for tag in tags if isinstance(tag, str)][:MAX_TAGS] if isinstance(tags, list) else []
        found.append({"kind": cell["cell_type"], "source": text(cell.get("source", ""), MAX_SOURCE),
                      "tags": [tag[:40] for tag in tags]})
    title = next((match.group(1).strip()[:200] for cell in found if cell["kind"] == "markdown"
                  and (match := re.search(r"^# (.+)$", cell["source"], re.MULTILINE))), None)
    return {"cells": found, "lesson": lesson[:100] if isinstance(lesson, str) else None, "title": title}


def main() -> None:
    data = sys.stdin.buffer.read()
    try:
        notebook = json.loads(data.decode("utf-8"))
        found = cells_of(notebook)
    except RecursionError:
        found = {"error": "nested too deep to be a notebook"}
    except UnicodeDecodeError:
        found = {"error": "not UTF-8 text"}
    except (ValueError, TypeError, AttributeError) as error:
        found = {"error": f"{type(error).__name__}: {str(error)[:120]}"}
    sys.stdout.write(json.dumps(found, ensure_ascii=True))


if __name__ == "__main__":
    main()
