"""Raw HTTP over a socket, for requests no well-behaved client would send."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


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
    return RawAnswer(int(status_line.split()[1]), headers, json.loads(body) if body else None, raw)


def http_request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
                 *, length: str | None = None) -> bytes:
    """A request's bytes; ``length`` overrides the Content-Length header (even with nonsense)."""
    fields = {"Content-Length": str(len(body)) if length is None else length, **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", *(f"{name}: {value}" for name, value in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def is_problem(answer: RawAnswer) -> bool:
    """Whether an error answer is problem details: the media type, and a body naming the same status."""
    return (answer.headers.get("content-type") == "application/problem+json" and isinstance(answer.body, dict)
            and answer.body.get("status") == answer.status and bool(answer.body.get("title"))
            and bool(answer.body.get("detail")))
