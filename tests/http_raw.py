"""Raw HTTP over a socket, for requests no well-behaved client would send."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from idemlib.http.problems import TYPES, TYPES_PATH, phrase


@dataclass(frozen=True)
class RawAnswer:
    """What came back on the socket: the status (None if nothing did), headers and the JSON body."""

    status: int | None
    headers: dict[str, str]
    body: Any
    raw: bytes


def raw_request(url: str, data: bytes, *, finish: bool = True, timeout: float = 5.0) -> RawAnswer:
    """Send ``data`` as it is and read the answer until the server closes the connection.

    ``finish=False`` keeps the sending half open, as a client still sending its body would.
    """
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        if finish:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.startswith(b"HTTP/"):
        return RawAnswer(None, {}, None, raw)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    text = headers.get("content-type", "").startswith("text/")
    return RawAnswer(int(status_line.split()[1]), headers, body.decode() if text else json.loads(body) if body else None,
                     raw)


def http_request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                 *, length: str | None = None, token: str | None = None, hosts: tuple[str, ...] = ("localhost",),
                 extra: tuple[tuple[str, str], ...] = (), version: str = "HTTP/1.1") -> bytes:
    """A request's bytes; ``length`` overrides the Content-Length header (even with nonsense).

    ``token`` is sent as a bearer token; ``hosts`` are the Host field lines (none, or
    several); ``extra`` are field lines sent as they are, a name repeated if it is.
    """
    fields = {"Content-Length": str(len(body)) if length is None else length, **(headers or {})}
    if token is not None:
        fields["Authorization"] = f"Bearer {token}"
    lines = [f"{method} {path} {version}", *(f"Host: {host}" for host in hosts),
             *(f"{name}: {value}" for name, value in [*fields.items(), *extra])]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def is_problem(answer: RawAnswer) -> bool:
    """Whether an error answer is problem details (RFC 9457): the media type, a body naming the same status, and a
    type that is either ``about:blank`` with the status's own phrase as title (section 4.2.1) or the server's own."""
    body = answer.body
    if not (answer.headers.get("content-type") == "application/problem+json" and isinstance(body, dict)
            and body.get("status") == answer.status and body.get("title") and body.get("detail")):
        return False
    if body.get("type") == "about:blank":
        return body["title"] == phrase(answer.status)
    name = str(body.get("type")).removeprefix(TYPES_PATH)
    return body["type"].startswith(TYPES_PATH) and TYPES.get(name, ("",))[0] == body["title"]
