"""Running code as another Unix user, as a learner on a shared hub host is: the Python such a user can run.

A venv's ``python`` is a link to the interpreter it was made from, which may sit
where only its owner can go (pyenv's under ``/root``); the system's interpreter of
the same version then runs the same code, with the venv's packages on its path.
"""

from __future__ import annotations

import os
import shutil
import site
import stat
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def open_to_all(path: Path) -> bool:
    """True when any user may pass through every folder above ``path`` and read it."""
    path = path.resolve()
    return bool(path.stat().st_mode & stat.S_IROTH) and all(
        parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def python_for_anyone() -> Path | None:
    """This interpreter where any user can run it, else the system's of the same version, else None."""
    mine = Path(sys.executable)
    if open_to_all(mine):
        return mine
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = shutil.which(version, path="/usr/bin:/usr/local/bin")
    return Path(found) if found and open_to_all(Path(found)) else None


def path_for_anyone() -> str:
    """``PYTHONPATH`` giving that interpreter the course's code and this venv's packages."""
    return os.pathsep.join([str(REPOSITORY), *site.getsitepackages()])
