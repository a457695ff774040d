"""The tools the tests install for themselves (repo2docker, JupyterHub, its proxy): one folder per pinned version in
``/tmp/idemlib-tools-UID`` (the temporary folder, where every user can reach it), built on first use and kept between runs.

Two test runs of one user at once (two terminals, a probe beside ``make test``) share those folders. A file lock per
folder makes the second run wait for the first one's build instead of deleting the folder under it and building its
own on top, and a mark written when the build has ended says the folder is whole: a build that failed or was
interrupted leaves none, so the next run starts that folder again from nothing. (Building elsewhere and renaming the
folder into place would not do: a venv's scripts name its Python by its absolute path.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

from idemlib.servers.local import open_temp

# JupyterHub's learners run the hub's tools as users of their own, so the tools live where every user can reach
# them, never in a private TMPDIR (mode 700), which would refuse them ("Permission denied").
TOOLS = open_temp() / f"idemlib-tools-{os.geteuid()}"
BUILT = ".built"
"""Written in a tool's folder once its build has ended well."""


@contextlib.contextmanager
def tool(name: str, build: Callable[[Path], object]) -> Iterator[Path]:
    """The folder ``TOOLS/name``, made by ``build(folder)`` unless a whole one is there; held locked while in use.

    Whatever the caller does inside the ``with`` (reinstalling the course into the venv) is done under the same lock.
    """
    TOOLS.mkdir(parents=True, exist_ok=True)
    TOOLS.chmod(0o755)  # whatever the umask: other users run what is built in it
    folder = TOOLS / name
    with FileLock(str(TOOLS / f"{name}.lock")):
        if not (folder / BUILT).exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed or was cut off: begin again
            build(folder)
            (folder / BUILT).touch()
        yield folder
