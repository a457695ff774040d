"""Problem details (RFC 9457): how every refusal and every failure of the HTTP layer is answered.

A problem-details body is a JSON object with a ``type`` (a URI naming the kind of
problem), a ``title`` (the kind of problem in words), the ``status`` repeated, and a
``detail`` saying what is wrong with this request, sent as ``application/problem+json``.

Two kinds of type, as RFC 9457 allows:

- ``about:blank`` when the status code says all there is: the title is then the
  status's own phrase ("Not Found"), as section 4.2.1 asks;
- a type of this server's own, ``/problems/<name>``, when the status alone does not
  say what went wrong (two different 400s, say). Its title is the type's, the same
  on every occurrence, and the server documents it at that path (``GET`` it), which
  is also the "link pointing to relevant documentation" the Idempotency-Key draft
  asks its 400 and 422 to carry.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

PROBLEM_TYPE = "application/problem+json"
TYPES_PATH = "/problems/"

KEY_RULES = ("An Idempotency-Key is a Structured Field String (RFC 8941, now obsoleted by RFC 9651): 1 to 255 "
             "visible ASCII characters between double quotes, such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\", the same "
             "on every attempt of one operation. Keys belong to the client the bearer token authenticates; no client "
             "can meet another's.")

TYPES: dict[str, tuple[str, str]] = {
    "idempotency-key-required": ("Idempotency-Key required", "POST /charges was sent without an Idempotency-Key. "
                                 + KEY_RULES),
    "malformed-idempotency-key": ("Malformed Idempotency-Key", "The Idempotency-Key header could not be read as "
                                  "this server's key format. " + KEY_RULES),
    "malformed-x-client-id": ("Malformed X-Client-Id", "The X-Client-Id header (read only by the deliberately "
                              "naive server of lesson 08) is 1 to 255 visible ASCII characters."),
    "request-in-progress": ("Request in progress", "A request with this Idempotency-Key and this body is still "
                            "being processed. " + KEY_RULES),
    "idempotency-key-reused": ("Idempotency-Key reused with a different payload", "This Idempotency-Key was "
                               "first used with another request body. " + KEY_RULES),
    "request-taken-over": ("Request taken over", "This request outlived its claim on its Idempotency-Key and a "
                           "later request with the key took the work over; this request changed nothing."),
    "credentials-required": ("Credentials required", "Every request but a GET of these pages carries "
                             "Authorization: Bearer <token>, with the token the server issued to the client."),
    "credentials-not-recognised": ("Credentials not recognised", "The bearer token is not one this server issued."),
    "one-authorization-field": ("One Authorization field required", "A request carries at most one "
                                "Authorization header field: its value is one set of credentials, not a list "
                                "(RFC 9110, section 5.3), and two would leave open which client sent it."),
    "malformed-header-field": ("Malformed header field", "Each header line is a field name (a token), a colon "
                               "right after it, and a value on the same line (RFC 9112, section 5): no whitespace "
                               "before the colon, no obsolete line folding, no control characters."),
    "host-required": ("One Host field required", "An HTTP/1.1 request carries exactly one Host header field "
                      "(RFC 9112, section 3.2)."),
    "bad-content-length": ("Bad Content-Length", "Content-Length is one decimal number of bytes, sent "
                           "once or repeated, on one line or several."),
    "body-shorter-than-content-length": ("Body shorter than Content-Length", "The connection ended before the "
                                         "body Content-Length announced."),
    "transfer-encoding-not-supported": ("Transfer-Encoding not supported", "This server reads bodies framed by "
                                        "Content-Length only; it does not parse the chunked transfer coding, which "
                                        "RFC 9112 (section 6.1) asks a recipient to parse."),
    "body-is-not-json": ("Body is not JSON", "The body is a JSON document."),
    "repeated-member-in-body": ("Repeated member in body", "Each member of a JSON object in the body is named once: "
                                "parsers differ on which of two values with one name counts (RFC 8259, section 4)."),
    "body-is-not-a-json-object": ("Body is not a JSON object", "The body is a JSON object."),
    "body-nested-too-deeply": ("Body nested too deeply", "The body is a flat JSON object."),
    "invalid-field-order-id": ("Invalid field order_id", "order_id is a whole number from 1 to 2147483647."),
    "invalid-field-amount": ("Invalid field amount", "amount is a whole number of dollars from 1 to 2147483647."),
    "invalid-status": ("Invalid status", "An order's status is 1 to 64 printable characters."),
    "card-network-failed": ("Card network failed", "The card network refused the charge before taking any money."),
    "charge-failed": ("Charge failed", "The charge failed on the server. Its detail says whether the charge "
                       "was rolled back or whether that is not known, and what a retry with the same key gets."),
}
"""This server's own problem types, by the name in their path: their title and what they mean."""

_BY_TITLE = {title: name for name, (title, _) in TYPES.items()}


# RFC 9110's phrases for the four codes Python 3.11's http module names as older RFCs did:
# 413, 414 and 416 as RFC 2616 did, 422 as RFC 4918 did.
RFC9110_PHRASES = {413: "Content Too Large", 414: "URI Too Long", 416: "Range Not Satisfiable",
                   422: "Unprocessable Content"}


def phrase(status: int) -> str:
    """The status's phrase as RFC 9110 names it: the title of an ``about:blank`` problem."""
    return RFC9110_PHRASES.get(status) or HTTPStatus(status).phrase


def problem(status: int, title: str, detail: str) -> dict[str, Any]:
    """A problem-details body: ``about:blank`` for a title that is the status's phrase, else one of :data:`TYPES`."""
    if title == phrase(status):
        kind = "about:blank"
    elif title in _BY_TITLE:
        kind = TYPES_PATH + _BY_TITLE[title]
    else:
        raise ValueError(f"no problem type has the title {title!r}: use the status phrase or add a type")
    return {"type": kind, "title": title, "status": status, "detail": detail}


def documentation(name: str, retention_seconds: float) -> str | None:
    """The page a problem type's URI leads to, with the server's key retention; None for a name that is no type."""
    if name not in TYPES:
        return None
    title, meaning = TYPES[name]
    return f"{title}\n\n{meaning}\nThis server keeps a key for {retention_seconds / 3600:g} hours after its first use.\n"


def busy() -> Refused:
    """The 503 for a request that concurrent ones kept from committing: nothing of it was stored."""
    return Refused(503, phrase(503), "Concurrent requests kept this one from committing; nothing was changed. "
                   "Retry in a moment, with the same key if it has one.", headers={"Retry-After": "1"})


class Refused(Exception):
    """A request answered with a problem instead of its work (nothing stored for it), or a failure to report.

    ``headers`` are sent with the answer (``Allow`` with a 405, ``Retry-After``);
    ``close`` says the connection cannot carry another request, because the body's
    end is unknown.
    """

    def __init__(self, status: int, title: str, detail: str, *, headers: dict[str, str] | None = None,
                 close: bool = False) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail
        self.headers, self.close = headers or {}, close

    @property
    def body(self) -> dict[str, Any]:
        return problem(self.status, self.title, self.detail)
