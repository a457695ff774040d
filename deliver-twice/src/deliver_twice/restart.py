"""The consumer's process, which a crash ends: after a restart the consumer's own module starts again, its memory empty.

A consumer that remembers the messages it handled in Python (a set of seen IDs, a cache)
passes every redelivery in one process and charges again after a restart, when that memory
is gone and the database still holds the effect. A crash is such a restart, and so is each
scenario's start (its database is new, so must its process be). The test cannot start a new
interpreter per delivery cheaply (importing a consumer's project takes seconds), so a restart
runs the module the consumer is defined in once more, from its file, and takes the consumer
from the new copy: its globals start as a new process's would. Memory kept elsewhere (another
module, a server) is not reset; a consumer the test cannot find again in its module (a closure,
a lambda, an object made inside a test) keeps its memory, and the report says so.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any, cast

from deliver_twice.steps import Handle


def _name_in(module: ModuleType, handle: Handle) -> tuple[str, str | None] | None:
    """Where ``handle`` is found among ``module``'s globals: (global, method) or None."""
    target, method = getattr(handle, "__self__", None), getattr(handle, "__name__", None)
    for name, value in vars(module).items():
        if value is handle:
            return name, None
        if target is not None and value is target and method is not None:
            return name, method
    return None


def why_not_restartable(handle: Handle) -> str | None:
    """Why a restart cannot give ``handle`` empty memory; None when it can."""
    module = sys.modules.get(getattr(handle, "__module__", None) or type(handle).__module__)
    if module is None or getattr(module, "__spec__", None) is None or getattr(module, "__file__", None) is None:
        return (f"{getattr(handle, '__name__', handle)!r} is defined where no file can be run again (a notebook, "
                "an interactive session), so a restart keeps its memory in Python")
    if _name_in(module, handle) is None:
        return (f"{getattr(handle, '__qualname__', handle)!r} is not a global of its module (a closure, a lambda, an "
                "object made in a test), so a restart keeps its memory in Python: define it at module level")
    return None


def _fresh(handle: Handle) -> Handle:
    module = sys.modules[getattr(handle, "__module__", None) or type(handle).__module__]
    where = _name_in(module, handle)
    assert where is not None and module.__spec__ is not None and module.__spec__.loader is not None
    spec = importlib.util.spec_from_file_location(module.__name__, module.__file__,
                                                  loader=module.__spec__.loader)
    assert spec is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)  # type: ignore[union-attr]  # not put in sys.modules: the old copy stays
    found: Handle = getattr(fresh, where[0])
    return found if where[1] is None else cast(Handle, getattr(found, where[1]))


class Process:
    """The consumer as the process running it has it: called like the consumer; :meth:`restart` empties its memory."""

    def __init__(self, handle: Handle) -> None:
        self.original = handle
        self.handle = handle
        self.why_not = why_not_restartable(handle)
        """Why a restart keeps the consumer's memory (None: it empties it)."""
        self.__name__ = str(getattr(handle, "__name__", handle))

    def __call__(self, *args: Any) -> Any:
        return self.handle(*args)

    def another(self) -> Process:
        """A second consumer process beside this one (its own memory), as two deliveries at once usually meet."""
        other = Process(self.original)
        other.restart()
        return other

    def restart(self) -> None:
        """A new process: the consumer's module run again, so its globals start empty."""
        if self.why_not is None:
            self.handle = _fresh(self.original)
