"""A real HTTP client of the charges API, which retries a POST with the same key after a lost answer.

It authenticates with the bearer token the server issued to its client, and sends
its key as the draft writes it, a Structured Field String in double quotes.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Any

from idemlib.http.charges import ChargesApi
from idemlib.http.fields import serialize_string
from idemlib.http.server import REPLAY_HEADER, serve
from idemlib.provider import behaviours


@dataclass(frozen=True)
class Attempt:
    """One try of a request: the status and body received, or the error instead of an answer."""

    status: int | None
    body: dict[str, Any] | None
    replayed: bool = False
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # the answer's header fields, names in lowercase


class Client:
    """A client of the charges API that retries a POST after a lost answer, with the same key.

    ``token`` is the bearer token the server issued to this client
    (:meth:`ChargesApi.issue_token`); ``client_id`` is sent as ``X-Client-Id``, which
    only the deliberately naive server of lesson 08 believes. ``timeout`` is longer
    than a held charge can be held (``HOLD_LIMIT_SECONDS``), so that a request a lesson
    holds at work is never given up by its own client, however busy the machine.
    """

    def __init__(self, url: str, token: str | None = None, *, client_id: str | None = None,
                 timeout: float = 60.0) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port, self.timeout = host, int(port), timeout
        self.identity = ({"Authorization": f"Bearer {token}"} if token is not None else {}) | (
            {"X-Client-Id": client_id} if client_id is not None else {})

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Attempt:
        """Send one request; a connection closed or timed out without an answer comes back as an Attempt with an error."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        payload = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        try:
            connection.request(method, path, body=payload,
                               headers={"Content-Type": "application/json", **self.identity, **(headers or {})})
            response = connection.getresponse()
            raw = response.read()
            text = response.getheader("Content-Type", "").startswith("text/")
            return Attempt(response.status, {"page": raw.decode()} if text else json.loads(raw or b"null"),
                           response.getheader(REPLAY_HEADER) == "true",
                           headers={name.lower(): value for name, value in response.getheaders()})
        except (http.client.RemoteDisconnected, ConnectionResetError, TimeoutError) as error:
            return Attempt(None, None, error=f"{type(error).__name__}: no answer")
        finally:
            connection.close()

    def post_charge(self, body: Any, key: str | None = None, *, retries: int = 2) -> list[Attempt]:
        """POST /charges, retrying with the same key while no answer arrives; returns every attempt.

        ``key`` is sent as a Structured Field String; to send a header as it is
        (malformed, say), use :meth:`request`.
        """
        headers = {"Idempotency-Key": serialize_string(key)} if key is not None else {}
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
        client = Client(server.url, api.issue_token("shop-1"))
        for number in range(requests):
            client.post_charge({"order_id": 3000 + number, "amount": 10}, key=f"pay-{number}" if keyed else None,
                               retries=10)
    return api.executions
