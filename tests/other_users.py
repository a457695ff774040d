"""Running code as another Unix user, as a learner on a shared hub host is: the Python such a user can run.

A venv's ``python`` is a link to the interpreter it was made from, which may sit
where only its owner can go (pyenv's under ``/root``); the system's interpreter of
the same version then runs the same code, with the venv's packages on its path.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent


def open_to_all(path: Path) -> bool:
    """True when any user may pass through every folder above ``path`` and read it."""
    path = path.resolve()
    return bool(path.stat().st_mode & stat.S_IROTH) and all(
        parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)


def venv_packages() -> list[str]:
    """This venv's package folders. Debian's Python also names ``local/lib/pythonX.Y/dist-packages`` in a venv made
    from it, a folder that is never made: only those that exist."""
    return [folder for folder in site.getsitepackages() if Path(folder).is_dir()]


def python_for_anyone() -> Path | None:
    """This interpreter where any user can run it, else the system's of the same version, else None; None too
    where another user could not read the course's code or the venv's packages (a checkout under a folder only
    its owner may enter, such as root's home), since that interpreter runs them."""
    if not (open_to_all(REPOSITORY) and all(open_to_all(Path(folder)) for folder in venv_packages())):
        return None
    mine = Path(sys.executable)
    if open_to_all(mine):
        return mine
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = shutil.which(version, path="/usr/bin:/usr/local/bin")
    return Path(found) if found and open_to_all(Path(found)) else None


def path_for_anyone() -> str:
    """``PYTHONPATH`` giving that interpreter the course's code and this venv's packages."""
    return os.pathsep.join([str(REPOSITORY), *venv_packages()])


def fresh_environment(folder: Path) -> Path:
    """A new Python environment in ``folder``, made from a Python any user can run, holding the course's dependencies
    but not the course: they come from this venv (a ``.pth`` line, so nothing is downloaded but what the interpreter
    lacks), as an image's environment holds them after its requirements are installed. Returns its ``python``."""
    python = python_for_anyone()
    if python is None:
        raise RuntimeError("no Python here that another user may run")
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    packages = site_packages(folder)
    (packages / "course-dependencies.pth").write_text("\n".join(venv_packages()) + "\n")
    for program in ("nats-server",):  # what the course's pip packages put in an environment's bin/
        (folder / "bin" / program).symlink_to(Path(sys.prefix) / "bin" / program)
    lacks = subprocess.run([str(folder / "bin" / "python"), "-c", "import redis.asyncio"], capture_output=True)
    if lacks.returncode != 0:  # the system's 3.11.2 needs async-timeout, which 3.11.3 on do not
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(packages),
                        "async-timeout==5.0.1"], check=True, timeout=300)
    return folder / "bin" / "python"


def site_packages(folder: Path) -> Path:
    return folder / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def installed_course(folder: Path) -> Path:
    """A :func:`fresh_environment` with the course installed from a wheel (not editable), as an image holds it."""
    python = fresh_environment(folder)
    # Built from the repository into a wheel and installed as files (not editable), as an image's pip does.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                    str(site_packages(folder)), str(REPOSITORY)], check=True, timeout=300, cwd=folder)
    return python


@contextlib.contextmanager
def learner_account(name: str, home: Path) -> Iterator[pwd.struct_passwd]:
    """A Unix user of its own for one learner, with ``home`` (made, theirs, mode 0700), removed afterwards.

    Only root can make one; for anyone else, the learner is that user, in ``home``.
    """
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())  # a struct sequence, not a named tuple: no _replace
        yield pwd.struct_passwd((*me[:5], str(home), *me[6:]))
        return
    subprocess.run(["useradd", "--home-dir", str(home), "--no-create-home", "--shell", "/bin/sh", "--user-group",
                    name], check=True, timeout=60)
    try:
        account = pwd.getpwnam(name)
        os.chown(home, account.pw_uid, account.pw_gid)
        yield account
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], timeout=60)  # a server it left behind, if a test failed
        subprocess.run(["userdel", name], check=True, timeout=60)


def as_account(account: pwd.struct_passwd) -> dict[str, Any]:
    """``subprocess`` arguments that run a command as ``account`` (nothing when it is this process's own user)."""
    if account.pw_uid == os.geteuid():
        return {}
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
