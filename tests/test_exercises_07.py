"""Lesson 07's exercises: what content-based deduplication lets through, and a deduplication ID that names the event."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import time
import uuid
import zlib

import numpy as np
import pandas as pd
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.brokers.sources import SOURCES

# Made when the producer process starts: a restarted producer has another of each.
_NAMESPACE_AT_START = uuid.uuid4()
_STARTED_AT = time.time()


class _Identity:
    """A callable object as the answer: the producer and its number, with a separator."""

    def __call__(self, event: dict) -> str:
        return f"{event['producer']}|{event['seq']}"


# Bound to names, as a notebook cell binds them, so the restarted producer can run their statements again.
identity = _Identity()
with_slash = functools.partial(lambda sep, e: f"{e['producer']}{sep}{e['seq']}", "/")


def digest_base64(e: dict) -> str:
    """The whole SHA-256 digest of the identity, in URL-safe base64."""
    return base64.urlsafe_b64encode(hashlib.sha256(f"{e['producer']}:{e['seq']}".encode()).digest()).decode()


REACH = ["application resend after the window", "consumer crash after commit, before ack",
         "lease expires while the handler works", "dead-letter replay"]
EVERY = {source: source in REACH for source in SOURCES}

BANKS = {
    "check_content_based": Bank(
        right=[(set(REACH),), (list(reversed(REACH)),), (tuple(f" {s}" for s in REACH),),
               ({s.capitalize() for s in REACH},), ((s.replace(" ", "  ") for s in REACH),),
               (EVERY,), ({s: np.bool_(v) for s, v in EVERY.items()},), ({s: int(v) for s, v in EVERY.items()},),
               # punctuation is not the question: no hyphen, no comma, a full stop, a typographic apostrophe
               (["application resend after the window.", "consumer crash after commit before ack",
                 "Lease expires while the handler works", "dead letter replay"],),
               ({s.replace("'", "\u2019"): v for s, v in EVERY.items()},),
               # the mapping answer built with pandas, as the lesson's own tables are
               (pd.Series(EVERY),)],
        wrong=[
            Wrong(([*REACH, "relay republish with a new ID"],), "no deduplication ID sent"),
            Wrong((REACH[1:],), "but when?"),
            Wrong(([*REACH, "application resend inside the window"],), "stopped by the broker"),
            Wrong(([*REACH, "client library's own retry"],), "stopped by the broker"),
            Wrong(([*REACH, "ack lost on the way"],), "delete"),
            Wrong((["the lease"],), "source names"),
            Wrong((set(),), "left out"),
            # the resend inside the window swapped for the one after it: both mistakes are named
            Wrong((["application resend inside the window", *REACH[1:]],), "stopped by the broker"),
            Wrong((["application resend inside the window", *REACH[1:]],), "but when?"),
            Wrong(("dead-letter replay",), "source names"),
            # every source a content-based window cannot catch, read as "every source after the first send"
            Wrong(({**EVERY, "ack lost on the way": True},), "delete"),
            Wrong(({s: v for s, v in EVERY.items() if v},), "leaves 4 out"),
            Wrong(({**EVERY, "dead-letter replay": "maybe"},), "mapping"),
            Wrong((pd.Series({**EVERY, "relay republish with a new ID": True}),), "no deduplication ID sent"),
            Wrong((["application resend after the window", "consumer crash after commit", "lease expires",
                    "dead letter replay"],), "source names"),  # cut-down names are not the table's rows
            # the replay sends the same bytes, so it is taken for a repeat; but it comes after the window
            Wrong((REACH[:-1],), "but when?"),
            # every copy with the same bytes read as caught, whenever it comes
            Wrong((REACH[1:-1],), "but when?"),
            # "the key is the body", read as "everything with the same body", consumer side included
            Wrong((["application resend after the window"],), "left out"),
            Wrong(([*REACH[1:], "application resend inside the window"],), "but when?"),  # inside and after swapped
        ],
    ),
    "check_dedup_id": Bank(
        right=[(lambda e: f"{e['producer']}:{e['seq']}",),
               (lambda e: hashlib.sha256(f"{e['producer']}\0{e['seq']}".encode()).hexdigest(),),
               (lambda e: json.dumps([e["producer"], e["seq"]]).replace(" ", ""),),
               (with_slash,),
               (identity,),
               (lambda e: "{producer}#{seq}".format(**e),),
               # a 128-bit digest of the identity: no collision at 10^5 events
               (lambda e: hashlib.md5(repr((e["producer"], e["seq"])).encode()).hexdigest(),),
               # a name-based UUID, a fixed-width number after the name, a 48-bit digest: all name the event
               (lambda e: str(uuid.uuid5(uuid.NAMESPACE_URL, f"{e['producer']}/{e['seq']}")),),
               (lambda e: f"{e['producer']}{e['seq']:010d}",),
               (lambda e: hashlib.sha256(f"{e['producer']}:{e['seq']}".encode()).hexdigest()[:12],),
               # a fixed prefix before a long digest, the whole digest in base64, a prefix and suffix around the identity
               (lambda e: "dedup-" + hashlib.sha256(f"{e['producer']}:{e['seq']}".encode()).hexdigest()[:16],),
               (digest_base64,),
               (lambda e: f"evt-{e['producer']}-{e['seq']}-v1",)],
        wrong=[
            Wrong((lambda e: hashlib.sha256(json.dumps(e).encode()).hexdigest(),), "body as sent"),
            Wrong((lambda e: hashlib.sha256(json.dumps(e, sort_keys=True).encode()).hexdigest(),), "sent_at"),
            Wrong((lambda e: f"{e['producer']}{e['seq']}",), "run together"),  # no separator: billing-1 11 = billing-11 1
            Wrong((lambda e: str(e["seq"]),), "each producer counts its own"),
            Wrong((lambda e: f"{e['producer'].lower()}:{e['seq']}",), "case included"),
            Wrong((lambda e: f"{e['order_id']}:{e['amount']}",), "paid the same order"),
            Wrong((lambda e: hashlib.sha256(f"{e['producer']}:{e['seq']}".encode()).hexdigest()[:8],), "birthday"),
            Wrong((lambda e: (e["producer"], e["seq"]),), "string"),
            Wrong((lambda e: f"{e['producer']} {e['seq']}",), "no spaces"),
            Wrong((lambda e: json.dumps(e),), "no spaces"),
            Wrong((lambda e: e["event_id"],), "KeyError"),
            Wrong(("billing-EU:41",), "function"),
            # a CRC-32 of the identity: 2^32 values, no collision in this data (CRC is injective on near-alike
            # text) but the birthday bound at 10^5 events; judged by how many IDs it can make
            Wrong((lambda e: str(zlib.crc32(f"{e['producer']}:{e['seq']}".encode())),), "birthday"),
            Wrong((lambda e: format(zlib.crc32(f"{e['producer']}:{e['seq']}".encode()), "08x"),), "birthday"),
            # the same CRC-32 behind a fixed prefix or suffix, or in base64: the shared text adds no values,
            # so the check counts only what varies (these passed before it did, on every seed tried)
            Wrong((lambda e: "id-%08x" % zlib.crc32(f"{e['producer']}:{e['seq']}".encode()),), "birthday"),
            Wrong((lambda e: "%08x-v1" % zlib.crc32(f"{e['producer']}:{e['seq']}".encode()),), "birthday"),
            Wrong((lambda e: base64.b64encode(zlib.crc32(f"{e['producer']}:{e['seq']}".encode()).to_bytes(4, "big"))
                   .decode(),), "birthday"),
            Wrong((lambda e: "%08x-0000-4000-8000-000000000000" % zlib.crc32(f"{e['producer']}:{e['seq']}".encode()),),
                  "birthday"),
            Wrong((lambda e: "pay-%d" % (int(hashlib.md5(f"{e['producer']}:{e['seq']}".encode()).hexdigest(), 16)
                                         % 10**12),), "birthday"),
            Wrong((lambda e: "a%d" % zlib.adler32(f"{e['producer']}:{e['seq']}".encode()),), "same ID"),
            # Python's hash() of the identity: the same in this process, another after a producer restarts
            Wrong((lambda e: str(hash((e["producer"], e["seq"]))),), "PYTHONHASHSEED"),
            Wrong((lambda e: format(hash(f"{e['producer']}:{e['seq']}") % 2**64, "x"),), "PYTHONHASHSEED"),
            # hash() in other spellings, and what else the running process holds: a restart changes each
            Wrong((lambda e: format(hash(json.dumps([e["producer"], e["seq"]])) % 2**64, "x"),), "restarted producer"),
            Wrong((lambda e: f"{hash(e['producer'])}-{e['seq']}",), "restarted producer"),
            Wrong((lambda e: str(abs(hash(str((e["producer"], e["seq"]))))),), "restarted producer"),
            Wrong((lambda e: str(uuid.uuid5(_NAMESPACE_AT_START, f"{e['producer']}:{e['seq']}")),), "restarted producer"),
            Wrong((lambda e: f"{e['producer']}:{e['seq']}:{os.getpid()}",), "restarted producer"),
            Wrong((lambda e: f"{e['producer']}:{e['seq']}:{_STARTED_AT}",), "restarted producer"),
            # the day it was sent: a retry a few minutes after 23:58 carries the next day's date
            Wrong((lambda e: f"{e['producer']}:{e['seq']}:{e['sent_at'][:10]}",), "retry got another ID"),
            # the attempt number marks the retry, not the event
            Wrong((lambda e: f"{e['producer']}:{e['seq']}:{e['attempt']}",), "retry got another ID"),
            # the order and the producer: two payments of one order by one producer share it
            Wrong((lambda e: f"{e['producer']}:{e['order_id']}",), "same ID"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_a_right_dedup_id_passes_on_other_events_too():
    from idemlib.course.exercises import check_dedup_id

    for seed in (1, 2):
        assert check_dedup_id(lambda e: f"{e['producer']}:{e['seq']}", seed=seed)
        assert check_dedup_id(lambda e: f"evt-{e['producer']}-{e['seq']}-v1", seed=seed)


def test_a_short_digest_behind_a_fixed_prefix_is_refused_on_other_events_too():
    from idemlib.course.exercises import check_dedup_id

    for seed in (1, 3):
        feedback = check_dedup_id(lambda e: "id-%08x" % zlib.crc32(f"{e['producer']}:{e['seq']}".encode()), seed=seed)
        assert not feedback and "birthday" in str(feedback)


def test_the_sample_events_are_the_kind_the_check_sends():
    from idemlib.course.exercises.lesson_07 import sample_events

    events = sample_events()
    assert {"producer", "seq", "sent_at", "attempt"} <= set(events[0])
