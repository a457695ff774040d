"""The Idempotency-Key header on a real HTTP server on loopback, with a real HTTP client."""

import socket
import subprocess
import sys
import threading
import time

import pytest

from idemlib.http import ChargesApi, Client, KeyRecord, decide, fingerprint, serve
from idemlib.provider import behaviours
from idemlib.stores import DuckDBPayments

CHARGE = {"order_id": 1042, "amount": 40}


@pytest.fixture
def api():
    return ChargesApi()


@pytest.fixture
def client(api):
    server = serve(api)
    yield Client(server.url, api.issue_token("shop-1"))
    server.stop()


def shop(api, url, name="shop-1"):
    """A client of the server at ``url``, authenticated as ``name``."""
    return Client(url, api.issue_token(name))


def test_a_retry_after_a_dropped_answer_gets_the_stored_result_marked_as_a_replay(api, client):
    api.drop_next_responses()
    first, retry = client.post_charge(CHARGE, key="m-7f3")
    assert first.status is None and "no answer" in first.error
    assert (retry.status, retry.replayed) == (201, True) and api.charge("shop-1", retry.body["id"]) == retry.body
    assert api.executions == 1 and api.payments.total_charged() == 40


def test_without_a_key_a_retry_charges_twice_under_stripe_rules():
    api = ChargesApi(behaviours()["stripe-v1"])
    with serve(api) as server:
        api.drop_next_responses()
        attempts = shop(api, server.url).post_charge(CHARGE)
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
    [other] = shop(api, client_url(client), "shop-2").post_charge(CHARGE, key="m-7f3")
    assert other.status == 201 and not other.replayed
    assert api.executions == 2


def client_url(client):
    return f"http://{client.host}:{client.port}"


def test_an_expired_key_is_forgotten_and_the_request_runs_again(api, client):
    client.post_charge(CHARGE, key="m-7f3")
    api.clock.advance(api.behaviour.retention_seconds)
    [again] = client.post_charge(CHARGE, key="m-7f3")
    assert again.status == 201 and not again.replayed and api.executions == 2


@pytest.mark.parametrize(("rules", "retried"), [("stripe-v1", (500, True, 0)), ("stripe-v2", (201, False, 1)),
                                               ("ietf-draft", (201, False, 1))])
def test_a_failed_charge_is_replayed_under_stripe_v1_and_run_again_under_the_other_rules(rules, retried):
    api = ChargesApi(behaviours()[rules])
    with serve(api) as server:
        api.fail_next()
        client = shop(api, server.url)
        first = client.post_charge(CHARGE, key="k")[-1]
        second = client.post_charge(CHARGE, key="k")[-1]
    assert first.status == 500 and (second.status, second.replayed, api.executions) == retried
    # The body says what the retry got: the same answer again, or a charge run again.
    promise = "gets it again" if rules == "stripe-v1" else "runs the charge again"
    assert promise in first.body["detail"] and first.body["title"] == "Card network failed"


def test_a_failed_charge_without_a_key_says_nothing_was_charged():
    api = ChargesApi(behaviours()["stripe-v1"])
    with serve(api) as server:
        api.fail_next()
        [attempt] = shop(api, server.url).post_charge(CHARGE)
    assert attempt.status == 500 and "nothing was charged" in attempt.body["detail"] and api.stored_keys() == []


def test_a_held_charge_stays_in_progress_until_it_is_let_go(api, client):
    gate = api.hold_next()
    first = threading.Thread(target=client.post_charge, args=(CHARGE, "held"))
    first.start()
    assert api.wait_for_key("held")
    retries = [client.post_charge(CHARGE, key="held")[0].status for _ in range(3)]
    gate.set()
    first.join()
    assert retries == [409, 409, 409] and client.post_charge(CHARGE, key="held")[0].replayed and api.executions == 1


def test_the_hold_goes_to_the_request_that_claimed_the_key_however_slowly_it_reaches_its_charge(api, client,
                                                                                               monkeypatch):
    """A request claims its key a moment before its charge takes the hold; on a busy machine that moment
    can be long. A request with another key sent after wait_for_key must not take the hold in its place."""
    charge, calls = ChargesApi._charge, []

    def slow_first(self, client, body, claim):
        calls.append(claim.key)
        if len(calls) == 1:
            time.sleep(0.5)  # claimed, not yet at its charge
        return charge(self, client, body, claim)

    monkeypatch.setattr(ChargesApi, "_charge", slow_first)
    gate = api.hold_next()
    first = threading.Thread(target=client.post_charge, args=(CHARGE, "held"))
    first.start()
    assert api.wait_for_key("held")
    other = client.post_charge(CHARGE, key="another")[-1]
    assert other.status == 201 and api.executions == 1  # charged at once: the hold is the first request's
    gate.set()
    first.join()
    assert calls == ["held", "another"] and api.executions == 2


def test_an_orphaned_claim_refuses_retries_until_its_60_second_deadline_then_is_taken_over(api, client):
    api.keys.claim("shop-1", "m-9e1", fingerprint(CHARGE), api.clock.now())  # a server died mid-charge
    answers = []
    for wait in (0.0, 59.0, 1.0):
        api.clock.advance(wait)
        answers.append(client.post_charge(CHARGE, key="m-9e1")[0].status)
    assert api.in_progress_seconds == 60 and answers == [409, 409, 201] and api.executions == 1


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


def test_the_client_sends_its_key_as_the_structured_field_string_the_draft_requires(api, client):
    [first] = client.post_charge(CHARGE, key='m-7f3 "quoted\\"')  # a space, quotes and a backslash: escaped
    assert first.status == 400 and "space" in first.body["detail"]  # the space breaks this server's policy only
    client.post_charge(CHARGE, key='m-7f3"q\\')
    assert api.stored_keys() == [("shop-1", 'm-7f3"q\\', 201)]  # stored unescaped
    assert client.request("POST", "/charges", CHARGE, {"Idempotency-Key": '"m-7f3\\"q\\\\"'}).replayed


def test_put_and_delete_need_no_key_because_repeating_them_changes_nothing(api, client):
    for _ in range(2):
        assert client.request("PUT", "/orders/1042/status", {"status": "PAID"}).status == 200
    assert api.order_status("shop-1", 1042) == "PAID"
    # The repeated DELETE has the first one's effect (the status is gone); its answer says there is nothing left.
    assert [client.request("DELETE", "/orders/1042/status").status for _ in range(2)] == [200, 404]
    assert api.order_status("shop-1", 1042) is None
    assert client.request("PUT", "/orders/x/status", {"status": "PAID"}).status == 404


def test_stopping_the_server_frees_its_port():
    server = serve()
    port = server.server_address[1]
    server.stop()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


# Concurrency, failures and the in-progress deadline (issues 10 and 12).

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
                                                                    ("ietf-draft", 201, 1)])
def test_a_handler_failure_is_answered_500_and_leaves_no_key_in_progress(monkeypatch, rules, retry_status, executions):
    failing_charge_once(monkeypatch)
    api = ChargesApi(behaviours()[rules])
    with serve(api) as running:
        first = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
        assert (first.status, first.body["status"], first.body["title"]) == (500, 500, "Charge failed")
        assert api.stored_keys() == [("shop-1", "m-7f3", 500)]  # recorded, never left in progress
        retry = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
    assert retry.status == retry_status and api.executions == executions


def test_a_failure_after_the_commit_is_answered_with_the_charge_it_committed(monkeypatch):
    """An error raised once the charge has committed (a connection lost after COMMIT) must not say "nothing was charged"."""
    from idemlib.http import charges
    real = charges.retry_conflicts

    def commit_then_fail(database, work):
        result = real(database, work)
        if work.__name__ == "commit":  # the charge's commit, not a key's claim
            raise RuntimeError("the connection dropped after the commit")
        return result
    monkeypatch.setattr(charges, "retry_conflicts", commit_then_fail)
    api = ChargesApi()
    with serve(api) as running:
        first = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
        monkeypatch.undo()
        retry = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
    assert (first.status, retry.status, retry.replayed, api.executions) == (201, 201, True, 1)


def test_a_failure_whose_outcome_cannot_be_read_keeps_the_key_in_progress(monkeypatch):
    """Where the database cannot say whether the charge committed, the answer says so, and no retry runs early."""
    from idemlib.http import charges
    api = ChargesApi()

    def unreadable(database, work):
        if work.__name__ == "commit":  # the charge's commit: the database goes away during it
            monkeypatch.setattr(api.payments, "connect", lambda: (_ for _ in ()).throw(RuntimeError("gone")))
            raise RuntimeError("the database went away during the commit")
        return real(database, work)
    real = charges.retry_conflicts
    monkeypatch.setattr(charges, "retry_conflicts", unreadable)
    with serve(api) as running:
        first = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
        monkeypatch.undo()
        assert api.stored_keys() == [("shop-1", "m-7f3", None)]  # left in progress, not settled as "not charged"
        early = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
        api.clock.advance(api.in_progress_seconds)
        late = shop(api, running.url).post_charge(CHARGE, key="m-7f3")[0]
    assert first.status == 500 and "not known" in first.body["detail"] and "nothing was charged" not in first.body["detail"]
    assert (early.status, late.status, api.executions) == (409, 201, 1)


def test_the_largest_amount_the_column_holds_is_charged_and_extra_fields_are_ignored(api, client):
    [attempt] = client.post_charge({"order_id": 2**31 - 1, "amount": 2**31 - 1, "note": "\u0000"}, key="max")
    assert attempt.status == 201 and api.payments.total_charged() == 2**31 - 1


def record(**changes):
    return KeyRecord(**{"client": "shop-1", "key": "m-7f3", "fingerprint": "f", "created_at": 0.0, "claim": 1,
                        "deadline": 60.0, "status": None, "body": None, **changes})


@pytest.mark.parametrize(("found", "now", "replays_errors", "decision"), [
    (None, 0.0, True, "new"),
    (record(), 59.0, True, "busy"),
    (record(fingerprint="other"), 59.0, True, "mismatch"),  # another payload is the draft's 422, even in flight
    (record(), 60.0, True, "takeover"),
    (record(fingerprint="other"), 60.0, True, "mismatch"),
    (record(deadline=None, status=201, body={}), 10.0, True, "replay"),
    (record(deadline=None, status=201, body={}), 10.0, False, "replay"),
    (record(deadline=None, status=500, body={}), 10.0, True, "replay"),
    (record(deadline=None, status=500, body={}), 10.0, False, "rerun"),
    (record(deadline=None, status=201, body={}), 86_400.0, True, "new"),  # expired
    (record(), 86_400.0, True, "new"),  # expired while still in progress
])
def test_what_a_request_does_with_the_record_it_finds(found, now, replays_errors, decision):
    assert decide(found, "f", now, retention_seconds=86_400, replays_errors=replays_errors) == decision


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
        client = shop(api, running.url)
        api.fail_next()
        assert client.post_charge(CHARGE, key="k")[-1].status == 500
        api.work_seconds = 0.2
        answers = together(8, lambda: client.post_charge(CHARGE, key="k")[-1])
    assert api.executions == 1 and api.payments.total_charged() == 40
    executed = [a for a in answers if a.status == 201 and not a.replayed]
    assert len(executed) == 1 and all(a.status == 409 or a.replayed for a in answers if a not in executed)


@pytest.mark.parametrize("rival", [
    "DELETE FROM idempotency_keys",  # what a duplicate did before: delete the expired key, then insert
    "UPDATE idempotency_keys SET claim = claim + 1, deadline = 0",  # what a duplicate's claim does now
])
def test_a_request_whose_expired_key_a_concurrent_duplicate_is_renewing_is_answered(api, client, rival):
    client.post_charge(CHARGE, key="m-7f3")
    api.clock.advance(api.behaviour.retention_seconds)
    duplicate = api.payments.connect()  # the duplicate is mid-way: its write is not committed yet
    duplicate.execute("BEGIN")
    duplicate.execute(rival)
    [meets_it] = client.post_charge(CHARGE, key="m-7f3", retries=0)
    duplicate.execute("ROLLBACK")
    assert meets_it.status in (201, 409, 503) and meets_it.body["status"] == meets_it.status
    api.clock.advance(api.in_progress_seconds)  # whatever claim is left in progress, its deadline has passed
    [after] = client.post_charge(CHARGE, key="m-7f3", retries=0)
    assert after.status == 201 and after.replayed == (meets_it.status == 201) and api.executions == 2


def test_simultaneous_puts_and_deletes_of_one_order_are_all_answered(api, client):
    answers = together(8, lambda: client.request("PUT", "/orders/5/status", {"status": "PAID"}))
    answers += together(8, lambda: client.request("DELETE", "/orders/5/status"))
    assert sorted(a.status for a in answers) == [200] * 9 + [404] * 7 and api.order_status("shop-1", 5) is None


def test_a_request_that_outlives_its_deadline_is_taken_over_and_only_the_takeover_charges(api, client):
    held = api.hold_next()  # the first request stays at work until the takeover has answered, however busy the machine
    slow = []
    first = threading.Thread(target=lambda: slow.extend(client.post_charge(CHARGE, key="m-7f3")))
    first.start()
    assert api.wait_for_key("m-7f3")  # the first request has claimed the key; it is now at work
    assert client.post_charge(CHARGE, key="m-7f3")[0].status == 409
    api.clock.advance(api.in_progress_seconds)
    [takeover] = client.post_charge(CHARGE, key="m-7f3")
    held.set()
    first.join()
    assert slow[0].status == 409 and slow[0].body["title"] == "Request taken over"
    assert (takeover.status, takeover.replayed) == (201, False)
    assert api.executions == 1 and client.post_charge(CHARGE, key="m-7f3")[0].replayed


CHILD = """
import sys, time
from idemlib.http import ChargesApi, serve
from idemlib.stores import DuckDBPayments
api = ChargesApi(payments=DuckDBPayments(sys.argv[1]), work_seconds=60)
server = serve(api)
print(server.url, api.issue_token("shop-1"), flush=True)
time.sleep(120)
"""


def test_a_server_killed_after_the_claim_leaves_a_key_that_a_retry_takes_over_after_the_deadline(tmp_path):
    path = str(tmp_path / "keys.duckdb")
    child = subprocess.Popen([sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True)
    try:
        url, token = child.stdout.readline().split()
        impatient = Client(url, token, timeout=1.0)
        [first] = impatient.post_charge(CHARGE, key="m-7f3", retries=0)  # claims, then works for a minute
        assert first.status is None
        give_up = time.monotonic() + 20
        while impatient.post_charge(CHARGE, key="m-7f3", retries=0)[0].status != 409:  # the claim is committed
            assert time.monotonic() < give_up, "the first request never claimed its key"
        child.kill()  # SIGKILL: the process dies holding the claim, with no chance to clean up
        child.wait(timeout=10)
    finally:
        child.kill()
    api = ChargesApi(payments=DuckDBPayments(path))
    assert api.stored_keys() == [("shop-1", "m-7f3", None)] and api.executions == 0  # stuck in progress, nothing charged
    with serve(api) as running:
        client = shop(api, running.url)
        assert client.post_charge(CHARGE, key="m-7f3")[0].status == 409  # before the deadline: still in progress
        api.clock.advance(api.in_progress_seconds)
        answers = together(4, lambda: client.post_charge(CHARGE, key="m-7f3")[0])
        late = client.post_charge(CHARGE, key="m-7f3")[0]
    assert [a.status for a in answers].count(201) >= 1 and all(a.status in (201, 409) for a in answers)
    assert [a.replayed for a in answers if a.status == 201].count(False) == 1 and late.replayed
    assert api.executions == 1 and api.payments.total_charged() == 40
