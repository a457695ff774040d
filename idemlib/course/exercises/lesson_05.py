"""Checks for lesson 05, Choosing the ID."""

from __future__ import annotations

import collections
import datetime
import functools
import itertools
import math
import random
import reprlib
import string
from collections.abc import Iterator
from typing import Any

from idemlib.course.exercises.digest_width import (
    COLLISION_ODDS,
    key_space_bits,
    min_digest_bits,
    odds_of_a_collision,
    too_short,
)
from idemlib.course.exercises.feedback import Feedback, blank, call_each, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.messages import LONGEST_ID, id_fault

__all__ = ["check_message_id", "event_copies"]

# Three services publish payment events as CloudEvents onto one SQS queue, and so do the shops of several chains.
# Two services number their events with a counter of their own (both send an evt-000007); the third, older one
# writes case-sensitive base62 IDs. Each shop's tills report as the shop, naming a receipt by till and number
# ("2:17" from urn:shop:1; "2/17" from /stores/1 in the chain that names sources by path); each shop's
# self-service kiosks are sources of their own (urn:shop:1:2, /stores/1/2) that number their events from 1 with
# no padding. So a separator that sources and IDs contain reads two ways (urn:shop:1 with 2:17 and urn:shop:1:2
# with 17 join with ':' into the same text), and so does nothing at all (kiosk 1's event 23 and kiosk 12's event 3).
# Smaller chains name a kiosk with each other mark a URI-reference (RFC 3986) may hold, /outlets/1-2, /outlets/1.2,
# /outlets/1#2, ...: whichever of them a join puts between source and id, two events read the same. A URI-reference
# never holds a space or a '|' (nor a control character), so those, and only those, are separators that read one way.
# A partner's payment gateway names each terminal by a URL and each event by a path that starts with a date and ends
# in a counter: source and id together run past the 255 characters the consumer takes as a key, its sources differ
# only in their first characters (the region in the host) and last (the terminal), its IDs in their first (the
# date) and last (the counter), so a key cut to 255 characters at either end, in either order, reads two ways.
COUNTERS = {"/checkout": 139_280, "/subscriptions": 139_280}
LEGACY, LEGACY_EVENTS = "/legacy-billing", 12_000
GATEWAY_SOURCES = tuple(f"https://{region}.payments-gateway.partner-network.example/api/v2/merchants/nordic-outdoor-"
                        f"supplies/stores/oslo-city-centre/terminals/{terminal:04d}/payment-events"
                        for region in ("eu-west-1", "us-east-1") for terminal in (1, 2))
GATEWAY_ID = ("{}/payment-requests/card-present/contactless/settlement-batch-0001/authorisation-requests/"
              "confirmed-by-issuer/request-{:06d}")
GATEWAY_DAYS, GATEWAY_EVENTS = ("2026-12-01", "2026-12-02"), 250  # each terminal's events a day
SHOPS = {":": tuple(f"urn:shop:{n}" for n in range(1, 4)), "/": tuple(f"/stores/{n}" for n in range(1, 4))}
TILLS, RECEIPTS = 2, 200  # each shop's tills, and the receipts each till sends
KIOSKS, KIOSK_EVENTS = 12, 50  # each shop's kiosks, and the events each kiosk sends
# The marks a URI-reference may hold but ':' and '/' (the chains above) and '%' (only as %XX): a small chain's outlet
# for each, /outlets/1 for '-', its kiosks /outlets/1-1 and /outlets/1-2, its receipts 2-17.
OUTLETS = {mark: (f"/outlets/{n}",) for n, mark in enumerate("-._~!$&'()*+,;=@#?", start=1)}
SIZES = {"shop": (TILLS, RECEIPTS, KIOSKS, KIOSK_EVENTS), "outlet": (2, 20, 2, 20)}  # tills, receipts, kiosks, events
SHOP_EVENTS = sum(len(shops) * (tills * receipts + kiosks * events)
                  for chains, (tills, receipts, kiosks, events) in ((SHOPS, SIZES["shop"]), (OUTLETS, SIZES["outlet"]))
                  for shops in chains.values())
SHOP_COUNT = sum(len(shops) for chains in (SHOPS, OUTLETS) for shops in chains.values())
EVENTS = (sum(COUNTERS.values()) + LEGACY_EVENTS + SHOP_EVENTS
          + len(GATEWAY_SOURCES) * len(GATEWAY_DAYS) * GATEWAY_EVENTS)
# A digest gives two events one key by chance. Among the EVENTS, the chance that any two share a b-bit digest is
# about 1 - exp(-pairs / 2**b); the check asks for the width that keeps it below one in a million: 56 bits.
MIN_DIGEST_BITS = min_digest_bits(EVENTS)
_BASE62 = string.digits + string.ascii_letters
# Extra copies, by why they exist: a share of the events gets one of each kind.
COPIES = {"producer retry": 0.06, "relay republish": 0.04, "replay": 0.03, "redelivery": 0.08}
EVENTS_PER_SECOND = 40  # a busy hour: many events share a second of "time"


def _legacy_ids(draw: random.Random) -> list[str]:
    """The old producer's IDs: random base62 ones, and pairs that differ only in letter case or a trailing space."""
    ids: list[str] = []
    for n in range(LEGACY_EVENTS // 2):
        one = "".join(draw.choices(_BASE62, k=10))
        ids += [one, one.swapcase() if n % 2 else one + " "]
    return ids


def _shop_ids() -> list[tuple[str, str]]:
    """The shops' events: each till's receipts under the shop's source, each kiosk's events under its own."""
    ids: list[tuple[str, str]] = []
    for chains, (tills, receipts, kiosks, events) in ((SHOPS, SIZES["shop"]), (OUTLETS, SIZES["outlet"])):
        for separator, shops in chains.items():
            for shop in shops:
                ids += [(shop, f"{till}{separator}{n}") for till in range(1, tills + 1) for n in range(1, receipts + 1)]
                ids += [(f"{shop}{separator}{kiosk}", str(n)) for kiosk in range(1, kiosks + 1)
                        for n in range(1, events + 1)]
    return ids


_LOW_128_BITS = (1 << 128) - 1


def _sqs_id(number: int) -> str:
    """The ``number``-th message ID the queue hands out, in the form SQS writes one (a UUID's); no two alike."""
    digits = "%032x" % (number * 0x9E3779B97F4A7C15F39CC0605CEDC835 & _LOW_128_BITS)
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-a{digits[17:20]}-{digits[20:]}"


# Why an extra copy exists, and how much later than the original it is sent (seconds).
_LATER = {"producer retry": (1.0, 30.0), "relay republish": (60.0, 3600.0), "replay": (3600.0, 4 * 86400.0)}
_COPY_PLAN = tuple((why, (share, *_LATER.get(why, (0.0, 0.0)))) for why, share in COPIES.items())


def _stamp(seconds: float) -> str:
    """A CloudEvent's ``time`` for ``seconds`` into the day the check's traffic starts."""
    return (_DAY + datetime.timedelta(seconds=int(seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")


_DAY = datetime.datetime(2026, 12, 1)


def _plan(seed: int) -> tuple[tuple[Any, ...], ...]:
    """Every event once, as (source, id, time, order, amount, sent at, its extra copies).

    Two percent of the events ask for the same order and amount as an earlier one: a second, real payment.
    An extra copy is (why, sent at).
    """
    draw = random.Random(seed)
    ids = [(source, f"evt-{n:06d}") for source, count in COUNTERS.items() for n in range(1, count + 1)]
    ids += [(LEGACY, event_id) for event_id in _legacy_ids(draw)]
    ids += _shop_ids()
    ids += [(source, GATEWAY_ID.format(day, n)) for source in GATEWAY_SOURCES for day in GATEWAY_DAYS
            for n in range(1, GATEWAY_EVENTS + 1)]
    draw.shuffle(ids)
    chance = draw.random  # one uniform draw in [0, 1): the plan's draws are all made from it, for speed
    plan: list[tuple[Any, ...]] = []
    for number, (source, event_id) in enumerate(ids):
        if number % EVENTS_PER_SECOND == 0:
            time = _stamp(number / EVENTS_PER_SECOND)
        order, amount = (plan[-1 - int(chance() * 50)][3:5] if number > 50 and chance() < 0.02
                         else (5000 + number, 5 * (1 + int(chance() * 40))))
        sent = number / EVENTS_PER_SECOND
        extra = tuple((why, round(sent + low + (high - low) * chance(), 3) if (low, high) != (0.0, 0.0) else sent)
                      for why, (share, low, high) in _COPY_PLAN if chance() < share)
        plan.append((source, event_id, time, order, amount, sent, extra))
    return tuple(plan)


@functools.lru_cache(maxsize=1)  # built once per seed and never handed out: callers get copies (_fresh)
def _records(seed: int) -> tuple[tuple[dict[str, Any], ...], ...]:
    """For each event of :func:`_plan`, the records of its copies as the consumer receives them from SQS."""
    sent_messages = itertools.count(seed * 1_000_000_007)
    events: list[tuple[dict[str, Any], ...]] = []
    for source, event_id, time, order, amount, sent, extra in _plan(seed):
        event = {"specversion": "1.0", "source": source, "id": event_id, "type": "com.example.payment.requested",
                 "time": time, "data": {"order_id": order, "amount": amount}}
        first = {**event, "message_id": _sqs_id(next(sent_messages)), "attempt": 1, "sent_at": sent, "receive_count": 1}
        events.append((first, *({**first, "receive_count": 2} if why == "redelivery" else
                                {**event, "message_id": _sqs_id(next(sent_messages)),
                                 # a relay that rebuilds the event from its outbox row stamps its time anew
                                 "time": _stamp(later) if why == "relay republish" else time,
                                 "attempt": 2 if why == "producer retry" else 1, "sent_at": later, "receive_count": 1}
                                for why, later in extra)))
    return tuple(events)


def _fresh(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``record`` that its receiver may change (its ``data`` too) without changing the check's."""
    return {**record, "data": dict(record["data"])}


def event_copies(*, seed: int = 5) -> Iterator[list[dict[str, Any]]]:
    """For each event (drawn by ``seed``), the records of its copies as the consumer receives them from SQS.

    A record is the CloudEvent (``specversion``, ``source``, ``id``, ``type``, ``time``, ``data``) and what
    the queue and the publisher add: SQS's ``message_id`` (new for every message sent: a producer retry, a
    relay's republish, a redrive from the dead-letter queue; kept on a redelivery), the publisher's
    ``attempt``, ``sent_at`` (seconds) and SQS's ``receive_count``. A relay's republish, rebuilt from its outbox
    row, carries a ``time`` stamped anew. The records are new ones on every call.
    """
    for copies in _records(seed):
        yield [_fresh(copy) for copy in copies]


Event = tuple[str, str, str, tuple[int, int]]  # what names and describes one event: source, id, time, order and amount


def _event(record: dict[str, Any]) -> Event:
    return record["source"], record["id"], record["time"], (record["data"]["order_id"], record["data"]["amount"])


def _separator_between(one: tuple[str, str], other: tuple[str, str]) -> str | None:
    """The character that, put between source and id, makes two different events' texts the same, if one does.

    Two (source, id) pairs joined by one character read the same only if one source begins the other and
    goes on with that character: urn:shop:1 and 2:17, urn:shop:1:2 and 17.
    """
    shorter, longer = sorted((one, other), key=lambda pair: len(pair[0]))
    if len(longer[0]) > len(shorter[0]) and longer[0].startswith(shorter[0]):
        separator = longer[0][len(shorter[0])]
        if shorter[0] + separator + shorter[1] == longer[0] + separator + longer[1]:
            return separator
    return None


_shown = reprlib.Repr()
_shown.maxstring, _shown.maxother, _shown.maxdict = 70, 70, 12  # a hint names a record without a screenful of it


def _odds_of_a_collision(bits: float, digested: int = EVENTS) -> float:
    """The chance that two of ``digested`` events (all of them unless said) get one key from a ``bits``-bit digest."""
    return odds_of_a_collision(bits, digested)


_bits_needed = min_digest_bits  # the narrowest digest for a number of digested events


def _kept_whole(key: str, event: Event) -> bool:
    """Whether ``key`` holds some of ``event``'s own text (its source, or its id's first characters): no digest."""
    return any(len(piece) >= 3 and piece in key for piece in (event[0], event[1][:4]))


def _cut(key: str, event: Event) -> bool:
    """Whether ``key`` holds a long run of both ``event``'s source and its id, but not all of both: a cut."""
    source, event_id = event[:2]
    return not (source in key and event_id in key) and all(
        any(len(text) >= 16 and piece in key for piece in (text[:16], text[-16:])) for text in (source, event_id))


def _digest_width(keys: list[str], named: tuple[Event, ...]) -> tuple[float, int]:
    """How many bits the answer's digests hold (:func:`.digest_width.key_space_bits` of the keys that hold neither their event's
    source nor its id, if eight characters or more, whole), and how many events it digests: the odds of a chance
    collision are over those events only. (A digest holds a 4-character piece of an id by chance, now and then.)"""
    digests = [key for key, (source, event_id, *_) in zip(keys, named)
               if source not in key and (len(event_id) < 8 or event_id not in key)]
    return (key_space_bits(digests) if digests else math.inf), len(digests)


def _too_short(bits: float, digested: int) -> str:
    """What a hint says of a digest of ``bits`` bits of ``digested`` events: the odds, and the width the check asks."""
    return too_short(bits, digested, "Its digests", "events it digests")


_URI_RULE = ("A source is a URI-reference, which may hold letters, digits and any of -._~:/?#[]@!$&'()*+,;=%, "
             "but never a space or a '|'.")


def _what_collided(first: Event, second: Event, key: str, width: tuple[float, int]) -> tuple[int, str]:
    """Why two different events got one ID, ``key``: its rank (the most telling first) and a hint's words.

    ``width`` is the answer's digests' bits and how many events it digests (:func:`_digest_width`)."""
    one, other = first[:2], second[:2]
    both = f"Two different events, {_shown.repr(one[1])} from {_shown.repr(one[0])} and {_shown.repr(other[1])} from " \
           f"{_shown.repr(other[0])}, got the same ID"
    if _cut(key, first) or _cut(key, second):
        return 0, (f"{both}, {_shown.repr(key)}: it is cut short, and cuts the characters that tell the two apart (the "
                   "gateway's sources differ in their first and last characters, its IDs too). Keep the source and "
                   "the id whole, or digest all of both.")
    if one[1] == other[1]:
        return 0, (f"{both}, so the inbox dropped the second as a copy of the first. An event's ID is unique only "
                   "among its own producer's events: what names the producer?")
    if one[0] + one[1] == other[0] + other[1]:
        return 1, (f"{both}: glued together with nothing between them, the source and the id of the two read the "
                   "same. Where does one end and the next begin?")
    separator = _separator_between(one, other)
    if separator is not None:
        return 1, (f"{both}: joined with {separator!r} between them, the source and the id of the two read the same, "
                   f"since {separator!r} occurs inside sources and IDs too. Where does one end and the next begin? "
                   f"{_URI_RULE}")
    if first[3] == second[3]:
        return 2, (f"{both}: they ask for the same order and amount, and a real second payment was dropped. What "
                   "tells two such events apart?")
    if one[1].lower() == other[1].lower():
        return 3, (f"IDs {one[1]!r} and {other[1]!r} name two events (an ID is compared exactly, letter case "
                   "included), but they got the same ID from your function. What did it do to the letters?")
    if one[1].strip() == other[1].strip():
        return 4, (f"IDs {one[1]!r} and {other[1]!r} name two events (a space is part of an ID), but they got the "
                   "same ID from your function. Keep the ID as it came, character for character.")
    if first[2] == second[2]:
        return 5, (f"Two events of the same second ({first[2]}) got the same ID: forty events a second share a "
                   "time here. Which fields name one event, whenever it happened?")
    if _kept_whole(key, first) or _kept_whole(key, second):
        return 6, (f"{both}, {_shown.repr(key)}: it keeps part of what names them and drops or cuts the characters "
                   "that tell the two apart. Keep the source and the id whole, or digest all of both.")
    return 6, f"{both}, {_shown.repr(key)}: a digest cut too short for this traffic. {_too_short(*width)}"


@functools.lru_cache(maxsize=1)  # what the check reads of each event, worked out once per seed
def _judged(seed: int) -> tuple[tuple[dict[str, Any], ...], tuple[Event, ...], tuple[tuple[str, ...], ...]]:
    """The records of :func:`_records`, each event's names (:data:`Event`), and why each extra copy exists."""
    events = _records(seed)
    whys = tuple(tuple("a redelivery" if copy["message_id"] == copies[0]["message_id"] else
                       "a producer retry" if copy["attempt"] == 2 else "a replay or a relay's republish"
                       for copy in copies[1:]) for copies in events)
    return tuple(copy for copies in events for copy in copies), tuple(_event(copies[0]) for copies in events), whys


def _sample_of(seed: int) -> list[int]:
    """Where the copies the restart is judged on sit among all copies: every thousandth event, and some with copies."""
    taken: list[int] = []
    at = 0
    for number, copies in enumerate(_records(seed), start=1):
        if number % 1000 == 1 or (len(copies) > 1 and len(taken) < 400 and number % 7 == 0):
            taken += range(at, at + len(copies))
        at += len(copies)
    return taken


def _first_failing(message_id: Any, records: list[dict[str, Any]]) -> int:
    """Where in ``records`` the first call of ``message_id`` that fails is, found by halving: a few batched calls
    (one trip each to a hand-in's sandbox), not one call per record."""
    low, high = 0, len(records)  # records[:low] all succeed; records[low:high] holds a failure
    while high - low > 1:
        middle = (low + high) // 2
        try:
            call_each(message_id, [(_fresh(copy),) for copy in records[low:middle]])
        except Exception:  # noqa: BLE001 - the learner's code: any error marks the half it is in
            high = middle
        else:
            low = middle
    return low


def _failed_on(message_id: Any, record: dict[str, Any], error: Exception) -> str:
    """A hint naming ``record``, the first the answer failed on, and its error there (``error``, the batch's, if
    calling it on that record alone no longer fails)."""
    try:
        call_each(message_id, [(_fresh(record),)])
    except Exception as alone:  # noqa: BLE001 - the learner's code, as in the check
        error = alone
    return f"Calling it on the record {_shown.repr(record)} failed ({type(error).__name__}: {error})."


def _refused(key: Any, record: dict[str, Any]) -> str | None:
    """A hint if the course's consumer refuses ``key`` as the inbox key (:func:`idemlib.messages.id_fault`)."""
    fault = id_fault(key)
    if fault is None:
        return None
    if not isinstance(key, str):
        nudge = " The inbox's key is one string: make one of what names the event."
    elif len(key) > LONGEST_ID:
        nudge = (" Some sources and IDs here are long (a partner's gateway sends both over 100 characters): what "
                 "keeps a key within 255 characters, whatever they hold, and still tells every event apart?")
    else:
        nudge = ""
    return (f"For the event {_shown.repr(record['id'])} from {_shown.repr(record['source'])} it returned "
            f"{_shown.repr(key)}, which the course's consumer refuses as an inbox key: the key {fault[0]} "
            f"(idemlib.messages.id_fault, the rule it applies to every message ID).{nudge}")


@exercise
def check_message_id(message_id: Any, *, seed: int = 5) -> Feedback:
    """Lesson 05: a function from what a copy carries (its record) to the ID the inbox should trust.

    Judged on every copy of 300,000 events of three services, the shops of twenty chains and a partner's gateway
    (:func:`event_copies`, drawn by ``seed``), as the inbox would judge them, and again in fresh processes on other
    machines, days later. An ID must be one the course's consumer takes as a key (:func:`idemlib.messages.id_fault`),
    and a digest must be wide enough that two of the events it digests share one with odds below one in a million.
    Each call of the answer gets a record of its own, so an answer that changes its record changes nothing else.
    """
    if (missing := blank(message_id, "a function such as def message_id(record): ...")) is not None:
        return missing
    if not callable(message_id):
        return hint("Give a function that takes one copy's record (a dict) and returns the ID the inbox should trust.")
    every_copy, named, whys = _judged(seed)
    try:  # every copy's ID at once (while grading, one trip to the hand-in's sandbox per batch of copies)
        every_id = call_each(message_id, [(_fresh(copy),) for copy in every_copy])
    except Exception as error:  # noqa: BLE001 - the learner's code: any error is worth a hint, not a traceback
        return hint(_failed_on(message_id, every_copy[_first_failing(message_id, list(every_copy))], error))
    if any(value is None or value == "" for value in every_id):
        return hint("It returned no ID (None or an empty string) for some copies; every copy needs one.")
    for key, copy in zip(every_id, every_copy):
        if (refused := _refused(key, copy)) is not None:
            return hint(refused)
    first_ids: list[str] = []
    owner: dict[str, Event] = {}  # the ID the inbox has seen, and the first event that had it
    clashes: list[tuple[Event, Event, str]] = []
    missed: dict[str, int] = {}
    start = 0
    for event, why_copied in zip(named, whys):
        first_id, end = every_id[start], start + 1 + len(why_copied)
        first_ids.append(first_id)
        for value, why in zip(every_id[start + 1:end], why_copied):
            if value != first_id:
                missed[why] = missed.get(why, 0) + 1
        start = end
        if first_id not in owner:
            owner[first_id] = event
        elif len(clashes) < 200:
            clashes.append((owner[first_id], event, first_id))
    if len(owner) == 1:
        return hint(f"Every event got the same ID, {_shown.repr(first_ids[0])}, so the inbox took each one after the "
                    "first for a copy of it and dropped it. What names one event, and no other?")
    width = _digest_width(first_ids, named)
    if clashes:  # the reason most of the collisions share (a digest's few happen to share a second, say)
        collided = [_what_collided(*clash, width) for clash in clashes]
        tally = collections.Counter(rank for rank, _ in collided)
        telling = min(tally, key=lambda rank: (-tally[rank], rank))
        return hint(next(words for rank, words in collided if rank == telling))
    if missed:
        which = ", ".join(f"{count:,} × {why}" for why, count in sorted(missed.items()))
        return hint(f"Copies of one event got different IDs ({which}), so the inbox took each for a new payment and "
                    "charged again. Which fields are the same on every copy, however and whenever it was copied?")
    # A digest may give two events one key by chance: the odds, over the events it digests, must stay below 1e-6.
    if _odds_of_a_collision(*width) >= COLLISION_ODDS:
        return hint(f"No two events collided here, by luck: its digest is too narrow for the events it digests. "
                    f"{_too_short(*width)}")
    sample = [every_copy[at] for at in _sample_of(seed)]
    try:
        expected = [str(value) for value in call_each(message_id, [(_fresh(copy),) for copy in sample])]
        restarted = [in_fresh_process(message_id, [(_fresh(copy),) for copy in sample], machine, hash_seed)
                     for hash_seed, machine in enumerate(OTHER_MACHINES, start=1)]
    except Exception as error:  # noqa: BLE001 - any failure of the rerun is the learner's to fix, as a hint
        return hint(f"The check computes the IDs again in a fresh Python process, as a restarted consumer would, and "
                    f"that failed ({error}). Import what it uses at the top of its cell.")
    if any(again != expected for again in restarted):
        return hint("In a fresh process (a consumer restarted after a crash, on another machine, a day or a year later) it gave "
                    "other IDs for the same copies, so every redelivery after a restart would look new to the inbox. "
                    "A restart brings back your code, not your memory: a dict starts empty, a UUID made at start-up "
                    "is a new one, and Python's hash() of a string, a process ID, a host name and the clock change. "
                    "Build the ID only from what the copy carries.")
    return right(f"{len(every_copy):,} copies of {len(named):,} events from three services, {SHOP_COUNT} shops and a partner's "
                 "gateway: every payment charged once, none twice, none dropped, every ID one the consumer takes, and "
                 "a restarted consumer computes the same IDs.")
