"""The Idempotency-Key header on a real HTTP server on loopback, with a real HTTP client."""

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
from http_raw import http_request, is_problem, raw_request

from idemlib.http import ChargesApi, Client, serve
from idemlib.provider import behaviours
from idemlib.stores import DuckDBPayments

CHARGE = {"order_id": 1042, "amount": 40}


@pytest.fixture
def api():
    return ChargesApi()


@pytest.fixture
def client(api):
    server = serve(api)
    yield Client(server.url)
    server.stop()


def test_a_retry_after_a_dropped_answer_gets_the_stored_result_marked_as_a_replay(api, client):
    api.drop_next_responses()
    first, retry = client.post_charge(CHARGE, key="m-7f3")
    assert first.status is None and "no answer" in first.error
    assert (retry.status, retry.body["id"], retry.replayed) == (201, "ch_81", True)
    assert api.executions == 1 and api.payments.total_charged() == 40


def test_without_a_key_a_retry_charges_twice_under_stripe_rules():
    api = ChargesApi(behaviours()["stripe-v1"])
    with serve(api) as server:
        api.drop_next_responses()
        attempts = Client(server.url).post_charge(CHARGE)
    assert [a.status for a in attempts] == [None, 201]
    assert api.payments.total_charged() == 80


def test_a_missing_key_gets_400_where_the_draft_requires_one(api, client):
    [attempt] = client.post_charge(CHARGE)
    assert attempt.status == 400 and "Idempotency-Key" in attempt.body["detail"]
    assert api.stored_keys() == [] and api.executions == 0


def test_a_key_reused_with_a_different_payload_gets_422(api, client):
    client.post_charge(CHARGE, key="m-7f3")
    [attempt] = client.post_charge({"order_id": 1042, "amount": 80}, key="m-7f3")
    assert attempt.status == 422 and attempt.body["title"].startswith("Idempotency-Key reused")
    assert api.executions == 1


def test_concurrent_duplicates_execute_once_and_the_rest_get_409_or_the_stored_result(api, client):
    api.work_seconds = 0.3
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(client.post_charge(CHARGE, key="same")[-1]))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    executed = [a for a in answers if a.status == 201 and not a.replayed]
    others = [a for a in answers if not (a.status == 201 and not a.replayed)]
    assert api.executions == 1 and len(executed) == 1 and len(others) == 7
    assert all(a.status == 409 or a.replayed for a in others)


def test_keys_are_scoped_to_the_client_that_sent_them(api, client):
    client.post_charge(CHARGE, key="m-7f3")
    [other] = Client(client_url(client), "shop-2").post_charge(CHARGE, key="m-7f3")
    assert other.status == 201 and not other.replayed
    assert api.executions == 2


def client_url(client):
    return f"http://{client.host}:{client.port}"


def test_an_expired_key_is_forgotten_and_the_request_runs_again(api, client):
    client.post_charge(CHARGE, key="m-7f3")
    api.clock.advance(api.behaviour.retention_seconds)
    [again] = client.post_charge(CHARGE, key="m-7f3")
    assert again.status == 201 and not again.replayed and api.executions == 2


def test_stripe_v1_replays_a_stored_error_and_v2_runs_it_again():
    outcomes = {}
    for name in ("stripe-v1", "stripe-v2"):
        api = ChargesApi(behaviours()[name])
        with serve(api) as server:
            api.fail_next()
            client = Client(server.url)
            first = client.post_charge(CHARGE, key="k")[-1]
            second = client.post_charge(CHARGE, key="k")[-1]
        outcomes[name] = (first.status, second.status, second.replayed, api.executions)
    assert outcomes == {"stripe-v1": (503, 503, True, 0), "stripe-v2": (503, 201, False, 1)}


@pytest.mark.parametrize(("body", "key", "title"), [
    ("not json", "k1", "Body is not JSON"),
    ([1, 2], "k2", "Body is not a JSON object"),
    ({"order_id": 1042, "amount": -5}, "k3", "Invalid field amount"),
    (CHARGE, "x" * 300, "Malformed Idempotency-Key"),
    (CHARGE, "has space", "Malformed Idempotency-Key"),
])
def test_bad_input_gets_a_clear_problem_details_400_and_nothing_is_stored(api, client, body, key, title):
    [attempt] = client.post_charge(body, key=key)
    assert attempt.status == 400 and attempt.body["title"] == title and attempt.body["detail"]
    assert api.stored_keys() == [] and api.executions == 0


def test_a_quoted_key_as_the_draft_writes_it_is_the_same_key(api, client):
    client.post_charge(CHARGE, key='"m-7f3"')
    [again] = client.post_charge(CHARGE, key="m-7f3")
    assert again.replayed


def test_put_and_delete_need_no_key_because_repeating_them_changes_nothing(api, client):
    for _ in range(2):
        assert client.request("PUT", "/orders/1042/status", {"status": "PAID"}).status == 200
    assert api.order_status(1042) == "PAID"
    for _ in range(2):
        assert client.request("DELETE", "/orders/1042/status").status == 200
    assert api.order_status(1042) is None
    assert client.request("PUT", "/orders/x/status", {"status": "PAID"}).status == 404


def test_stopping_the_server_frees_its_port():
    server = serve()
    port = server.server_address[1]
    server.stop()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


# Every request answered, errors as problem details (issue 10), and no key stuck in progress (issues 10 and 12).

def post(url, body, key="k", *, length=None, headers=None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw_request(url, http_request("POST", "/charges", raw, {"Idempotency-Key": key, **(headers or {})},
                                         length=length))


@pytest.fixture
def server(api):
    with serve(api, client_timeout=0.3) as running:
        yield running


@pytest.mark.parametrize(("length", "status", "title"), [
    ("abc", 400, "Bad Content-Length"),
    ("-1", 400, "Bad Content-Length"),
    ("9" * 20, 400, "Bad Content-Length"),
    ("²", 400, "Bad Content-Length"),
    ("1e3", 400, "Bad Content-Length"),
    (str(10**6), 413, "Content too large"),
    ("500", 400, "Body shorter than Content-Length"),
])
def test_a_malformed_content_length_gets_a_problem_and_stores_nothing(api, server, length, status, title):
    answer = post(server.url, CHARGE, length=length)
    assert (answer.status, answer.body["title"]) == (status, title) and is_problem(answer)
    assert api.stored_keys() == [] and api.executions == 0


def test_two_different_content_lengths_and_a_transfer_encoding_are_refused(server):
    body = json.dumps(CHARGE).encode()
    twice = http_request("POST", "/charges", body, {"Idempotency-Key": "k", "Content-Length": "3"})
    twice = twice.replace(b"Host:", f"Content-Length: {len(body)}\r\nHost:".encode())
    assert post(server.url, b"", length="0").status == 400  # an empty body is no charge
    assert raw_request(server.url, twice).status == 400
    chunked = raw_request(server.url, http_request("POST", "/charges", b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}))
    assert chunked.status == 501 and is_problem(chunked)


@pytest.mark.parametrize(("body", "title"), [
    (b"[" * 100_000 + b"]" * 100_000, "Body too large"),
    (b"[" * 5_000 + b"]" * 5_000, "Body nested too deeply"),
    ({"order_id": 1042, "amount": 2**31}, "Invalid field amount"),
    ({"order_id": 2**31, "amount": 40}, "Invalid field order_id"),
    (b'{"order_id": 1042, "amount": ' + b"9" * 5000 + b"}", "Body is not JSON"),  # beyond int()'s digit limit
    ({"order_id": 1042, "amount": 40.0}, "Invalid field amount"),
    (b'{"order_id": 1042, "amount": 40, "note": "\\u0000"}', None),  # extra fields are ignored, NUL and all
])
def test_bodies_the_database_cannot_hold_are_refused_before_any_work(api, server, body, title):
    answer = post(server.url, body)
    if title is None:
        assert answer.status == 201
        return
    if title == "Body too large":
        assert (answer.status, answer.body["title"]) == (413, "Content too large")
    else:
        assert (answer.status, answer.body["title"]) == (400, title)
    assert is_problem(answer) and api.stored_keys() == [] and api.executions == 0


def test_the_largest_amount_the_column_holds_is_charged(api, client):
    [attempt] = client.post_charge({"order_id": 2**31 - 1, "amount": 2**31 - 1}, key="max")
    assert attempt.status == 201 and api.payments.total_charged() == 2**31 - 1


@pytest.mark.parametrize("path", ["/orders/²/status", "/orders/1²/status", "/orders/99999999999/status",
                                  "/orders/0/status", "/orders//status", "/orders/1/status/x"])
def test_an_order_id_int_cannot_read_or_the_column_cannot_hold_is_not_found(server, path):
    answer = raw_request(server.url, http_request("PUT", path, b'{"status": "PAID"}'))
    assert answer.status == 404 and is_problem(answer)


@pytest.mark.parametrize(("request_bytes", "status", "allow"), [
    (http_request("GET", "/charges"), 405, "POST"),
    (http_request("PATCH", "/orders/7/status", b"{}"), 405, "PUT, DELETE"),
    (http_request("OPTIONS", "/charges"), 405, "POST"),
    (http_request("BREW", "/charges"), 501, None),
    (b"complete nonsense\r\n\r\n", 400, None),
    (b"POST /charges HTTP/7.0\r\n\r\n", 505, None),
    (http_request("POST", "/charges", headers={"X-Client-Id": "two words"}), 400, None),
    (http_request("POST", "/charges?x=1", b"{}"), 404, None),
])
def test_methods_and_requests_not_served_get_problem_details_not_html(api, server, request_bytes, status, allow):
    answer = raw_request(server.url, request_bytes)
    assert answer.status == status and is_problem(answer)
    assert answer.headers.get("allow") == allow
    assert api.stored_keys() == []


def test_a_head_request_gets_the_status_without_a_body(server):
    answer = raw_request(server.url, http_request("HEAD", "/charges"))
    assert answer.status == 405 and answer.body is None


def test_a_client_that_never_finishes_its_body_is_answered_408_when_the_socket_times_out(api, server):
    started = time.monotonic()
    answer = raw_request(server.url, http_request("POST", "/charges", b'{"order_id"', {"Idempotency-Key": "slow"},
                                                  length="33"), finish=False)
    assert answer.status == 408 and is_problem(answer)
    assert time.monotonic() - started < 3  # bounded by the 0.3 s timeout, not by the client
    assert api.stored_keys() == []


def failing_charge_once(monkeypatch):
    """The next charge's insert raises, as a bug or a broken database would."""
    from idemlib.stores.sql import PaymentsSession
    real = PaymentsSession.charge
    calls = []

    def charge(self, *args):
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("the database went away")
        return real(self, *args)
    monkeypatch.setattr(PaymentsSession, "charge", charge)


@pytest.mark.parametrize(("rules", "retry_status", "executions"), [("stripe-v1", 500, 0), ("stripe-v2", 201, 1),
                                                                    ("ietf-draft", 500, 0)])
def test_a_handler_failure_is_answered_500_and_leaves_no_key_in_progress(monkeypatch, rules, retry_status, executions):
    failing_charge_once(monkeypatch)
    api = ChargesApi(behaviours()[rules])
    with serve(api) as running:
        first = post(running.url, CHARGE, key="m-7f3")
        assert first.status == 500 and is_problem(first) and "nothing was charged" in first.body["detail"]
        assert api.stored_keys() == [("anonymous", "m-7f3", 500)]  # recorded, never left in progress
        retry = post(running.url, CHARGE, key="m-7f3")
    assert retry.status == retry_status and api.executions == executions


def test_an_unexpected_failure_outside_the_work_is_still_answered_with_problem_details(api, server, monkeypatch):
    monkeypatch.setattr(api.keys, "claim", lambda *args: 1 / 0)
    answer = post(server.url, CHARGE)
    assert answer.status == 500 and is_problem(answer) and "ZeroDivisionError" in answer.body["detail"]


def together(count, send):
    """``count`` requests sent at the same moment from their own threads; their answers."""
    barrier = threading.Barrier(count)
    answers = []

    def one():
        barrier.wait()
        answers.append(send())
    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_under_stripe_v2_eight_simultaneous_retries_after_a_stored_failure_execute_once():
    api = ChargesApi(behaviours()["stripe-v2"])
    with serve(api) as running:
        client = Client(running.url)
        api.fail_next()
        assert client.post_charge(CHARGE, key="k")[-1].status == 503
        api.work_seconds = 0.2
        answers = together(8, lambda: client.post_charge(CHARGE, key="k")[-1])
    assert api.executions == 1 and api.payments.total_charged() == 40
    executed = [a for a in answers if a.status == 201 and not a.replayed]
    assert len(executed) == 1 and all(a.status == 409 or a.replayed for a in answers if a not in executed)


def test_simultaneous_duplicates_of_an_expired_key_are_all_answered_and_charge_once_more(api, client):
    client.post_charge(CHARGE, key="m-7f3")
    api.clock.advance(api.behaviour.retention_seconds)
    api.work_seconds = 0.1
    answers = together(8, lambda: client.post_charge(CHARGE, key="m-7f3", retries=0)[-1])
    assert all(a.status in (201, 409) for a in answers) and [a.status for a in answers].count(201) >= 1
    assert api.executions == 2


def test_simultaneous_puts_and_deletes_of_one_order_are_all_answered(api, client):
    answers = together(8, lambda: client.request("PUT", "/orders/5/status", {"status": "PAID"}))
    answers += together(8, lambda: client.request("DELETE", "/orders/5/status"))
    assert [a.status for a in answers] == [200] * 16 and api.order_status(5) is None


def test_a_request_that_outlives_its_deadline_is_taken_over_and_only_the_takeover_charges(api, client):
    api.work_seconds = 0.4
    slow = []
    first = threading.Thread(target=lambda: slow.extend(client.post_charge(CHARGE, key="m-7f3")))
    first.start()
    time.sleep(0.15)  # the first request has claimed the key and is at work
    assert client.post_charge(CHARGE, key="m-7f3")[0].status == 409
    api.clock.advance(api.in_progress_seconds)
    api.work_seconds = 0.5
    [takeover] = client.post_charge(CHARGE, key="m-7f3")
    first.join()
    assert slow[0].status == 409 and slow[0].body["title"] == "Request taken over"
    assert (takeover.status, takeover.replayed) == (201, False)
    assert api.executions == 1 and client.post_charge(CHARGE, key="m-7f3")[0].replayed


CHILD = """
import sys, time
from idemlib.http import ChargesApi, serve
from idemlib.stores import DuckDBPayments
server = serve(ChargesApi(payments=DuckDBPayments(sys.argv[1]), work_seconds=60))
print(server.url, flush=True)
time.sleep(120)
"""


def test_a_server_killed_after_the_claim_leaves_a_key_that_a_retry_takes_over_after_the_deadline(tmp_path):
    path = str(tmp_path / "keys.duckdb")
    child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True)
    try:
        url = child.stdout.readline().strip()
        impatient = Client(url, timeout=1.0)
        [first] = impatient.post_charge(CHARGE, key="m-7f3", retries=0)  # claims, then works for a minute
        assert first.status is None and impatient.post_charge(CHARGE, key="m-7f3")[0].status == 409
        child.kill()  # SIGKILL: the process dies holding the claim, with no chance to clean up
        child.wait(timeout=10)
    finally:
        child.kill()
    api = ChargesApi(payments=DuckDBPayments(path))
    assert api.stored_keys() == [("shop-1", "m-7f3", None)] and api.executions == 0  # stuck in progress, nothing charged
    with serve(api) as running:
        client = Client(running.url)
        assert client.post_charge(CHARGE, key="m-7f3")[0].status == 409  # before the deadline: still in progress
        api.clock.advance(api.in_progress_seconds)
        answers = together(4, lambda: client.post_charge(CHARGE, key="m-7f3")[0])
        late = client.post_charge(CHARGE, key="m-7f3")[0]
    assert [a.status for a in answers].count(201) >= 1 and all(a.status in (201, 409) for a in answers)
    assert [a.replayed for a in answers if a.status == 201].count(False) == 1 and late.replayed
    assert api.executions == 1 and api.payments.total_charged() == 40
