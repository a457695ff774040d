"""What the standards the server claims ask of it, checked over raw sockets (issue 33).

- keys belong to the client a bearer token authenticates: no client is replayed
  another's answer, nor learns that another's key exists, and a request without
  valid credentials gets 401 (the draft's security section; RFC 6750);
- the ``Idempotency-Key`` field is a Structured Field String: two field lines, a
  list, a bare token, a stray quote or parameters fail its parse (RFC 8941);
- one ``Host`` field (RFC 9112, section 3.2) and the absolute form (3.2.2);
- a different payload under a key still in flight is the draft's 422, not its 409;
- problem details: ``about:blank`` with the status phrase, or a type of the
  server's own that the server documents (RFC 9457, section 4.2.1);
- 201 carries ``Location`` (RFC 9110, section 9.3.3), and a 412 refuses a ``PUT``
  whose ``If-Match`` is stale, or is ``*`` once the status is deleted (section 13.1.1),
  and a creating ``PUT`` with ``If-None-Match: *`` once a status exists (13.1.2); two
  ``If-Match`` lines are one list (5.3); a repeated ``DELETE`` is 404 and changes no
  version; each client's orders are its own;
- the fingerprint covers the whole body; ``Content-Length`` repeating one number
  frames the body on one line or two (RFC 9112, section 6.3).
"""

import json
import re
import threading

import pytest
from http_raw import http_request, is_problem, raw_request

from idemlib.http import ChargesApi, Client, serve
from idemlib.http.credentials import Credentials

CHARGE = {"order_id": 1042, "amount": 40}
BODY = json.dumps(CHARGE).encode()


@pytest.fixture
def api():
    return ChargesApi()


@pytest.fixture
def server(api):
    with serve(api) as running:
        yield running


def charge(server, token, key='"m-7f3:charge"', body=BODY, **options):
    """POST /charges over a raw socket, with ``key`` as the field's value exactly as sent."""
    headers = {"Idempotency-Key": key} if key is not None else {}
    return raw_request(server.url, http_request("POST", "/charges", body, headers, token=token, **options))


# The leak, and its fix.

def test_on_the_naive_server_a_second_party_asserting_the_same_client_id_is_replayed_the_first_ones_charge():
    naive = ChargesApi(credentials=Credentials(trust_client_id_header=True))
    with serve(naive) as running:
        shop = charge(running, None, extra=(("X-Client-Id", "shop-1"),))
        stranger = charge(running, None, extra=(("X-Client-Id", "shop-1"),))
        oracle = charge(running, None, body=b'{"order_id": 1, "amount": 1}', extra=(("X-Client-Id", "shop-1"),))
        anonymous = [charge(running, None, key='"k-anon"') for _ in range(2)]
    assert (shop.status, stranger.status, stranger.headers.get("idempotent-replayed")) == (201, 201, "true")
    assert stranger.body["id"] == shop.body["id"]  # someone else's charge, handed out
    assert oracle.status == 422  # and a different body confirms the key exists
    assert anonymous[1].headers.get("idempotent-replayed") == "true"  # no header: one namespace for all


def test_with_bearer_tokens_no_client_is_replayed_another_clients_answer_or_learns_its_key_exists(api, server):
    shop_1, shop_2 = api.issue_token("shop-1"), api.issue_token("shop-2")
    first = charge(server, shop_1)
    same = charge(server, shop_2)  # the same guessable key and body, from another client
    other_body = charge(server, shop_2, key='"m-9e1:charge"', body=b'{"order_id": 1, "amount": 1}')
    probe = charge(server, shop_2, key='"m-7f3:charge"', body=b'{"order_id": 7, "amount": 5}')
    assert (first.status, same.status) == (201, 201) and "idempotent-replayed" not in same.headers
    assert same.body["id"] != first.body["id"]  # a charge of its own
    assert other_body.status == 201
    # shop-2 has now used m-7f3:charge itself, so a 422 tells it only about its own key.
    assert probe.status == 422 and api.executions == 3
    never_used = charge(server, shop_2, key='"m-0aa:charge"')
    assert never_used.status == 201  # a key only shop-1 could have used is simply new to shop-2


def test_another_client_cannot_read_a_charge_and_cannot_tell_it_from_no_charge(api, server):
    first = charge(server, api.issue_token("shop-1"))
    read = lambda token, path: raw_request(server.url, http_request("GET", path, token=token))  # noqa: E731
    assert read(api.issue_token("shop-1"), first.headers["location"]).body == first.body
    theirs, none = read(api.issue_token("shop-2"), first.headers["location"]), read(api.issue_token("shop-2"),
                                                                                    "/charges/ch_999")
    charge_id = first.headers["location"].removeprefix("/charges/")
    assert (theirs.status, theirs.body["detail"].replace(charge_id, "ch_999")) == (none.status, none.body["detail"])
    assert theirs.status == 404


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer not-a-token-this-server-issued", "Basic c2hvcDox"])
def test_a_request_without_valid_credentials_gets_401_with_a_challenge_and_nothing_is_stored(api, server,
                                                                                             authorization):
    headers = {"Idempotency-Key": '"m-7f3:charge"', **({"Authorization": authorization} if authorization else {})}
    answer = raw_request(server.url, http_request("POST", "/charges", BODY, headers))
    assert answer.status == 401 and is_problem(answer) and answer.headers["www-authenticate"].startswith("Bearer")
    assert api.stored_keys() == [] and api.executions == 0


def test_the_x_client_id_header_means_nothing_to_the_real_server(api, server):
    token = api.issue_token("shop-1")
    charge(server, token)
    spoofed = charge(server, None, extra=(("X-Client-Id", "shop-1"),))
    assert spoofed.status == 401 and api.executions == 1


def test_two_authorization_lines_are_refused_before_either_client_is_served(api, server):
    """Two tokens would leave open whose key this is: the server answers 400 and serves neither (RFC 9110, 5.3)."""
    first, second = api.issue_token("shop-1"), api.issue_token("shop-2")
    charge(server, first)  # shop-1 owns m-7f3:charge
    answer = raw_request(server.url, http_request("POST", "/charges", BODY, {"Idempotency-Key": '"m-7f3:charge"'},
                                                  extra=(("Authorization", f"Bearer {first}"),
                                                         ("Authorization", f"Bearer {second}"))))
    assert answer.status == 400 and is_problem(answer) and "Authorization" in answer.body["title"]
    assert "idempotent-replayed" not in answer.headers and api.executions == 1
    assert [client for client, _, _ in api.stored_keys()] == ["shop-1"]


# The Idempotency-Key field.

@pytest.mark.parametrize(("lines", "why"), [
    (('"dup-a"', '"dup-b"'), "more than one value"),  # two field lines
    (('"dup-a"', '"dup-a"'), "more than one value"),  # even the same key twice
    (('"a", "b"',), "more than one value"),  # a list on one line
    (("m-7f3:charge",), "sf-token"),  # a bare token is no String
    (('"unbalanced',), "closing double quote"),
    (('"',), "closing double quote"),
    (('"k-par";a=1',), "parameters"),
    (('"a\\b"',), "backslash"),
    (('"caf\u00e9"',), "which a String cannot hold"),
    (('""',), "empty"),
])
def test_a_key_field_that_fails_the_structured_field_parse_is_refused_before_any_work(api, server, lines, why):
    answer = charge(server, api.issue_token("shop-1"), key=None,
                    extra=tuple(("Idempotency-Key", line) for line in lines))
    assert answer.status == 400 and is_problem(answer) and why in answer.body["detail"]
    assert api.stored_keys() == [] and api.executions == 0


def test_an_escaped_quote_in_a_key_is_unescaped_and_a_255_character_key_is_accepted(api, server):
    token = api.issue_token("shop-1")
    assert charge(server, token, key='"a\\"b"').status == 201
    assert charge(server, token, key='"' + "k" * 255 + '"').status == 201
    assert charge(server, token, key='"' + "k" * 256 + '"').status == 400
    assert [key for _, key, _ in api.stored_keys()] == ['a"b', "k" * 255]


def test_a_different_payload_while_the_first_request_is_in_flight_gets_422_not_409(api, server):
    token = api.issue_token("shop-1")
    gate = api.hold_next()
    first = threading.Thread(target=charge, args=(server, token))
    first.start()
    assert api.wait_for_key("m-7f3:charge")
    other = charge(server, token, body=b'{"order_id": 1042, "amount": 4000}')
    same = charge(server, token)
    gate.set()
    first.join()
    assert (other.status, same.status) == (422, 409) and is_problem(other) and is_problem(same)
    assert api.executions == 1


# Host, the request target, Location.

@pytest.mark.parametrize(("hosts", "version", "status"), [
    ((), "HTTP/1.1", 400),
    (("localhost", "localhost"), "HTTP/1.1", 400),
    (("localhost", "evil.example"), "HTTP/1.1", 400),
    (("localhost", "localhost"), "HTTP/1.0", 400),  # more than one is refused whatever the version
    (("local host",), "HTTP/1.1", 400),
    ((), "HTTP/1.0", 201),  # HTTP/1.0 did not require Host
    (("localhost",), "HTTP/1.1", 201),
])
def test_an_http_1_1_request_needs_exactly_one_valid_host_field(api, server, hosts, version, status):
    answer = charge(server, api.issue_token("shop-1"), hosts=hosts, version=version)
    assert answer.status == status and (status == 201 or is_problem(answer))
    assert api.executions == (status == 201)


def test_an_absolute_form_target_is_served_like_its_path(api, server):
    token = api.issue_token("shop-1")
    absolute = raw_request(server.url, http_request("POST", f"{server.url}/charges", BODY,
                                                    {"Idempotency-Key": '"m-7f3:charge"'}, token=token))
    again = charge(server, token)
    assert absolute.status == 201 and again.headers.get("idempotent-replayed") == "true"


def test_a_201_names_the_charge_it_created_in_location_and_its_replay_does_too(api, server):
    token = api.issue_token("shop-1")
    first, replay = charge(server, token), charge(server, token)
    assert first.headers["location"] == replay.headers["location"] == f"/charges/{first.body['id']}"
    assert raw_request(server.url, http_request("GET", first.headers["location"], token=token)).body == first.body


# Problem details.

def test_every_problem_type_of_the_server_is_documented_at_its_own_uri(api, server):
    token = api.issue_token("shop-1")
    charge(server, token)
    answers = [charge(server, token, key=None), charge(server, token, body=b'{"order_id": 1, "amount": 2}'),
               raw_request(server.url, http_request("GET", "/nowhere", token=token))]
    assert [a.body["type"] for a in answers] == ["/problems/idempotency-key-required",
                                                 "/problems/idempotency-key-reused", "about:blank"]
    assert answers[2].body["title"] == "Not Found" and all(is_problem(a) for a in answers)
    for answer in answers[:2]:  # the draft asks these to link to documentation: their type is that link
        page = raw_request(server.url, http_request("GET", answer.body["type"]))  # no credentials needed
        assert page.status == 200 and page.body.startswith(answer.body["title"]) and "24 hours" in page.body
    assert raw_request(server.url, http_request("GET", "/problems/no-such-type")).status == 404


# HTTP's own guard for PUT: ETag and If-Match.

def test_a_put_whose_if_match_is_stale_gets_412_and_cannot_overwrite_a_newer_status(api, server):
    client = Client(server.url, api.issue_token("shop-1"))
    created = client.request("PUT", "/orders/2001/status", {"status": "NEW"})
    paid = client.request("PUT", "/orders/2001/status", {"status": "PAID"}, {"If-Match": created.headers["etag"]})
    refunded = client.request("PUT", "/orders/2001/status", {"status": "REFUNDED"}, {"If-Match": paid.headers["etag"]})
    late = client.request("PUT", "/orders/2001/status", {"status": "PAID"}, {"If-Match": created.headers["etag"]})
    assert [a.status for a in (created, paid, refunded, late)] == [200, 200, 200, 412]
    assert late.headers["etag"] == refunded.headers["etag"] and api.order_status("shop-1", 2001) == "REFUNDED"
    weak = client.request("PUT", "/orders/2001/status", {"status": "X"}, {"If-Match": "W/" + refunded.headers["etag"]})
    assert weak.status == 412  # If-Match compares strongly
    gone = client.request("DELETE", "/orders/2001/status", headers={"If-Match": refunded.headers["etag"]})
    again = client.request("PUT", "/orders/2001/status", {"status": "NEW"}, {"If-Match": created.headers["etag"]})
    assert gone.status == 200 and again.status == 412  # a deleted status does not give its old versions back


def status_request(server, token, method, if_match=None, status="NEW"):
    """PUT, DELETE or GET /orders/3001/status over a raw socket, with ``If-Match`` as sent."""
    body = json.dumps({"status": status}).encode() if method == "PUT" else b""
    return raw_request(server.url, http_request(method, "/orders/3001/status", body,
                                                {"If-Match": if_match} if if_match else {}, token=token))


def test_if_match_star_fails_when_the_status_was_deleted_and_a_second_delete_changes_nothing(api, server):
    """RFC 9110, section 13.1.1: "If the field value is "*", the condition is false if the origin server has no current
    representation for the target resource". A repeated DELETE has the first one's effect (section 9.2.2), gone, and
    its answer says there is nothing to delete: the 404 a GET gets, with no new version."""
    token = api.issue_token("shop-1")
    created = status_request(server, token, "PUT")
    assert status_request(server, token, "PUT", "*", "PAID").status == 200  # a status exists: * matches
    gone = status_request(server, token, "DELETE")
    star = status_request(server, token, "PUT", "*", "NEW")
    old_tag = status_request(server, token, "PUT", created.headers["etag"], "NEW")
    again = status_request(server, token, "DELETE")
    assert (gone.status, star.status, old_tag.status) == (200, 412, 412) and is_problem(star)
    assert again.status == 404 and "etag" not in again.headers and api.order_status("shop-1", 3001) is None
    recreated = status_request(server, token, "PUT", status="NEW")
    assert recreated.status == 200 and recreated.headers["etag"] == '"4"'  # NEW, PAID, deleted: then the fourth version


def test_deleting_a_status_that_never_existed_is_404_and_stores_nothing(api, server):
    answer = status_request(server, api.issue_token("shop-1"), "DELETE", "*")
    assert answer.status == 404 and is_problem(answer)
    assert api.orders.read("shop-1", 3001) == (None, None)


def test_a_payment_records_the_client_scoped_key_so_two_clients_payments_under_one_key_stay_apart(api, server):
    """The key a payment row records is the one the server stores: the client's and its key, not the bare key."""
    for shop in ("shop-1", "shop-2"):
        assert charge(server, api.issue_token(shop)).status == 201
    assert sorted(api.payments.payments().message_id) == ["shop-1:m-7f3:charge", "shop-2:m-7f3:charge"]


def test_a_creating_put_sends_if_none_match_star_so_its_delayed_retry_cannot_overwrite_a_later_status(api, server):
    """RFC 9110, section 13.1.2: If-None-Match ``*`` is false when a current representation exists; it is there "to
    prevent an unsafe request method (e.g., PUT) from inadvertently modifying an existing representation"."""
    token = api.issue_token("shop-1")
    put = lambda status, *lines: raw_request(server.url, http_request(  # noqa: E731
        "PUT", "/orders/3001/status", json.dumps({"status": status}).encode(), token=token, extra=lines))
    created = put("NEW", ("If-None-Match", "*"))
    paid = put("PAID", ("If-Match", created.headers["etag"]))
    refunded = put("REFUNDED", ("If-Match", paid.headers["etag"]))
    delayed = put("NEW", ("If-None-Match", "*"))  # the creating PUT's retry, arriving last
    assert [a.status for a in (created, paid, refunded, delayed)] == [200, 200, 200, 412] and is_problem(delayed)
    assert delayed.headers["etag"] == refunded.headers["etag"] and api.order_status("shop-1", 3001) == "REFUNDED"
    weak = put("X", ("If-None-Match", f'"9", W/{refunded.headers["etag"]}'))  # a list, compared weakly
    assert weak.status == 412 and api.order_status("shop-1", 3001) == "REFUNDED"
    assert put("X", ("If-None-Match", '"9"')).status == 200  # no tag in the list is current
    assert status_request(server, token, "DELETE").status == 200
    assert put("AGAIN", ("If-None-Match", "*")).status == 200  # a deleted status has no representation


def test_if_match_sent_on_two_field_lines_is_one_list(api, server):
    """RFC 9110, section 5.3: field lines of one name combine, in order, into one comma-separated list."""
    token = api.issue_token("shop-1")
    status_request(server, token, "PUT")
    current = status_request(server, token, "PUT", "*", "PAID").headers["etag"]
    answer = raw_request(server.url, http_request("PUT", "/orders/3001/status", b'{"status": "SHIPPED"}', token=token,
                                                  extra=(("If-Match", '"9"'), ("If-Match", current))))
    assert answer.status == 200 and api.order_status("shop-1", 3001) == "SHIPPED"


def test_an_order_belongs_to_the_client_that_set_it_and_another_client_learns_nothing_of_it(api, server):
    shop_1, shop_2 = api.issue_token("shop-1"), api.issue_token("shop-2")
    mine = status_request(server, shop_1, "PUT", status="PAID")
    theirs = status_request(server, shop_2, "GET")
    never = raw_request(server.url, http_request("GET", "/orders/3002/status", token=shop_2))
    assert (theirs.status, theirs.body["detail"].replace("3001", "3002")) == (never.status, never.body["detail"])
    assert theirs.status == 404 and "etag" not in theirs.headers
    assert status_request(server, shop_2, "PUT", mine.headers["etag"], "REFUNDED").status == 412
    assert status_request(server, shop_2, "DELETE").status == 404
    assert status_request(server, shop_2, "PUT", status="OTHER").status == 200  # shop-2's own order 3001
    assert api.order_status("shop-1", 3001) == "PAID" and api.order_status("shop-2", 3001) == "OTHER"
    assert status_request(server, shop_1, "GET").headers["etag"] == mine.headers["etag"]


def test_the_fingerprint_covers_the_whole_body_so_a_member_added_under_the_key_is_a_mismatch(api, server):
    """The server charges order_id and amount only; a retry that adds a currency asked for something else."""
    token = api.issue_token("shop-1")
    first = charge(server, token, body=b'{"order_id": 1, "amount": 5}')
    respaced = charge(server, token, body=b'{ "amount":5,"order_id":1 }')  # the same object, members reordered
    more = charge(server, token, body=b'{"order_id": 1, "amount": 5, "currency": "eur"}')
    assert (first.status, respaced.status, respaced.headers.get("idempotent-replayed")) == (201, 201, "true")
    assert more.status == 422 and api.executions == 1


@pytest.mark.parametrize("lines", [(("Content-Length", "{n}, {n}"),), (("Content-Length", "{n}"), ("Content-Length", "{n}"))])
def test_a_content_length_repeating_one_number_frames_the_body_on_one_line_or_two(api, server, lines):
    """RFC 9112, section 6.3: a list of identical lengths may be taken as that length; this server takes it however
    it is sent, since two field lines are one list (RFC 9110, section 5.3)."""
    head = http_request("POST", "/charges", BODY, {"Idempotency-Key": '"k"'}, token=api.issue_token("shop-1"),
                        extra=tuple((name, value.format(n=len(BODY))) for name, value in lines))
    head = head.replace(f"Content-Length: {len(BODY)}\r\n".encode(), b"", 1)
    assert raw_request(server.url, head).status == 201 and api.executions == 1
    different = head.replace(f"Content-Length: {len(BODY)}".encode(), f"Content-Length: {len(BODY)}, 3".encode(), 1)
    assert raw_request(server.url, different.replace(b'"k"', b'"k2"')).status == 400 and api.executions == 1


def test_charge_ids_tell_no_client_how_many_charges_the_server_made_and_survive_a_restart(api, server):
    ids = [charge(server, api.issue_token(shop), key=f'"k-{n}"').body["id"] for n, shop in enumerate(["a", "a", "b"])]
    assert all(re.fullmatch(r"ch_[0-9a-f]{16}", charge_id) for charge_id in ids)
    restarted = ChargesApi(payments=api.payments)  # the same database, a new process
    with serve(restarted) as again:
        later = charge(again, restarted.issue_token("b"), key='"k-3"').body["id"]
    assert len({*ids, later}) == 4


def test_a_get_with_a_current_tag_in_if_none_match_is_304_without_content_and_a_false_if_match_412(api, server):
    """RFC 9110, section 13.2.1: an origin server MUST evaluate the preconditions it receives, on a GET too; a false
    If-None-Match on a GET is 304 (section 13.1.2), which carries no content (15.4.5)."""
    token = api.issue_token("shop-1")
    tag = status_request(server, token, "PUT").headers["etag"]
    get = lambda *lines: raw_request(server.url, http_request("GET", "/orders/3001/status", token=token,  # noqa: E731
                                                              extra=lines))
    same = get(("If-None-Match", f'"9", W/{tag}'))
    assert (same.status, same.headers["etag"], same.body) == (304, tag, None) and same.raw.endswith(b"\r\n\r\n")
    assert get(("If-None-Match", '"9"')).status == 200
    stale = get(("If-Match", '"9"'))
    assert stale.status == 412 and is_problem(stale) and stale.headers["etag"] == tag
