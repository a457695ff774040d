"""The Idempotency-Key header on a real HTTP server, on loopback, backed by DuckDB.

``POST /charges`` is not idempotent: two identical requests make two charges. A
client that retries after a timeout therefore sends an ``Idempotency-Key`` header,
and the server stores the outcome of the first request under that key (scoped to
the client that sent it). A repeat gets the stored outcome, marked with
``Idempotent-Replayed: true``, instead of a second execution.

``PUT`` and ``DELETE`` on ``/orders/<id>/status`` need no key: HTTP defines them as
idempotent (RFC 9110, section 9.2.2), and setting or removing a value twice leaves
the same state as doing it once.

Errors are problem details (``application/problem+json``) that say what is wrong
and what to do; nothing is stored for a request that is refused before its work.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import duckdb

from idemlib.clock import VirtualClock
from idemlib.provider import Behaviour, behaviours
from idemlib.stores import DuckDBPayments

MAX_KEY_LENGTH = 255
REPLAY_HEADER = "Idempotent-Replayed"
KEYS_SCHEMA = """CREATE TABLE IF NOT EXISTS idempotency_keys (
    client_id   VARCHAR NOT NULL,
    key         VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL,
    created_at  DOUBLE  NOT NULL,
    status      INTEGER,          -- NULL while the first request is in progress
    body        VARCHAR,
    PRIMARY KEY (client_id, key)
)"""
ORDERS_SCHEMA = "CREATE TABLE IF NOT EXISTS order_status (order_id INTEGER PRIMARY KEY, status VARCHAR NOT NULL)"


class Refused(Exception):
    """A request refused before any work, answered as problem details."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


def fingerprint(body: dict[str, Any]) -> str:
    """A digest of a request body, the same for the same content whatever the key order."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def parse_key(raw: str | None) -> str | None:
    """The key from an ``Idempotency-Key`` header, or None if there is none; refuses a malformed one.

    The IETF draft writes the key as a quoted string; a bare token is accepted too.
    """
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not key or len(key) > MAX_KEY_LENGTH or not all(33 <= ord(c) <= 126 for c in key):
        raise Refused(400, "Malformed Idempotency-Key",
                      f"An Idempotency-Key must be 1 to {MAX_KEY_LENGTH} visible ASCII characters without spaces, "
                      f"got {len(key)} characters. Generate one per operation, for example a UUID, and reuse it on retry.")
    return key


def parse_charge_body(raw: bytes) -> dict[str, Any]:
    """The JSON body of ``POST /charges``: an object with a positive whole ``order_id`` and ``amount``."""
    try:
        body = json.loads(raw or b"")
    except ValueError:
        raise Refused(400, "Body is not JSON",
                      'Send a JSON object such as {"order_id": 1042, "amount": 40} with Content-Type: application/json.') from None
    if not isinstance(body, dict):
        raise Refused(400, "Body is not a JSON object", 'Send a JSON object such as {"order_id": 1042, "amount": 40}.')
    for name in ("order_id", "amount"):
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise Refused(400, f"Invalid field {name}", f"{name!r} must be a positive whole number, got {value!r}.")
    return {"order_id": body["order_id"], "amount": body["amount"]}


@dataclass
class ChargesApi:
    """The application behind the server: charges with idempotency keys, and idempotent order status.

    ``clock`` ages the stored keys (a virtual clock, so a lesson can let 25 hours
    pass at once). ``work_seconds`` is real time spent on each charge, long enough
    for a concurrent duplicate to find the first request still in progress.
    """

    behaviour: Behaviour = field(default_factory=lambda: behaviours()["ietf-draft"])
    clock: VirtualClock = field(default_factory=VirtualClock)
    work_seconds: float = 0.0
    drop_share: float = 0.0
    seed: int = 0
    payments: DuckDBPayments = field(default_factory=DuckDBPayments)
    executions: int = 0
    _failures_left: int = 0
    _drops_left: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._drops = random.Random(self.seed)
        reader = self.payments.connect()
        reader.execute(KEYS_SCHEMA)
        reader.execute(ORDERS_SCHEMA)

    def fail_next(self, count: int = 1) -> None:
        """The next ``count`` charges fail with 503, as during an outage downstream."""
        self._failures_left += count

    def drop_next_responses(self, count: int = 1) -> None:
        """The next ``count`` charges are done and stored, but the connection closes before the answer is sent."""
        self._drops_left += count

    def take_drop(self) -> bool:
        """Whether the answer to the charge just done is dropped: a scheduled drop, or a seeded share of them."""
        with self._lock:
            if self._drops_left:
                self._drops_left -= 1
                return True
            return self._drops.random() < self.drop_share

    def post_charge(self, client: str, raw_key: str | None, raw_body: bytes) -> tuple[int, dict[str, Any], bool]:
        """Handle ``POST /charges``: returns (status, body, replayed)."""
        key = parse_key(raw_key)
        body = parse_charge_body(raw_body)
        if key is None:
            if self.behaviour.key_required:
                raise Refused(self.behaviour.missing_key_status, "Idempotency-Key required",
                              "POST /charges needs an Idempotency-Key header: create a unique key (a UUID) before the "
                              "first attempt and send the same key on every retry.")
            status, result = self._charge(body, key)
            return status, result, False
        cursor = self.payments.connect()
        digest = fingerprint(body)
        now = self.clock.now()
        cursor.execute("DELETE FROM idempotency_keys WHERE client_id = ? AND key = ? AND created_at <= ?",
                       (client, key, now - self.behaviour.retention_seconds))
        try:
            claimed = cursor.execute(
                "INSERT INTO idempotency_keys (client_id, key, fingerprint, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING RETURNING key", (client, key, digest, now)).fetchall()
        except duckdb.Error:  # a concurrent first request claimed it at the same moment
            claimed = []
        if not claimed:
            row = cursor.execute("SELECT fingerprint, status, body FROM idempotency_keys WHERE client_id = ? AND key = ?",
                                 (client, key)).fetchone()
            if row is None or row[1] is None:
                raise Refused(self.behaviour.in_progress_status, "Request in progress",
                              f"A request with Idempotency-Key {key!r} is still being processed. Retry after it finishes.")
            stored_digest, status, stored = row
            if stored_digest != digest:
                raise Refused(self.behaviour.mismatch_status, "Idempotency-Key reused with a different payload",
                              f"Idempotency-Key {key!r} was first used with another request body. "
                              "Use a new key for a new operation.")
            if status < 500 or self.behaviour.replays_errors:
                return status, json.loads(stored), True
        status, result = self._charge(body, key)
        cursor.execute("UPDATE idempotency_keys SET status = ?, body = ? WHERE client_id = ? AND key = ?",
                       (status, json.dumps(result), client, key))
        return status, result, False

    def _charge(self, body: dict[str, Any], key: str | None) -> tuple[int, dict[str, Any]]:
        time.sleep(self.work_seconds)
        with self._lock:
            if self._failures_left:
                self._failures_left -= 1
                return 503, {"title": "Service unavailable", "status": 503, "detail": "The card network is down; retry later."}
            self.executions += 1
            charge_id = f"ch_{80 + self.executions}"
        self.payments.session().charge(body["order_id"], body["amount"], key or charge_id)
        return 201, {"id": charge_id, **body}

    def put_status(self, order_id: int, raw_body: bytes) -> tuple[int, dict[str, Any]]:
        """``PUT /orders/<id>/status``: set the status. Twice is the same as once; no key needed."""
        try:
            status = json.loads(raw_body or b"{}").get("status")
        except (ValueError, AttributeError):
            status = None
        if not isinstance(status, str) or not status:
            raise Refused(400, "Invalid status", 'Send a JSON object such as {"status": "PAID"}.')
        self.payments.connect().execute("INSERT OR REPLACE INTO order_status VALUES (?, ?)", (order_id, status))
        return 200, {"order_id": order_id, "status": status}

    def delete_status(self, order_id: int) -> tuple[int, dict[str, Any]]:
        """``DELETE /orders/<id>/status``: remove the status. Removing what is gone changes nothing."""
        self.payments.connect().execute("DELETE FROM order_status WHERE order_id = ?", (order_id,))
        return 200, {"order_id": order_id, "status": None}

    def order_status(self, order_id: int) -> str | None:
        row = self.payments.connect().execute("SELECT status FROM order_status WHERE order_id = ?", (order_id,)).fetchone()
        return row[0] if row else None

    def stored_keys(self) -> list[tuple[str, str, int | None]]:
        """Every stored key as (client, key, status)."""
        return self.payments.connect().execute(
            "SELECT client_id, key, status FROM idempotency_keys ORDER BY client_id, key").fetchall()


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    # Headers and body go out in two writes; with Nagle's algorithm on, the second
    # waits for the client's delayed ACK, about 40 ms a request on loopback.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a lesson's output is no place for access logs

    def _reply(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json" if status >= 400 else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _order_id(self) -> int:
        parts = self.path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "orders" or parts[2] != "status" or not parts[1].isdigit():
            raise Refused(404, "Not found", "Use POST /charges, or PUT or DELETE /orders/<id>/status.")
        return int(parts[1])

    def _handle(self, work: Any) -> None:
        try:
            result = work()
        except Refused as refused:
            self._reply(refused.status, {"type": "about:blank", "title": refused.title, "status": refused.status,
                                         "detail": refused.detail})
            return
        status, body, replayed = result
        if self.path == "/charges" and not replayed and self.server.api.take_drop():
            self.close_connection = True  # the work is done and stored; the answer never leaves
            return
        self._reply(status, body, {REPLAY_HEADER: "true"} if replayed else None)

    def _charge(self) -> tuple[int, dict[str, Any], bool]:
        if self.path != "/charges":
            raise Refused(404, "Not found", "POST goes to /charges.")
        client = self.headers.get("X-Client-Id", "anonymous")
        return self.server.api.post_charge(client, self.headers.get("Idempotency-Key"), self._body())

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self._handle(self._charge)

    def do_PUT(self) -> None:  # noqa: N802
        self._handle(lambda: (*self.server.api.put_status(self._order_id(), self._body()), False))

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle(lambda: (*self.server.api.delete_status(self._order_id()), False))


class ApiServer(ThreadingHTTPServer):
    """The charges API served on 127.0.0.1 from a background thread; stop it with :meth:`stop`."""

    daemon_threads = True

    def __init__(self, api: ChargesApi) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        # A short poll lets stop() return at once instead of after serve_forever's default half second.
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="charges-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

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


def serve(api: ChargesApi | None = None) -> ApiServer:
    """Start the charges API on a free loopback port, in the background."""
    return ApiServer(api or ChargesApi()).start()


@dataclass(frozen=True)
class Attempt:
    """One try of a request: the status and body received, or the error instead of an answer."""

    status: int | None
    body: dict[str, Any] | None
    replayed: bool = False
    error: str = ""


class Client:
    """A client of the charges API that retries a POST after a lost answer, with the same key."""

    def __init__(self, url: str, client_id: str = "shop-1", timeout: float = 10.0) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port, self.client_id, self.timeout = host, int(port), client_id, timeout

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Attempt:
        """Send one request; a connection closed without an answer comes back as an Attempt with an error."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        payload = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        try:
            connection.request(method, path, body=payload,
                               headers={"Content-Type": "application/json", "X-Client-Id": self.client_id, **(headers or {})})
            response = connection.getresponse()
            return Attempt(response.status, json.loads(response.read() or b"null"),
                           response.getheader(REPLAY_HEADER) == "true")
        except (http.client.RemoteDisconnected, ConnectionResetError) as error:
            return Attempt(None, None, error=f"{type(error).__name__}: no answer")
        finally:
            connection.close()

    def post_charge(self, body: Any, key: str | None = None, *, retries: int = 2) -> list[Attempt]:
        """POST /charges, retrying with the same key while no answer arrives; returns every attempt."""
        headers = {"Idempotency-Key": key} if key is not None else {}
        attempts = [self.request("POST", "/charges", body, headers)]
        while attempts[-1].status is None and len(attempts) <= retries:
            attempts.append(self.request("POST", "/charges", body, headers))
        return attempts


def charges_under_drops(share: float, *, keyed: bool, requests: int = 40, seed: int = 3) -> int:
    """Charges really made when ``requests`` distinct payments go through a server that drops ``share`` of its answers.

    The client retries each payment after a dropped answer, with its key or
    without one (under Stripe's v1 rules, where a key is optional). Drops are drawn
    from ``seed``, so the count is the same on every run.
    """
    api = ChargesApi(behaviours()["stripe-v1"], drop_share=share, seed=seed)
    with serve(api) as server:
        client = Client(server.url)
        for number in range(requests):
            client.post_charge({"order_id": 3000 + number, "amount": 10}, key=f"pay-{number}" if keyed else None,
                               retries=10)
    return api.executions
