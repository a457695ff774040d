"""Every request gets an answer, and every error is problem details (RFC 9457), whatever the client sends (issue 10).

The refusals share one server: each must leave the key store and the payments
table as empty as it found them.
"""

import json
import select
import socket
import time

import pytest
from http_raw import http_request, is_problem, raw_request

from idemlib.http import ChargesApi, serve

CHARGE = {"order_id": 1042, "amount": 40}
TOKEN = ""  # the bearer token the module's server issued


def post(url, body, key='"k"', *, length=None, headers=None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw_request(url, http_request("POST", "/charges", raw, {"Idempotency-Key": key, **(headers or {})},
                                         length=length, token=TOKEN))


@pytest.fixture(scope="module")
def api():
    global TOKEN
    api = ChargesApi()
    TOKEN = api.issue_token("shop-1")
    return api


@pytest.fixture(scope="module")
def server(api):
    with serve(api, client_timeout=0.3) as running:
        yield running


@pytest.fixture(autouse=True)
def nothing_stored(api):
    yield
    assert api.stored_keys() == [] and api.executions == 0


@pytest.mark.parametrize(("length", "status", "title"), [
    ("abc", 400, "Bad Content-Length"),
    ("-1", 400, "Bad Content-Length"),
    ("9" * 20, 400, "Bad Content-Length"),
    ("²", 400, "Bad Content-Length"),
    ("1e3", 400, "Bad Content-Length"),
    (str(10**6), 413, "Content Too Large"),
    ("500", 400, "Body shorter than Content-Length"),
])
def test_a_malformed_content_length_gets_a_problem(server, length, status, title):
    answer = post(server.url, CHARGE, length=length)
    assert (answer.status, answer.body["title"]) == (status, title) and is_problem(answer)


def test_two_different_content_lengths_and_a_transfer_encoding_are_refused(server):
    body = json.dumps(CHARGE).encode()
    twice = http_request("POST", "/charges", body, {"Idempotency-Key": '"k"', "Content-Length": "3"}, token=TOKEN)
    twice = twice.replace(b"Host:", f"Content-Length: {len(body)}\r\nHost:".encode())
    assert post(server.url, b"", length="0").status == 400  # an empty body is no charge
    assert raw_request(server.url, twice).status == 400
    chunked = raw_request(server.url, http_request("POST", "/charges", b"0\r\n\r\n", {"Transfer-Encoding": "chunked"},
                                                   token=TOKEN))
    assert chunked.status == 501 and is_problem(chunked)


@pytest.mark.parametrize(("body", "title"), [
    (b"[" * 100_000 + b"]" * 100_000, "Body too large"),
    (b"[" * 5_000 + b"]" * 5_000, "Body nested too deeply"),
    ({"order_id": 1042, "amount": 2**31}, "Invalid field amount"),
    ({"order_id": 2**31, "amount": 40}, "Invalid field order_id"),
    (b'{"order_id": 1042, "amount": ' + b"9" * 5000 + b"}", "Body is not JSON"),  # beyond int()'s digit limit
    ({"order_id": 1042, "amount": 40.0}, "Invalid field amount"),
    ({"order_id": 0, "amount": 40}, "Invalid field order_id"),
    ({"order_id": 1042, "amount": True}, "Invalid field amount"),
    (b'{"order_id": 1042, "amount": 5, "amount": 500}', "Repeated member in body"),  # which amount is charged?
    (b'{"order_id": 1042, "amount": 5, "meta": {"a": 1, "a": 2}}', "Repeated member in body"),
    (b'{"order_id": 1042, "amount": 40, "tip": NaN}', "Body is not JSON"),  # Python's parser takes it; JSON has none
    (b'{"order_id": 1042, "amount": 40, "tip": -Infinity}', "Body is not JSON"),
])
def test_bodies_the_database_cannot_hold_are_refused_before_any_work(server, body, title):
    answer = post(server.url, body)
    expected = (413, "Content Too Large") if title == "Body too large" else (400, title)
    assert (answer.status, answer.body["title"]) == expected and is_problem(answer)


@pytest.mark.parametrize("path", ["/orders/²/status", "/orders/1²/status", "/orders/99999999999/status",
                                  "/orders/0/status", "/orders//status", "/orders/1/status/x"])
def test_an_order_id_int_cannot_read_or_the_column_cannot_hold_is_not_found(server, path):
    answer = raw_request(server.url, http_request("PUT", path, b'{"status": "PAID"}'))
    assert answer.status == 404 and is_problem(answer)


@pytest.mark.parametrize(("request_bytes", "status", "allow"), [
    (http_request("GET", "/charges"), 405, "POST"),
    (http_request("PATCH", "/orders/7/status", b"{}"), 405, "GET, HEAD, PUT, DELETE"),
    (http_request("OPTIONS", "/charges"), 405, "POST"),
    (http_request("BREW", "/charges"), 501, None),
    (b"complete nonsense\r\n\r\n", 400, None),
    (b"POST /charges HTTP/7.0\r\n\r\n", 505, None),
    (http_request("POST", "/charges", headers={"Authorization": "Bearer two words"}), 401, None),
    (http_request("POST", "/charges?x=1", b"{}"), 404, None),
])
def test_methods_and_requests_not_served_get_problem_details_not_html(server, request_bytes, status, allow):
    answer = raw_request(server.url, request_bytes)
    assert answer.status == status and is_problem(answer)
    assert answer.headers.get("allow") == allow


def test_a_head_request_gets_the_status_without_a_body(server):
    answer = raw_request(server.url, http_request("HEAD", "/charges"))
    assert answer.status == 405 and answer.body is None


def test_a_client_that_never_finishes_its_body_is_answered_408_when_the_socket_times_out(server):
    started = time.monotonic()
    answer = raw_request(server.url, http_request("POST", "/charges", b'{"order_id"', {"Idempotency-Key": '"slow"'},
                                                  length="33", token=TOKEN), finish=False)
    assert answer.status == 408 and is_problem(answer)
    assert time.monotonic() - started < 3  # bounded by the 0.3 s timeout, not by the client


def test_a_client_dripping_its_body_a_byte_at_a_time_is_cut_off_by_the_same_timeout(server):
    head = http_request("POST", "/charges", b"", {"Idempotency-Key": '"drip"'}, length="33", token=TOKEN)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        sock.sendall(head)
        answer = b""
        for byte in json.dumps(CHARGE).encode():
            if select.select([sock], [], [], 0.05)[0]:
                break  # the server has answered
            sock.sendall(bytes([byte]))
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 408") and time.monotonic() - started < 3


def test_headers_that_stop_arriving_get_408(server):
    answer = raw_request(server.url, b"POST /charges HTTP/1.1\r\nHost: localhost\r\nIdempotency-", finish=False)
    assert answer.status == 408 and is_problem(answer)


def test_an_unexpected_failure_outside_the_work_is_still_answered_with_problem_details(api, server, monkeypatch):
    monkeypatch.setattr(api.keys, "claim", lambda *args: 1 / 0)
    answer = post(server.url, CHARGE)
    assert answer.status == 500 and is_problem(answer) and "ZeroDivisionError" in answer.body["detail"]


