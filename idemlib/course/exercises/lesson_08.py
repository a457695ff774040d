"""Checks for lesson 08, The Idempotency-Key header."""

from __future__ import annotations

import threading
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.http import ChargesApi, Client, serve

__all__ = ["check_http_statuses"]

CASES = ("missing key", "still in progress", "different payload")


def _status(value: Any) -> int | None:
    """A status written as 409, "409", " 409 ", "409 Conflict" or HTTPStatus.CONFLICT, as a number; None if not one."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    try:
        return int(value.split()[0] if isinstance(value, str) and value.split() else value)
    except (TypeError, ValueError):
        return None


def measured_statuses() -> dict[str, int]:
    """Each of the three situations provoked against a fresh server, and the status it answered."""
    api = ChargesApi(work_seconds=0.5)
    with serve(api) as server:
        client = Client(server.url)
        charge = {"order_id": 1042, "amount": 40}
        measured = {"missing key": client.post_charge(charge)[0].status}
        slow = threading.Thread(target=client.post_charge, args=(charge, "m-7f3:charge"))
        slow.start()
        api.wait_for_key("m-7f3:charge")
        measured["still in progress"] = client.post_charge(charge, key="m-7f3:charge")[0].status
        slow.join()
        measured["different payload"] = client.post_charge({"order_id": 1042, "amount": 80}, key="m-7f3:charge")[0].status
    return {case: int(status) for case, status in measured.items() if status is not None}


@exercise
def check_http_statuses(answer: Any) -> Feedback:
    """Lesson 08: the status the server answers in each refusal, checked against a fresh server."""
    if (missing := blank(answer, 'a dict {"missing key": ..., "still in progress": ..., "different payload": ...}')) is not None:
        return missing
    if isinstance(answer, dict):  # "Missing key " names the same case as "missing key"
        answer = {" ".join(case.lower().split()) if isinstance(case, str) else case: status
                  for case, status in answer.items()}
    if not isinstance(answer, dict) or set(answer) != set(CASES):
        return hint(f"Answer with a dict with exactly these keys: {list(CASES)}, each mapped to a status such as 418.")
    given = {case: _status(answer[case]) for case in CASES}
    if None in given.values():
        unreadable = [case for case, status in given.items() if status is None]
        return hint(f"Write each status as a number (or a string of digits); could not read: {', '.join(unreadable)}.")
    measured = measured_statuses()
    wrong = [case for case in CASES if given[case] != measured.get(case)]
    if not wrong:
        return right("The server answered the same just now: a request it cannot serve without a key, one it cannot "
                     "serve yet, and one it must not serve under that key each get a status of their own.")
    if len(set(given.values())) < len(CASES):
        return hint(f"Not right yet for: {', '.join(wrong)}. The three situations get three different statuses: "
                    "send each request and read the status of its first attempt.")
    return hint(f"Not right yet for: {', '.join(wrong)}. Send that request to the server yourself and read the status "
                "of its first attempt (for the retry in progress, the first request must still be running).")
