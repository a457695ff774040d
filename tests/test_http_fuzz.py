"""Seeded fuzzing of the HTTP layer: malformed headers and bodies, sent concurrently, against one server (issue 10).

Whatever arrives: every request gets an answer, every error is problem details,
no key is charged twice, a repeat gets the stored answer, nothing is stored for a
request that was refused, and no key is left in progress.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

from http_raw import RawAnswer, http_request, is_problem, raw_request

from idemlib.http import ChargesApi, serve
from idemlib.http.fields import FieldError, parse_key
from idemlib.provider import behaviours

SEED = 10
REQUESTS = 240
KEYS = 4  # keys per client: few, so that duplicates meet while the first is at work
CLIENTS = ["shop-1", "shop-2"]


def body_for(rng: random.Random) -> bytes:
    """A body: mostly charges (from a small pool, so keys meet their own payload and others), or garbage."""
    charge = {"order_id": rng.choice([1042, 7]), "amount": rng.choice([40, 80])}
    return rng.choice([
        lambda: json.dumps(charge).encode(),
        lambda: json.dumps(charge).encode(),
        lambda: json.dumps(charge).encode(),
        lambda: json.dumps({**charge, "amount": rng.choice([0, -5, 2**31, 2**63, 1.5, "40", None, True])}).encode(),
        lambda: json.dumps({**charge, "order_id": rng.choice([2**31, -1, [1042], {}])}).encode(),
        lambda: b"[" * rng.choice([999, 3000, 60_000]) + b"]" * 10,
        lambda: b'{"order_id": 1042, "amount": ' + b"7" * rng.choice([20, 5000]) + b"}",
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(40))),
        lambda: json.dumps({"status": rng.choice(["PAID", "", "x" * 100, "a\x00b", 5])}).encode(),
        lambda: b"",
    ])()


def carried_key(value: str | None) -> str | None:
    """The key a field value carries for the server, None if it carries none or fails the parse."""
    try:
        return parse_key([value]) if value is not None else None
    except FieldError:
        return None


def request_for(rng: random.Random, number: int, tokens: dict[str, str]) -> tuple[bytes, tuple[str, str] | None, bool]:
    """A request's bytes, the (client, key) it carries if any, and whether it leaves its body unfinished.

    Half are well-formed charges with a pooled key; in the other half every part may be wrong,
    the credentials too (none, or a token the server never issued).
    """
    if rng.random() < 0.5:
        client = rng.choice(CLIENTS)
        key = f"{client}-{rng.randrange(KEYS)}"
        body = json.dumps({"order_id": 1042, "amount": rng.choice([40, 40, 40, 80])}).encode()
        return (http_request("POST", "/charges", body, {"Idempotency-Key": f'"{key}"'}, token=tokens[client]),
                (client, key), False)
    method = rng.choice(["POST"] * 8 + ["PUT", "DELETE", "GET", "HEAD", "BREW"])
    path = rng.choice(["/charges"] * 8 + ["/orders/1042/status", "/orders/²/status", "/orders/9999999999/status",
                                          "/nowhere", "/charges/../charges"])
    body = body_for(rng)
    headers: dict[str, str] = {}
    client = rng.choice(CLIENTS + ["stranger", None])
    token = tokens.get(client or "", "a-token-never-issued" if client else None)
    mine = [f"{client}-{n}" for n in range(KEYS)]
    key = rng.choice([f'"{k}"' for k in mine] + [None, '""', '"' + "x" * 300 + '"', '"with space"', rng.choice(mine),
                                                 f'"{rng.choice(mine)}", "x"', '"unbalanced', f'"fresh-{number}"'])
    if key is not None:
        headers["Idempotency-Key"] = key
    length = rng.choice([None] * 10 + ["abc", "-1", "9" * 20, "²", "1e2", "0", str(len(body) + 7), "99999999"])
    if rng.random() < 0.03:
        headers["Transfer-Encoding"] = "chunked"
    unfinished = length is not None and length.isdigit() and length.isascii() and int(length) > len(body) \
        and int(length) < 1000 and rng.random() < 0.3
    parsed = carried_key(key)
    carried = (client, parsed) if client in tokens and parsed is not None else None
    return http_request(method, path, body, headers, length=length, token=token), carried, unfinished


def test_fuzzed_requests_sent_concurrently_are_all_answered_and_nothing_is_charged_twice():
    rng = random.Random(SEED)
    api = ChargesApi(behaviours()["stripe-v2"], work_seconds=0.01)  # v2: keys optional, failures run again
    tokens = {client: api.issue_token(client) for client in CLIENTS}
    cases = [request_for(rng, number, tokens) for number in range(REQUESTS)]
    api.fail_next(5)
    with serve(api, client_timeout=0.3) as server, ThreadPoolExecutor(8) as pool:
        answers: list[RawAnswer] = list(pool.map(
            lambda case: raw_request(server.url, case[0], finish=not case[2]), cases))

    unanswered = [case[0][:80] for case, answer in zip(cases, answers) if answer.status is None]
    assert unanswered == []
    assert [a.raw[:300] for a in answers if a.status >= 400 and not (is_problem(a) or a.body is None)] == []
    # The five scheduled failures answer 500 "Card network failed"; no bug hides behind the fuzz.
    assert [a.body for a in answers if a.status == 500 and a.body["title"] != "Card network failed"] == []
    assert all(a.body is None for case, a in zip(cases, answers) if case[0].startswith(b"HEAD"))

    records = {(client, key): status for client, key, status in api.stored_keys()}
    assert None not in records.values(), "a key was left in progress"

    executed: dict[tuple[str, str], list[RawAnswer]] = defaultdict(list)
    answered: dict[tuple[str, str], list[RawAnswer]] = defaultdict(list)
    for (_, carried, _), answer in zip(cases, answers):
        if carried is not None and answer.status in (201, 500):
            answered[carried].append(answer)
            if answer.headers.get("idempotent-replayed") != "true":
                executed[carried].append(answer)
    # Nothing stored for a refused request: every stored key belongs to a request that ran.
    assert set(records) <= set(executed)
    # Nothing executed twice: at most one charge per key, and every answer for a key is the one stored.
    charged = api.payments.payments()
    keyed = charged[charged.message_id.isin([f"{client}:{key}" for client, key in records])]
    assert keyed.groupby("message_id").size().max() == 1
    for carried, status in records.items():
        assert [a.status for a in executed[carried]].count(201) <= 1
        successes = {json.dumps(a.body) for a in answered[carried] if a.status == 201}
        assert len(successes) <= 1 and (status != 201 or len(successes) == 1)
    charges_answered = sum(a.status == 201 and a.headers.get("idempotent-replayed") != "true"
                           for a in answers)
    assert api.executions == charges_answered
    assert charges_answered >= 8 and sum(a.status == 409 for a in answers) > 0  # the fuzz did reach the work and races
