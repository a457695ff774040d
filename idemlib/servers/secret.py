"""The learner's secret: what makes the course's own servers answer the learner who started them, and no one else.

On a shared machine (a class's JupyterHub host, a lab's server) every learner's
PostgreSQL, Valkey and NATS listen on the same loopback, where any user can
connect. So each server the course starts takes a password (PostgreSQL), an AUTH
password (Valkey) or a token (NATS): the secret in ``secret`` beside the servers'
records, made on first use and readable by its owner alone (mode 0600). The URLs
the course hands out carry it; a connection without it is refused.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

FILE = "secret"


class SecretUnsafe(RuntimeError):
    """The secret file is not the learner's own, or others may read it: the course will not use it."""


def secret(directory: Path) -> str:
    """The secret in ``directory``: read when it is there and private, else made (URL-safe, 32 characters)."""
    path = directory / FILE
    directory.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Made whole under a name of its own, then linked in: two servers starting at once agree on one secret, and
        # neither reads a half-written file.
        partial = directory / f"{FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        write_private(partial, secrets.token_urlsafe(24))
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    return _read(path)


def _read(path: Path) -> str:
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        raise SecretUnsafe(f"{path} is not a file of this user's own; remove it and the course makes a new one")
    if info.st_mode & 0o077:
        os.chmod(path, 0o600)  # loosened by hand or by a copy: closed again before it is used
    value = path.read_text().strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]{16,}", value):  # it goes into URLs, SQL and config files as it is
        raise SecretUnsafe(f"{path} is not a secret the course made (16 or more of A-Z a-z 0-9 _ -); remove it and "
                           "the course makes a new one")
    return value


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner alone, replacing it at once (a reader sees old or new)."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    partial.replace(path)
