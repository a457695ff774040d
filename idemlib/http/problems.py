"""Problem details (RFC 9457): how every refusal and every failure of the HTTP layer is answered.

A problem-details body is a JSON object with a ``title`` (what kind of problem), the
``status`` repeated, and a ``detail`` saying what is wrong with this request and what
to do about it, sent as ``application/problem+json``.
"""

from __future__ import annotations

from typing import Any

PROBLEM_TYPE = "application/problem+json"


def problem(status: int, title: str, detail: str) -> dict[str, Any]:
    """A problem-details body; ``about:blank`` says the status code is all the type there is."""
    return {"type": "about:blank", "title": title, "status": status, "detail": detail}


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
