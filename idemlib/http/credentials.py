"""Who sent a request: the client a bearer token the server issued authenticates, or a naive header's claim.

Idempotency keys are stored per client, so that one client's key can never find
another's stored answer. That holds only if the client is *authenticated*: a name
the request merely asserts (an ``X-Client-Id`` header) can be asserted by anyone,
and a key as guessable as ``m-7f3:charge`` then replays one shop's charge to another.
The draft's security section asks for the key to be combined "with other client
specific attributes known only to the resource": here the client a token stands for.

:class:`Credentials` issues each client a random bearer token (RFC 6750) and maps a
request's ``Authorization`` header back to the client; a request without one, or
with a token it never issued, is refused with 401 before anything else is read.
``trust_client_id_header`` is the deliberately naive alternative lesson 08 uses to
show the leak, and nothing else should.
"""

from __future__ import annotations

import hashlib
import secrets
import threading

from idemlib.http.problems import Refused

TOKEN_BYTES = 32  # 256 random bits: no one guesses another client's token
CHALLENGE = 'Bearer realm="charges"'
SHARED_NAMESPACE = "anonymous"  # what the naive server files a request without X-Client-Id under


def _digest(token: str) -> str:
    # Only digests are kept: a copy of the table does not hand out working tokens.
    return hashlib.sha256(token.encode()).hexdigest()


class Credentials:
    """The bearer tokens a server issued, each standing for one client."""

    def __init__(self, *, trust_client_id_header: bool = False) -> None:
        self.trust_client_id_header = trust_client_id_header
        self._clients: dict[str, str] = {}
        self._lock = threading.Lock()

    def issue(self, client: str) -> str:
        """A new bearer token for ``client`` (a client may hold several; each authenticates it)."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        with self._lock:
            self._clients[_digest(token)] = client
        return token

    def client_of(self, authorization: str | None, client_id: str | None) -> str:
        """The client a request comes from, by its ``Authorization`` header; 401 without a token this server issued.

        Under ``trust_client_id_header`` (the naive server) the ``X-Client-Id``
        header is believed instead, and a request without one joins the shared
        namespace :data:`SHARED_NAMESPACE`.
        """
        if self.trust_client_id_header:
            if client_id is None:
                return SHARED_NAMESPACE
            if not 0 < len(client_id) <= 255 or any(not 33 <= ord(char) <= 126 for char in client_id):
                raise Refused(400, "Malformed X-Client-Id", "X-Client-Id must be 1 to 255 visible ASCII characters "
                              "without spaces.")
            return client_id
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "Credentials required", "Send Authorization: Bearer <token>, with the token this "
                          "server issued to your client.", headers={"WWW-Authenticate": CHALLENGE}, close=True)
        with self._lock:
            client = self._clients.get(_digest(token.strip()))
        if client is None:
            raise Refused(401, "Credentials not recognised", "This bearer token was not issued by this server.",
                          headers={"WWW-Authenticate": f'{CHALLENGE}, error="invalid_token"'}, close=True)
        return client
