"""Checks for lesson 08, The Idempotency-Key header."""

from __future__ import annotations

import threading
import time
from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.http import ChargesApi, Client, serve

__all__ = ["check_http_statuses"]


@exercise
def check_http_statuses(answer: Any) -> Feedback:
    """Lesson 08: the status the IETF draft suggests for each refusal, checked against the running server."""
    if (missing := blank(answer, 'a dict {"missing key": ..., "still in progress": ..., "different payload": ...}')) is not None:
        return missing
    api = ChargesApi(work_seconds=0.5)
    with serve(api) as server:
        client = Client(server.url)
        charge = {"order_id": 1042, "amount": 40}
        measured = {"missing key": client.post_charge(charge)[0].status}
        slow = threading.Thread(target=client.post_charge, args=(charge, "k"))
        slow.start()
        time.sleep(0.1)
        measured["still in progress"] = client.post_charge(charge, key="k")[0].status
        slow.join()
        measured["different payload"] = client.post_charge({"order_id": 1042, "amount": 80}, key="k")[0].status
    if not isinstance(answer, dict) or set(answer) != set(measured):
        return hint(f"Answer with a dict with exactly these keys: {sorted(measured)}.")
    wrong = [case for case in measured if answer[case] != measured[case]]
    if not wrong:
        return right("400, 409 and 422, as the server answered just now.")
    return hint(f"Not right yet for: {', '.join(wrong)}. Provoke each case against the server and read the status.")
