"""A request's head (its request line and header fields) read within one deadline, every field line checked.

Python's ``http.client.parse_headers`` hands the header block to the e-mail parser,
which reads e-mail, not HTTP: it ends the headers at the first line it cannot read
(``X-Trace : abc``, or a line with no colon) and drops every field after it without
an error, joins a folded line to the field before it, and splits a field at a bare
CR. A dropped ``Idempotency-Key`` or ``Content-Length`` makes the application serve a
request other than the one sent. So this module reads the lines itself and refuses
each of those with 400, as RFC 9112 asks:

- whitespace between a field name and its colon: "A server MUST reject" it with 400
  (section 5.1);
- obsolete line folding, a line beginning with a space or a tab: a server may reject
  it with 400 (section 5.2), and this one does, saying so;
- a bare CR: invalid (section 2.2); CR, LF and NUL in a value, and the other control
  characters, are not field content (RFC 9110, section 5.5);
- a field name that is not a token (RFC 9110, section 5.1).

A lone LF ends a line, as section 2.2 allows, and empty lines before the request line
are skipped (its "SHOULD ignore at least one empty line"). Each value loses its
leading and trailing whitespace, SP and HTAB, which RFC 9110 (section 5.5) excludes
from it.

The limits: a request line over :data:`MAX_LINE` bytes gets 414, and a field line over
it, more than :data:`MAX_FIELDS` fields, or field lines of more than :data:`MAX_HEAD`
bytes in all get 431 (RFC 6585, section 5), so that one request's head holds at most
that much of the server's memory.
"""

from __future__ import annotations

import socket
import time
from http.client import HTTPMessage
from io import BufferedReader

MAX_LINE = 65536
MAX_FIELDS = 100
MAX_HEAD = 65536  # the field lines together: a charge's head is some 300 bytes
TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
FIELD_CONTENT = frozenset({0x09, *range(0x20, 0x7F), *range(0x80, 0x100)})  # HTAB, SP, VCHAR, obs-text


FIELD_TITLE = "Malformed header field"


class HeadError(Exception):
    """A head this server refuses: its status, its problem's title (None: the status's phrase), and what is wrong."""

    def __init__(self, status: int, detail: str, title: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.title = status, detail, title


def read_head(stream: BufferedReader, connection: socket.socket, deadline: float) -> tuple[bytes, HTTPMessage] | None:
    """The request line and the checked fields, all read before ``deadline`` (``time.monotonic()``); None if the
    client closed the connection before a request line. Raises :class:`HeadError`, and TimeoutError at the deadline."""
    request_line = b"\r\n"
    while request_line in (b"\r\n", b"\n"):
        request_line = _line(stream, connection, deadline)
        if not request_line:
            return None
    if len(request_line) > MAX_LINE:
        raise HeadError(414, f"The request line is longer than this server's {MAX_LINE} bytes.")
    if b"\r" in request_line.rstrip(b"\r\n"):
        raise HeadError(400, "The request line holds a bare CR, which RFC 9112 (section 2.2) makes invalid.")
    fields, size = HTTPMessage(), 0
    while (line := _line(stream, connection, deadline)) not in (b"\r\n", b"\n"):
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE:
                raise HeadError(431, f"A header line is longer than this server's {MAX_LINE} bytes.")
            raise _malformed("The connection ended inside the headers, before the empty line that ends them.")
        if len(fields) == MAX_FIELDS:
            raise HeadError(431, f"The request has more than this server's {MAX_FIELDS} header fields.")
        if (size := size + len(line)) > MAX_HEAD:
            raise HeadError(431, f"The header fields are longer than this server's {MAX_HEAD} bytes in all.")
        name, value = _field(line.removesuffix(b"\n").removesuffix(b"\r"), fields.keys()[-1:])
        fields[name] = value
    return request_line, fields


def _field(line: bytes, previous: list[str]) -> tuple[str, str]:
    """One header line's name and value, checked; ``previous`` is the name of the field before it, if any."""
    shown = line[:60].decode("latin-1")
    if line[:1] in (b" ", b"\t"):
        after = f"the {previous[0]} field" if previous else "the request line"
        raise _malformed(f"The line after {after} begins with a space or a tab: obsolete line folding, which "
                        "this server does not accept (RFC 9112, section 5.2). Send each field on one line.")
    if b"\r" in line:
        raise _malformed(f"The header line {shown!r} holds a bare CR, which RFC 9112 (section 2.2) makes invalid.")
    name, colon, value = line.partition(b":")
    if not colon:
        raise _malformed(f"The header line {shown!r} has no colon: a field line is a name, a colon and a value.")
    if not name:
        raise _malformed(f"The header line {shown!r} has no field name before its colon.")
    if name.rstrip(b" \t") != name:
        raise _malformed(f"The header line {shown!r} has whitespace between the field name and the colon, which "
                        "RFC 9112 (section 5.1) requires a server to refuse with 400.")
    if not set(name) <= TOKEN:
        raise _malformed(f"The field name {name[:60].decode('latin-1')!r} is not a token (RFC 9110, section 5.1).")
    value = value.strip(b" \t")
    if not set(value) <= FIELD_CONTENT:
        raise _malformed(f"The {name.decode()} field's value holds a control character, which a field value "
                        "cannot hold (RFC 9110, section 5.5).")
    return name.decode(), value.decode("latin-1")


def _malformed(detail: str) -> HeadError:
    return HeadError(400, detail, FIELD_TITLE)


def _line(stream: BufferedReader, connection: socket.socket, deadline: float) -> bytes:
    """The next line, through its LF (or what came before the connection ended, or the first bytes past
    :data:`MAX_LINE`), each socket read given only what is left of the deadline."""
    line = b""
    while not line.endswith(b"\n") and len(line) <= MAX_LINE:
        if (remaining := deadline - time.monotonic()) <= 0:
            raise TimeoutError("the head took too long")
        connection.settimeout(remaining)
        if not (buffered := stream.peek(1)):
            break  # the client closed its side
        end = buffered.find(b"\n")
        line += stream.read(min(end + 1 if end >= 0 else len(buffered), MAX_LINE + 1 - len(line)))
    return line
