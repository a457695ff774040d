"""The charges API on a real HTTP server on loopback: request framing, and an answer for every request.

Every request gets a status line and, for every error, a problem-details body:
a Content-Length that is not a plain number, a body larger than the server reads,
a method the server does not serve, a client too slow to send its request (one
deadline for its head and body), and a failure inside the application, which is a 500 with problem
details rather than a connection closed in silence.

Much of what RFC 9112 asks of a server is kept: every header line is checked as
section 5 says, and none is dropped or merged (:mod:`idemlib.http.head`); an HTTP/1.1
request without a ``Host`` field, or any request with two, is refused with 400
(section 3.2); a target in absolute form (``POST http://host/charges``) is served
like its path (3.2.2); a ``Content-Length`` repeating one number, on one line or
several, frames the body by it, and one with two numbers is refused (6.3). The server
answers as HTTP/1.0, one request per connection (``Connection: close``), so it keeps
no connection open. One departure: RFC 9112 (section 6.1) says a recipient "MUST be
able to parse the chunked transfer coding", and this server reads no chunked body; a
request with ``Transfer-Encoding`` gets 501, and must be sent with ``Content-Length``.
Every
request but a ``GET`` of ``/problems/<type>`` (the server's documentation of its
problem types) is authenticated by its bearer token before its body is read.

The resources: ``POST /charges``, ``GET /charges/<id>`` and
``GET``/``PUT``/``DELETE /orders/<id>/status``, each client's own (its charges and its
orders), so another client's is a 404, as for one that does not exist.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedReader, BytesIO
from typing import Any, cast
from urllib.parse import urlsplit

from idemlib.http.charges import ChargesApi, parse_order_id
from idemlib.http.head import HeadError, read_head
from idemlib.http.orders import Preconditions
from idemlib.http.problems import PROBLEM_TYPE, RFC9110_PHRASES, TYPES_PATH, Refused, documentation, phrase, problem

REPLAY_HEADER = "Idempotent-Replayed"
MAX_BODY_BYTES = 64 * 1024  # a charge is some 40 bytes; anything near this is not one
CLIENT_TIMEOUT_SECONDS = 10.0
Outcome = tuple[int, dict[str, Any] | str, dict[str, str], bool]  # status, body (JSON, or a page), headers, replayed
HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]%")


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    # Headers and body go out in two writes; with Nagle's algorithm on, the second
    # waits for the client's delayed ACK, about 40 ms a request on loopback.
    disable_nagle_algorithm = True
    # http.server assumes HTTP/0.9 until it has read a request line, and answers a
    # malformed one without a status line; this server speaks HTTP/1.0 to everyone.
    default_request_version = "HTTP/1.0"
    responses = {**BaseHTTPRequestHandler.responses,
                 **{code: (name, BaseHTTPRequestHandler.responses[code][1]) for code, name in RFC9110_PHRASES.items()}}

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a lesson's output is no place for access logs

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers too long, an unknown method) as problem details."""
        long = self.responses.get(code, ("", ""))[1]
        short = phrase(code)
        if code == 501:
            detail = f"This server does not serve {self.command[:40]!r}: use POST /charges, or PUT or DELETE /orders/<id>/status."
        else:  # http.server's message may quote the whole request line; a few words of it are enough
            detail = f"{(message or short)[:200]}. {explain or long}".strip()
        self.close_connection = True
        self._reply(code, problem(code, short, detail))

    def _reply(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        """Send the answer: JSON (problem details for an error), or a page of plain text."""
        payload = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.connection.settimeout(self.server.client_timeout)  # each write may wait this long, whatever the read left
        self.send_response(status)
        if status != 304:  # a 304 has no content, and no length but the 200's (RFC 9110, sections 15.4.5, 8.6)
            self.send_header("Content-Type", "text/plain; charset=utf-8" if isinstance(body, str)
                             else PROBLEM_TYPE if status >= 400 else "application/json")
            self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD" and status != 304:
            self.wfile.write(payload)

    def _body(self) -> bytes:
        """The request body, framed by Content-Length as RFC 9112 section 6 says."""
        if "Transfer-Encoding" in self.headers:
            raise Refused(501, "Transfer-Encoding not supported",
                          "This server reads a body framed by Content-Length only. Send the body with Content-Length.",
                          close=True)
        # Content-Length on two lines is one list (RFC 9110, section 5.3), as on one line with commas: a list of one
        # number repeated frames the body by it, whichever way it came (RFC 9112, section 6.3); different ones, nothing.
        lines = self.headers.get_all("Content-Length", [])
        lengths = {value.strip() for value in ", ".join(lines).split(",")}
        if not lines:
            return b""
        length = next(iter(lengths)) if len(lengths) == 1 else ""
        if not (length.isascii() and length.isdigit()) or len(length) > 12:
            raise Refused(400, "Bad Content-Length", f"Content-Length must be one number of bytes, such as 33; got "
                          f"{', '.join(sorted(lengths))[:40]!r}.", close=True)
        if int(length) > MAX_BODY_BYTES:
            raise Refused(413, phrase(413), f"The body may be at most {MAX_BODY_BYTES} bytes; a charge is a small "
                          'JSON object such as {"order_id": 1042, "amount": 40}.', close=True)
        body = self._read(int(length))
        if len(body) < int(length):
            raise Refused(400, "Body shorter than Content-Length", f"The connection ended after {len(body)} of "
                          f"{length} bytes. Send the whole body.", close=True)
        return body

    def _read(self, length: int) -> bytes:
        """Up to ``length`` bytes of body, by the request's deadline: a client dripping a byte at a time is cut off too."""
        chunks: list[bytes] = []
        while length > 0:
            if (remaining := self.deadline - time.monotonic()) <= 0:
                raise TimeoutError("the body took too long")
            self.connection.settimeout(remaining)
            if not (chunk := self.rfile.read1(min(length, 65536))):
                break  # the client closed its side early
            chunks.append(chunk)
            length -= len(chunk)
        return b"".join(chunks)

    def handle_one_request(self) -> None:
        """One request: its head read and checked within the client timeout (:mod:`idemlib.http.head`), then
        http.server's reading of the request line and its call of ``do_<METHOD>``."""
        self.requestline = self.command = ""  # what a refusal before the request line is read reports
        self.request_version, self.close_connection = self.default_request_version, True
        self.deadline = time.monotonic() + self.server.client_timeout  # for the head and the body together
        # socketserver makes rfile with makefile("rb", -1), a BufferedReader (typed as its base class)
        try:
            if (head := read_head(cast(BufferedReader, self.rfile), self.connection, self.deadline)) is None:
                return  # the client closed the connection without a request
        except TimeoutError:
            self._reply(408, _timeout(self.server.client_timeout, "the headers"))
            self._drain()
            return
        except HeadError as error:
            self._reply(error.status, problem(error.status, error.title or phrase(error.status), error.detail))
            self._drain()
            return
        self.raw_requestline, self.fields = head
        if not self.parse_request():
            return
        if (serve := getattr(self, f"do_{self.command}", None)) is None:
            self.send_error(501)
            return
        serve()
        self.wfile.flush()

    def parse_request(self) -> bool:
        """http.server's reading of the request line (its 400 and 505), with the fields read already, and a 400
        for an HTTP/1.1 request without exactly one valid ``Host`` field (RFC 9112, section 3.2)."""
        stream, self.rfile = self.rfile, BytesIO(b"\r\n")  # http.server reads the fields from rfile: here, none
        try:
            if not super().parse_request():
                return False
        finally:
            self.rfile = stream
        self.headers = self.fields
        hosts = self.headers.get_all("Host", [])
        valid = all(set(host) <= HOST_CHARACTERS for host in hosts)
        if len(hosts) > 1 or not valid or (not hosts and self.request_version != "HTTP/1.0"):
            found = "no Host field" if not hosts else f"{len(hosts)} Host fields" if len(hosts) > 1 else "an invalid Host"
            self.close_connection = True
            self._reply(400, problem(400, "One Host field required", f"An HTTP/1.1 request carries exactly one Host "
                                     f"field, naming the server it is for; this one has {found}."))
            return False
        return True

    def _drain(self) -> None:
        """Read and drop what the client still sends of a refused body (for a moment at most).

        Closing a socket with unread data resets the connection, and a reset can
        destroy the answer before the client has read it.
        """
        deadline = time.monotonic() + min(self.server.client_timeout, 1.0)
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            while (remaining := deadline - time.monotonic()) > 0:
                self.connection.settimeout(remaining)
                if not self.connection.recv(65536):
                    break
        except OSError:
            pass  # the client is gone or slow; the answer was sent

    def _target(self) -> str:
        """The request's path: the target itself (origin form), or the path of an absolute-form target (RFC 9112, 3.2.2)."""
        if self.path.lower().startswith(("http://", "https://")):
            parts = urlsplit(self.path)
            return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return self.path

    def _route(self, path: str) -> tuple[str, str]:
        """Which resource the path names (``charges``, ``charge``, ``status``, ``problem``) and its ID; else 404."""
        parts = path.split("/")
        if path == "/charges":
            return "charges", ""
        if len(parts) == 3 and parts[0] == "" and parts[1] == "charges" and parts[2]:
            return "charge", parts[2]
        if len(parts) == 4 and parts[0] == "" and parts[1] == "orders" and parts[3] == "status":
            return "status", parts[2]
        if path.startswith(TYPES_PATH) and path.count("/") == 2:
            return "problem", path.removeprefix(TYPES_PATH)
        raise Refused(404, phrase(404), "Use POST /charges, GET /charges/<id>, or GET, PUT or DELETE "
                      "/orders/<id>/status.")

    def _serve(self) -> Outcome:
        path = self._target()
        resource, name = self._route(path)
        allowed = {"charges": ("POST",), "charge": ("GET", "HEAD"), "status": ("GET", "HEAD", "PUT", "DELETE"),
                   "problem": ("GET", "HEAD")}[resource]
        if self.command not in allowed:
            raise Refused(405, phrase(405), f"{path[:60]} accepts {', '.join(allowed)} only.",
                          headers={"Allow": ", ".join(allowed)})
        api = self.server.api
        if resource == "problem":
            if (page := documentation(name, api.behaviour.retention_seconds)) is None:
                raise Refused(404, phrase(404), f"This server has no problem type {name[:40]!r}.")
            return 200, page, {}, False
        order_id = parse_order_id(name) if resource == "status" else 0
        if (lines := len(self.headers.get_all("Authorization", []))) > 1:  # which of them would the key belong to?
            raise Refused(400, "One Authorization field required", f"This request carries {lines} Authorization "
                          "fields; send one, with the token this server issued to your client.", close=True)
        client = api.credentials.client_of(self.headers.get("Authorization"), self.headers.get("X-Client-Id"))
        if resource == "charges":
            status, body, replayed = api.post_charge(client, self.headers.get_all("Idempotency-Key", []), self._body())
            return status, body, {"Location": f"/charges/{body['id']}"} if status == 201 else {}, replayed
        if resource == "charge":
            return 200, api.charge(client, name), {}, False
        conditions = Preconditions.of(lambda name: self.headers.get_all(name, []))
        if self.command in ("GET", "HEAD"):
            status, body, tag = api.get_status(client, order_id, conditions)
        elif self.command == "PUT":
            status, body, tag = api.put_status(client, order_id, self._body(), conditions)
        else:
            status, body, tag = api.delete_status(client, order_id, conditions)
        return status, body, {"ETag": tag} if tag else {}, False

    def _handle(self) -> None:
        try:
            status, body, headers, replayed = self._serve()
        except Refused as refused:
            self.close_connection = self.close_connection or refused.close
            self._reply(refused.status, refused.body, refused.headers)
            if refused.close:
                self._drain()
            return
        except TimeoutError:
            self.close_connection = True
            self._reply(408, _timeout(self.server.client_timeout, "the body"))
            self._drain()
            return
        except Exception as error:  # noqa: BLE001 - a bug must still be answered, never a silent close
            self.close_connection = True
            self._reply(500, problem(500, phrase(500), f"The server failed ({type(error).__name__}) before "
                                     "doing any work. Retry with the same key; report it if it persists."))
            return
        if "Location" in headers and not replayed and self.server.api.take_drop():
            self.close_connection = True  # the charge is done and stored; the answer never leaves
            return
        self._reply(status, body, {**headers, **({REPLAY_HEADER: "true"} if replayed else {})})

    do_POST = do_PUT = do_DELETE = do_GET = do_HEAD = do_PATCH = do_OPTIONS = _handle  # noqa: N815 - http.server's naming


def _timeout(seconds: float, part: str) -> dict[str, Any]:
    return problem(408, phrase(408), f"The server gives a request {seconds:g} seconds to arrive, head and body; "
                   f"{part} had not arrived by then. Send the whole request at once.")


class ApiServer(ThreadingHTTPServer):
    """The charges API served on 127.0.0.1 from a background thread; stop it with :meth:`stop`.

    ``client_timeout`` is one deadline for the whole request, its head and its body,
    however the client spreads its bytes, and a bound on each write of the answer: a
    client that never finishes its request holds a thread for that long (then the
    short :meth:`_Handler._drain` after a refusal), not longer.
    """

    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of a burst of clients, which then wait
    # a full second to connect again; a lesson sends eight at once.
    request_queue_size = 64

    def __init__(self, api: ChargesApi, client_timeout: float = CLIENT_TIMEOUT_SECONDS) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api, self.client_timeout = api, client_timeout
        # A short poll lets stop() return at once instead of after serve_forever's default half second.
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="charges-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is no news; anything else is reported as usual."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def start(self) -> ApiServer:
        """Serve in the background (starting twice is harmless)."""
        if not self._thread.is_alive():
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(api: ChargesApi | None = None, *, client_timeout: float = CLIENT_TIMEOUT_SECONDS) -> ApiServer:
    """Start the charges API on a free loopback port, in the background."""
    return ApiServer(api or ChargesApi(), client_timeout).start()
