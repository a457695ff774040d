"""The checks that the lessons' exercises call.

Each check works the right answer out with the simulator or a real database
rather than comparing to a stored constant, gives a specific hint for a wrong
answer without giving the answer away, and says plainly when nothing has been
answered yet (``...`` is how a student copy leaves an answer blank).

One module per lesson, each with its ``__all__``; this package re-exports each
lesson's names, so a notebook writes ``from idemlib.course.exercises import check_...``
whatever its lesson. A lesson's module is imported when one of its names is first asked
for (PEP 562): the grader's judge, which needs one lesson's checks, does not pay for the
other twelve lessons' simulators and databases.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from idemlib.course.exercises.feedback import Feedback, blank, hint, not_judged, one_of, right  # noqa: F401

if TYPE_CHECKING:  # the re-exported names, for type checkers and editors; at run time see __getattr__
    from idemlib.course.exercises.lesson_00 import *  # noqa: F403
    from idemlib.course.exercises.lesson_01 import *  # noqa: F403
    from idemlib.course.exercises.lesson_02 import *  # noqa: F403
    from idemlib.course.exercises.lesson_03 import *  # noqa: F403
    from idemlib.course.exercises.lesson_04 import *  # noqa: F403
    from idemlib.course.exercises.lesson_05 import *  # noqa: F403
    from idemlib.course.exercises.lesson_06 import *  # noqa: F403
    from idemlib.course.exercises.lesson_07 import *  # noqa: F403
    from idemlib.course.exercises.lesson_08 import *  # noqa: F403
    from idemlib.course.exercises.lesson_09 import *  # noqa: F403
    from idemlib.course.exercises.lesson_10 import *  # noqa: F403
    from idemlib.course.exercises.lesson_11 import *  # noqa: F403
    from idemlib.course.exercises.lesson_12 import *  # noqa: F403

FEEDBACK = ("Feedback", "blank", "hint", "not_judged", "one_of", "right")


@cache
def exported() -> dict[str, str]:
    """Each name a lesson module lists in its ``__all__``, by that module, read from the files without
    importing them (a later lesson's name wins, as star imports in lesson order did)."""
    found: dict[str, str] = {}
    for path in sorted(Path(__file__).parent.glob("lesson_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                found |= dict.fromkeys(ast.literal_eval(node.value), f"{__name__}.{path.stem}")
    return found


def __getattr__(name: str) -> object:
    """A lesson's name, imported from the lesson's module the first time it is asked for, then kept here."""
    if name == "__all__":
        return [*FEEDBACK, *exported()]
    if name not in exported():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(exported()[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *FEEDBACK, *exported()})
