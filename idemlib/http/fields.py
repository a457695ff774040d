"""The ``Idempotency-Key`` field as the draft defines it: a Structured Field Item whose value is a String.

RFC 8941 section 4.2 (RFC 9651 has obsoleted RFC 8941 since) says how a recipient
parses such a field: each field line's value loses its leading and trailing
whitespace, SP and HTAB (RFC 9110 section 5.5); the lines are combined into one
value, separated by commas (section 5.3); leading and trailing spaces are dropped;
one Item is parsed; anything left over makes the parse fail. So two
``Idempotency-Key`` lines, or a list of keys on one line, fail, and a bare token
(``m-7f3:charge`` without quotes) is an sf-token, not the String the draft requires.

The server's own policy comes on top, as the draft's security section asks a
server to publish one: at most :data:`MAX_KEY_LENGTH` characters, no spaces, and no
parameters (the draft defines none).
"""

from __future__ import annotations

MAX_KEY_LENGTH = 255  # Stripe's limit too


class FieldError(ValueError):
    """The field does not parse, or breaks the server's policy; the message says how, in a few words."""


def parse_string_item(lines: list[str]) -> str:
    """The String carried by a singular Structured Field sent as ``lines``; raises :class:`FieldError`."""
    # RFC 9110 (5.5): a field line's value excludes its leading and trailing SP and HTAB; RFC 9651 (4.2) then
    # parses the lines combined, dropping leading and trailing SP.
    value = ", ".join(line.strip(" \t") for line in lines).strip(" ")
    if not value.startswith('"'):
        raise FieldError("is not a String in double quotes (an unquoted key is an sf-token)")
    chars, index = [], 1
    while index < len(value):
        char = value[index]
        if char == "\\":
            if index + 1 == len(value) or value[index + 1] not in '"\\':
                raise FieldError("has a backslash that escapes neither \\ nor \"")
            chars.append(value[index + 1])
            index += 2
            continue
        if char == '"':
            break
        if not 0x20 <= ord(char) <= 0x7E:
            raise FieldError(f"contains {char!r}, which a String cannot hold")
        chars.append(char)
        index += 1
    else:
        raise FieldError("has no closing double quote")
    rest = value[index + 1:]
    if rest.startswith(";"):
        raise FieldError("carries parameters, which the draft does not define")
    if rest:
        raise FieldError("holds more than one value (two Idempotency-Key lines, or a list)")
    return "".join(chars)


def parse_key(lines: list[str]) -> str | None:
    """The key in the ``Idempotency-Key`` field lines of a request, None without any; raises :class:`FieldError`."""
    if not lines:
        return None
    key = parse_string_item(lines)
    if not key:
        raise FieldError("is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise FieldError(f"has {len(key)} characters, more than this server's {MAX_KEY_LENGTH}")
    if " " in key:
        raise FieldError("contains a space, which this server's key format does not allow")
    return key


def serialize_string(key: str) -> str:
    """``key`` as a Structured Field String, as a client sends it: in double quotes, ``\\`` and ``"`` escaped."""
    if any(not 0x20 <= ord(char) <= 0x7E for char in key):
        raise ValueError("a Structured Field String holds printable ASCII only")
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
