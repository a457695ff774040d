"""The request head as RFC 9112 frames it, over raw sockets: every header line is checked, none is dropped or merged.

Python's ``http.client.parse_headers`` hands the header lines to the e-mail parser,
which ends the headers at the first line it cannot read (``X-Trace : abc``) and
drops every field after it without an error, merges folded lines into the field
before them, and splits a field at a bare CR. Each of those reaches the
application as a different request from the one sent; the server refuses them all
with 400 and problem details, and stores and charges nothing.
"""

import json
import select
import socket
import time

import pytest
from http_raw import http_request, is_problem, raw_request

from idemlib.http import ChargesApi, serve

CHARGE = json.dumps({"order_id": 77, "amount": 40}).encode()


@pytest.fixture
def api():
    return ChargesApi()


@pytest.fixture
def server(api):
    with serve(api, client_timeout=1.0) as running:
        yield running


def head(token, *lines, body=CHARGE):
    """A POST /charges whose header lines after Host are ``lines``, exactly as written."""
    fields = ["POST /charges HTTP/1.1", "Host: localhost", f"Authorization: Bearer {token}", *lines]
    return ("\r\n".join(fields) + "\r\n\r\n").encode("latin-1") + body


def refused(answer, cause):
    return (answer.status == 400 and is_problem(answer) and answer.body["title"] == "Malformed header field"
            and cause in answer.body["detail"])


@pytest.mark.parametrize("lines", [
    ("X-Trace : abc", 'Idempotency-Key: "pay-77"', f"Content-Length: {len(CHARGE)}"),
    (f"Content-Length : {len(CHARGE)}", 'Idempotency-Key: "pay-77"'),
    ('Idempotency-Key : "pay-77"', f"Content-Length: {len(CHARGE)}"),
    ("X-Trace\t: abc", 'Idempotency-Key: "pay-77"', f"Content-Length: {len(CHARGE)}"),
])
def test_whitespace_between_a_field_name_and_its_colon_gets_400_not_headers_dropped(api, server, lines):
    """RFC 9112 section 5.1: "A server MUST reject, with a response status code of 400 (Bad Request), any received
    request message that contains whitespace between a header field name and colon"."""
    answer = raw_request(server.url, head(api.issue_token("shop-1"), *lines))
    assert refused(answer, "between the field name and the colon")
    assert api.executions == 0 and api.stored_keys() == []


def test_a_spaced_transfer_encoding_after_a_content_length_is_refused_not_framed_by_the_length(api, server):
    chunked = b"20\r\n" + CHARGE + b"\r\n0\r\n\r\n"
    answer = raw_request(server.url, head(api.issue_token("shop-1"), 'Idempotency-Key: "k"',
                                          f"Content-Length: {len(CHARGE)}", "Transfer-Encoding : chunked",
                                          body=chunked))
    assert refused(answer, "between the field name and the colon") and api.executions == 0


def test_the_same_request_with_a_spaced_line_twice_never_charges_twice_under_stripe_v1():
    from idemlib.provider import behaviours
    api = ChargesApi(behaviours()["stripe-v1"])  # the key is optional: a dropped key would mean an unkeyed charge
    with serve(api) as running:
        request = head(api.issue_token("shop-1"), f"Content-Length: {len(CHARGE)}", "X-Trace : abc",
                       'Idempotency-Key: "pay-77"')
        answers = [raw_request(running.url, request) for _ in range(2)]
    assert [a.status for a in answers] == [400, 400] and api.executions == 0


@pytest.mark.parametrize(("lines", "field"), [
    (("Authorization: Bearer", " {token}", 'Idempotency-Key: "k"', f"Content-Length: {len(CHARGE)}"), "Authorization"),
    (("Idempotency-Key:", '\t"k4"', f"Content-Length: {len(CHARGE)}"), "Idempotency-Key"),
    (('Idempotency-Key: "k"', f"Content-Length: {len(CHARGE)}", "X-Trace: a", " b"), "X-Trace"),
])
def test_obsolete_line_folding_is_refused_naming_the_fold_and_its_field(api, server, lines, field):
    """RFC 9112 section 5.2 lets a server reject obs-fold with 400, "preferably with a representation explaining that
    obsolete line folding is unacceptable": the detail names the fold, not a malformed key or missing credentials."""
    token = api.issue_token("shop-1")
    request = ("\r\n".join(["POST /charges HTTP/1.1", "Host: localhost",
                            *(line.format(token=token) for line in lines)]) + "\r\n\r\n").encode() + CHARGE
    if field != "Authorization":
        request = request.replace(b"Host: localhost", f"Host: localhost\r\nAuthorization: Bearer {token}".encode())
    answer = raw_request(server.url, request)
    assert refused(answer, "obsolete line folding") and field in answer.body["detail"] and api.executions == 0


@pytest.mark.parametrize(("line", "cause"), [
    ("X-Trace abc", "no colon"),
    (": abc", "no field name"),
    ("X(Trace): abc", "not a token"),
    ("X-Trace: a\rIdempotency-Key: \"other\"", "bare CR"),
    ("X-Trace: a\x00b", "control character"),
])
def test_a_line_the_email_parser_would_drop_or_split_is_refused(api, server, line, cause):
    answer = raw_request(server.url, head(api.issue_token("shop-1"), line, 'Idempotency-Key: "k"',
                                          f"Content-Length: {len(CHARGE)}"))
    assert refused(answer, cause) and api.executions == 0


def test_a_valid_head_with_bare_lf_line_ends_and_ows_around_values_is_served(api, server):
    """RFC 9112 section 2.2 lets a recipient take a lone LF as a line end; RFC 9110 section 5.5 excludes leading and
    trailing whitespace (SP and HTAB) from a field value."""
    request = (f"POST /charges HTTP/1.1\nHost: localhost\nAuthorization:\tBearer {api.issue_token('shop-1')} \n"
               f'Idempotency-Key: "lf"\t\nContent-Length:  {len(CHARGE)}\t\n\n').encode() + CHARGE
    answer = raw_request(server.url, request)
    assert answer.status == 201 and [key for _, key, _ in api.stored_keys()] == ["lf"]


def test_an_empty_line_before_the_request_line_is_ignored(api, server):
    """RFC 9112 section 2.2: a server "SHOULD ignore at least one empty line (CRLF) received prior to the request-line"."""
    answer = raw_request(server.url, b"\r\n" + head(api.issue_token("shop-1"), 'Idempotency-Key: "k"',
                                                   f"Content-Length: {len(CHARGE)}"))
    assert answer.status == 201


@pytest.mark.parametrize("unit", ["bytes", "lines"])
def test_a_client_dripping_its_head_is_cut_off_within_the_timeout_for_the_whole_head(api, server, unit):
    """The timeout (1 s here) bounds the whole head, not each read: a byte (or a line) every 0.2 s never finishes."""
    request = head(api.issue_token("shop-1"), *(f"X-Pad-{n}: {'x' * 20}" for n in range(40)))
    pieces = list(request) if unit == "bytes" else request.split(b"\n")
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as sock:
        for piece in pieces:
            if select.select([sock], [], [], 0.2)[0]:
                break  # the server has answered
            sock.sendall(bytes([piece]) if unit == "bytes" else piece + b"\n")
        answered = time.monotonic() - started
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 408") and b"problem+json" in answer
    assert 1.0 <= answered < 3  # the 1 s deadline; 0.2 s a read would never time out, and the head takes 8 s or more


def test_a_request_line_too_long_gets_414_uri_too_long(server):
    """RFC 9110 section 15.5.15 names 414 "URI Too Long"; an about:blank title is that phrase (RFC 9457, 4.2.1)."""
    answer = raw_request(server.url, http_request("GET", "/" + "a" * 70_000))
    assert (answer.status, answer.body["title"]) == (414, "URI Too Long") and is_problem(answer)
    assert answer.raw.startswith(b"HTTP/1.0 414 URI Too Long\r\n")


@pytest.mark.parametrize("lines", [("X-Big: " + "x" * 70_000,), tuple(f"X-Pad-{n}: x" for n in range(120)),
                                   tuple(f"X-Pad-{n}: " + "x" * 3000 for n in range(30))])  # 90 KB of fields in all
def test_a_head_over_the_limits_gets_431_request_header_fields_too_large(api, server, lines):
    answer = raw_request(server.url, head(api.issue_token("shop-1"), *lines))
    assert (answer.status, answer.body["title"]) == (431, "Request Header Fields Too Large") and is_problem(answer)


@pytest.mark.parametrize("ows", ["\t", " ", " \t "])
def test_a_valid_key_followed_by_whitespace_is_that_key(api, server, ows):
    """RFC 9110, section 5.5: a field value excludes leading and trailing whitespace (SP and HTAB), so the HTTP layer
    hands the Structured Field parse ``"k3"``; RFC 9651's parse (section 4.2) then drops leading and trailing SP
    only, which a value without that whitespace does not need. A tab after the String is OWS, not a second value."""
    answer = raw_request(server.url, head(api.issue_token("shop-1"), f'Idempotency-Key: "k3"{ows}',
                                          f"Content-Length: {len(CHARGE)}"))
    assert answer.status == 201 and [key for _, key, _ in api.stored_keys()] == ["k3"]


def test_the_key_parse_drops_each_line_s_ows_before_it_combines_the_lines():
    from idemlib.http.fields import FieldError, parse_key
    assert parse_key(['"k3"\t']) == parse_key(['\t"k3" ']) == "k3"
    with pytest.raises(FieldError, match="more than one value"):
        parse_key(['"k3"\t', '"k4"'])
    with pytest.raises(FieldError, match="cannot hold"):
        parse_key(['"k\t3"'])  # inside a String, a tab is no whitespace to drop
