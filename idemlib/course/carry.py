"""An answer's values as data, to cross from a hand-in's sandbox to the grader's judge and back.

A tagged JSON: plain values as JSON has them, and everything else as a one-key object
``{"@tag": ...}``: ``bytes`` (base64), ``tuple``, ``set``, ``frozenset``, a ``dict``
whose keys are not all strings (a list of pairs), floats JSON has no word for
(``nan``, ``inf``), ``...`` (a blank answer), a function (a handle the sandbox keeps:
the judge calls it back through the sandbox), and any other object as its kind and
a short text (never the object: the judge gets an :class:`Opaque` it cannot run).

Nothing here runs code of the other side: :func:`load` builds only ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes``, containers, :class:`Opaque` and
:class:`Handle`. Depth and size are bounded on both sides.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEPTH = 40  # deeper than any answer needs; deeper is carried as an Opaque
ITEMS = 1_000_000  # values in one message, all containers together
LINE_BYTES = 32 << 20  # one message on a pipe


class TooLarge(ValueError):
    """A message over :data:`LINE_BYTES`, :data:`DEPTH` or :data:`ITEMS`."""


@dataclass(frozen=True)
class Opaque:
    """A value of a kind grading cannot carry (an object of a class, a module): its kind and a short text."""

    kind: str
    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Handle:
    """A function of the hand-in's, by the number the sandbox keeps it under."""

    number: int


# Values JSON carries as they are; a container's such values are taken without a call of their own (a check
# sends hundreds of thousands of records to an answer's function, most of their values plain).
AS_THEY_ARE = frozenset({type(None), bool, int, str})


def dump(value: Any, keep: Callable[[Any], int] | None = None) -> Any:
    """``value`` as tagged JSON. ``keep`` files a function and gives its handle's number (the sandbox's side);
    without it a function is an error (the judge's side sends only plain data)."""
    count = [0]

    def counted(size: int, depth: int) -> None:
        count[0] += size
        if count[0] > ITEMS or depth > DEPTH:
            raise TooLarge("the value is nested too deep or holds too many items to carry")

    def walk(item: Any, depth: int) -> Any:
        counted(1, depth)
        kind = type(item)
        if kind in AS_THEY_ARE:
            return item
        if kind is float:
            return item if math.isfinite(item) else {"@float": repr(item)}
        if item is ...:
            return {"@ellipsis": 0}
        if kind is bytes:
            return {"@bytes": base64.b64encode(item).decode()}
        if kind is list:
            counted(len(item), depth + 1)
            return [part if type(part) in AS_THEY_ARE else walk(part, depth + 1) for part in item]
        if kind in (tuple, set, frozenset):
            parts = sorted(item, key=repr) if kind is not tuple else item
            return {f"@{kind.__name__}": [walk(part, depth + 1) for part in parts]}
        if kind is dict:
            if all(type(key) is str and not key.startswith("@") for key in item):
                counted(len(item), depth + 1)
                return {key: part if type(part) in AS_THEY_ARE else walk(part, depth + 1) for key, part in item.items()}
            return {"@dict": [[walk(key, depth + 1), walk(part, depth + 1)] for key, part in item.items()]}
        if isinstance(item, (bool, int, float, str, bytes)):  # numpy's scalars, str subclasses: their plain value
            plain = _plain_scalar(item)
            if plain is not None:
                return walk(plain, depth)
        if callable(item) and not isinstance(item, type):
            if keep is None:
                raise TypeError("only plain data is sent to an answer's function")
            return {"@function": keep(item)}
        return {"@opaque": [_kind(item), _text(item)]}

    return walk(value, 0)


def _plain_scalar(item: Any) -> Any:
    plains: tuple[type[Any], ...] = (bool, int, float, str, bytes)
    for plain in plains:
        if isinstance(item, plain):
            try:
                return plain(item)
            except Exception:  # noqa: BLE001 - an odd subclass is carried as what it says it is
                return None
    return None


def _kind(item: Any) -> str:
    try:
        return str(type(item).__name__)[:80]
    except Exception:  # noqa: BLE001
        return "object"


def _text(item: Any) -> str:
    try:
        return str(repr(item))[:200]
    except BaseException:  # noqa: BLE001 - its repr is its own code; whatever it does, a kind is enough
        return f"<a {_kind(item)}>"


AS_JSON_HAS_THEM = frozenset({type(None), bool, int, float, str})  # what json.loads gives that stands for itself


def load(data: Any) -> Any:
    """The value tagged JSON stands for: plain values, :class:`Opaque` and :class:`Handle`, nothing else."""
    count = [0]

    def walk(item: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > ITEMS or depth > DEPTH + 2:
            raise TooLarge("the value is nested too deep or holds too many items to carry")
        kind = type(item)
        if kind in AS_JSON_HAS_THEM:
            return item
        if kind is list:
            count[0] += len(item)
            return [part if type(part) in AS_JSON_HAS_THEM else walk(part, depth + 1) for part in item]
        if kind is not dict:
            raise ValueError(f"not tagged JSON: {kind.__name__}")
        if len(item) == 1 and type(tag := next(iter(item))) is str and tag.startswith("@"):
            inner = item[tag]
            if tag == "@ellipsis":
                return ...
            if tag == "@float":
                return float(str(inner)) if str(inner) in ("nan", "inf", "-inf") else math.nan
            if tag == "@bytes":
                return base64.b64decode(str(inner))
            if tag in ("@tuple", "@set", "@frozenset"):
                parts = [walk(part, depth + 1) for part in _list(inner)]
                return {"@tuple": tuple, "@set": set, "@frozenset": frozenset}[tag](_hashable(parts, tag != "@tuple"))
            if tag == "@dict":
                return {_key(walk(pair[0], depth + 1)): walk(pair[1], depth + 1)
                        for pair in _list(inner) if type(pair) is list and len(pair) == 2}
            if tag == "@function" and type(inner) is int:
                return Handle(inner)
            if tag == "@opaque":
                kind, text = (_list(inner) + ["", ""])[:2]
                return Opaque(str(kind)[:80], str(text)[:200])
            raise ValueError(f"an unknown tag {tag[:40]!r}")
        count[0] += len(item)
        return {key: part if type(part) in AS_JSON_HAS_THEM else walk(part, depth + 1) for key, part in item.items()}

    return walk(data, 0)


def _list(item: Any) -> list[Any]:
    if type(item) is not list:
        raise ValueError("not tagged JSON: a tag's value should be a list")
    return item


def _hashable(parts: list[Any], needed: bool) -> list[Any]:
    if needed:
        for part in parts:
            hash(part)  # a list inside a set cannot be: the sender did not send a real set
    return parts


def _key(key: Any) -> Any:
    hash(key)
    return key


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line (JSON is ASCII here, so a lone surrogate or any text travels safely)."""
    line = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
    if len(line) > LINE_BYTES:
        raise TooLarge(f"a message of {len(line) >> 20} MiB is over the {LINE_BYTES >> 20} MiB a pipe carries")
    return line


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a pipe may take a long message in parts)."""
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def decode(line: bytes) -> dict[str, Any]:
    """One line back into a message; any fault is a ``ValueError`` (nesting too deep included)."""
    if len(line) > LINE_BYTES:
        raise TooLarge("a line over the limit")
    try:
        message = json.loads(line)
    except RecursionError as error:
        raise TooLarge("nested too deep") from error
    if type(message) is not dict:
        raise ValueError("a message is a JSON object")
    return message


class Lines:
    """Reading whole lines from a pipe, each bounded, with a time limit per line."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, bytearray()

    def read(self, seconds: float | None) -> bytes | None:
        """The next line, ``None`` at the pipe's end; ``TimeoutError`` past ``seconds``; ``TooLarge`` past the limit."""
        import os
        import select
        import time

        deadline = None if seconds is None else time.monotonic() + seconds
        while (end := self.buffer.find(b"\n")) < 0:
            if len(self.buffer) > LINE_BYTES:
                raise TooLarge("a line over the limit")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line
