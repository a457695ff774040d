"""The Idempotency-Key header on a real HTTP server on loopback, with a real HTTP client."""

import socket
import threading

import pytest

from idemlib.http_api import ChargesApi, Client, serve
from idemlib.provider import behaviours

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
