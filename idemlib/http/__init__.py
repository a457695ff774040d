"""Lesson 08: the Idempotency-Key header on a real HTTP server, on loopback, backed by DuckDB.

- :mod:`idemlib.http.keys`: the key store, one record per client and key, in
  progress (with a deadline another request may take over after) or completed
  (with the answer to replay), and what expiry means;
- :mod:`idemlib.http.fields`: the ``Idempotency-Key`` field, a Structured Field String;
- :mod:`idemlib.http.credentials`: the bearer tokens that say which client a request
  is from, so that keys are scoped by an authenticated client;
- :mod:`idemlib.http.charges`: the application, ``POST /charges`` with keys, input
  checked before any work;
- :mod:`idemlib.http.orders`: an order's status with ``PUT`` and ``DELETE``, guarded
  by ``ETag``, ``If-Match`` and ``If-None-Match``, each client's orders its own;
- :mod:`idemlib.http.server`: the HTTP server, which answers every request, errors
  as problem details (:mod:`idemlib.http.problems`);
- :mod:`idemlib.http.client`: a real client that retries with the same key.
"""

from idemlib.http.charges import ChargesApi, fingerprint, parse_charge_body, parse_key
from idemlib.http.client import Attempt, Client, charges_under_drops
from idemlib.http.credentials import Credentials
from idemlib.http.keys import KeyRecord, KeyStore, decide
from idemlib.http.problems import Refused, problem
from idemlib.http.server import REPLAY_HEADER, ApiServer, serve

__all__ = [
    "REPLAY_HEADER", "ApiServer", "Attempt", "ChargesApi", "Client", "Credentials", "KeyRecord", "KeyStore", "Refused",
    "charges_under_drops", "decide", "fingerprint", "parse_charge_body", "parse_key", "problem", "serve",
]
