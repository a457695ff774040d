"""Checks for lesson 04, Beyond your own database."""

from __future__ import annotations

import bisect
import functools
import random
import string
from typing import Any

from idemlib.course.exercises.digest_width import key_space_bits, min_digest_bits, too_short
from idemlib.course.exercises.feedback import Feedback, blank, call_each, exercise, failed_call, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.facts import fact_number
from idemlib.provider import PaymentProvider

__all__ = ["check_key_function", "provider_calls", "telling_pairs"]

# Services that call one provider account. Two names where one extends the other ("payments2" is
# "payments" and a 2): a key that glues the parts together with nothing between them collides. A name with a
# hyphen ("payments-eu") beside message IDs that start "eu-": a key joined with '-' collides.
CONSUMERS = ("payments", "payments2", "refunds", "payments-eu")
# Calls that share a first letter (charge, capture), one that extends another's name (charge-2, a second
# instalment): a key with the call's name cut to a prefix collides. (The day also holds a "refund-fee" beside
# message IDs that end "-refund" and a call "fee": a key joined with '-' collides there too; a "fee" for an ID
# that ends "refund-" beside a "refund-fee" for its stem: a key that glues the ID to the call collides; and a
# "charge" for an ID that ends ":fee" beside a "fee" for its stem: a key that leaves the call out when it is
# "charge", the default, collides.)
CALLS = ("charge", "fee", "capture", "charge-2")
# Message IDs as producers write them: short ones, 200-character ones (NServiceBus's MessageId column is
# that wide) in pairs that differ only in the last character, Stripe-style ones whose letter case matters,
# ones with ':' in them (order:1042:payment:1, urn:uuid:...), and IDs that differ from those only in their
# punctuation (order1042payment1, order_1042_payment_1, order|1042|payment|1, ...). The consumers' and calls'
# names are the services' own (letters, digits, hyphens) and hold no ':'; a message ID may hold any character, so
# a key joined with ':' stays unambiguous (the first ':' ends the consumer, the last begins the call) only because
# the ID is the one part that may hold it. A '-' is in the names too, so it cannot mark where one ends.
_LONG = "order-1042/payment-request/" + "7f3c9a1e" * 25
_BASE62 = string.digits + string.ascii_letters
PUNCTUATION = ("", "_", "-", "/", "|", "#", ".", " ")  # what else a producer writes where another writes ':'
DAY_OF_CALLS = 300_000  # a day's calls on one busy account: a 32-bit digest collides here (about 10 pairs)
# A digest's width is judged on the day's volume: the odds that two of its calls share a key stay below one in a
# million from 56 bits. It shows on one pair's keys, whatever the day's spread: one service's charges alone can
# make a day's volume, so a digest of the ID alone (the names kept beside it) is judged by the same width.
MIN_DIGEST_BITS = min_digest_bits(DAY_OF_CALLS)
# Long IDs that differ in one character only, at the first place, every eighth and the last: a key that keeps only
# an ID's start, only its end, or its start and end, drops a place where two of them differ.
LONG_LENGTHS = (9, 17, 36, 80, 200)
# A producer that names a message by its path, to the 200 characters of the column: the busy pair's charges. So many
# that their keys show how wide a digest of them is (a digest, not a cut, is what shortens these).
BUSY, LONGEST, LONG_IDS = ("payments", "charge"), 200, 2_000
# A producer that forwards its IDs URL-encoded: order%3A1042%3Apayment%3A1 beside another's order:1042:payment:1. A key
# that escapes ':' as '%3A' without escaping '%' itself writes the two alike.
ESCAPED_COLON = "%3A"
# Holds named by how long they last, made by services whose names end in a digit: "payments" + "24h-hold" and
# "payments2" + "4h-hold" read the same once the consumer is glued to the call.
GLUED_HOLDS = (("payments", "24h-hold"), ("payments2", "4h-hold"))


def _one_apart(length: int) -> list[tuple[str, str]]:
    """Pairs of IDs of ``length`` characters that differ at one place only: the first, every eighth, or the last."""
    base = _LONG[:length]
    return [(f"{base[:at]}a{base[at + 1:]}", f"{base[:at]}b{base[at + 1:]}")
            for at in sorted({*range(0, length, 8), length - 1})]


def _long_ids(draw: random.Random, count: int) -> list[str]:
    """``count`` distinct IDs of ``LONGEST`` characters: an order's path, then random letters and digits."""
    ids: set[str] = set()
    while len(ids) < count:
        path = f"checkout/orders/{draw.randrange(10**6):06d}/payment-requests/"
        ids.add(path + "".join(draw.choices(_BASE62, k=LONGEST - len(path))))
    return sorted(ids)


def _message_ids(draw: random.Random, count: int) -> list[str]:
    """``count`` distinct message IDs of several producers' styles."""
    ids: set[str] = set()
    while len(ids) < count:
        style = draw.random()
        if style < 0.05:
            ids.add(f"order:{draw.randrange(10_000)}:payment:{draw.randrange(1, 4)}")
        elif style < 0.1:
            ids.add(f"urn:uuid:{draw.getrandbits(128):032x}")
        elif style < 0.4:
            ids.add(f"m-{draw.getrandbits(draw.choice((12, 20, 28, 40))):x}")
        elif style < 0.7:
            ids.add("evt_" + "".join(draw.choices(_BASE62, k=14)))
        else:
            ids.add(f"{draw.getrandbits(128):032x}")
    return sorted(ids)


@functools.lru_cache(maxsize=2)  # a day of calls is drawn once per seed; the list is never changed
def provider_calls(*, seed: int = 4) -> tuple[tuple[str, str, str], ...]:
    """A day's provider calls as (consumer, message ID, call): ``DAY_OF_CALLS`` of them, every one different.

    Besides calls drawn at random (by ``seed``), the day holds the pairs production meets: one message
    handled by two services, one message making several calls, IDs that differ only in letter case or in
    a trailing space or only in their punctuation (``order:102:payment:3``, ``order_102_payment_3``, ...),
    long IDs that differ in one character (the first, the last, or one between), ``LONG_IDS`` charges of
    200-character IDs by one service, a "payments2" call for ``a9f...`` beside a
    "payments" call for ``2a9f...``, and hyphens on both sides of a part: a "payments-eu" fee for ``m-...``
    beside a "payments" fee for ``eu-m-...``, a "refund-fee" for ``m-...`` beside a "fee" for ``m-...-refund``
    and beside a "fee" for ``m-...refund-``, and a "fee" for ``m-...`` beside a "charge" for ``m-...:fee``.
    Order IDs come URL-encoded too (``order%3A102%3Apayment%3A3``), and a "payments" 24h-hold of an ``evt_...``
    beside a "payments2" 4h-hold of it.
    """
    draw = random.Random(seed)
    calls: set[tuple[str, str, str]] = set()
    for message_id in ("m-7f3", "m-7f4", *(one for length in LONG_LENGTHS for pair in _one_apart(length) for one in pair)):
        calls.update(("payments", message_id, call) for call in CALLS)
    for message_id in _message_ids(draw, 3_000):
        calls.update({(consumer, message_id, "charge") for consumer in CONSUMERS[::2]})  # two services, one message
        if message_id.startswith("order:"):  # order:1042:payment:1, order1042payment1, order_1042_payment_1, ...
            calls.update(("payments", message_id.replace(":", other), "charge") for other in PUNCTUATION)
            calls.add(("payments", message_id.replace(":", ESCAPED_COLON), "charge"))
        elif message_id.startswith("evt_"):
            calls.add(("payments", message_id.swapcase(), "charge"))  # evt_1Nq and EVT_1nQ: two messages
            calls.update((consumer, message_id, hold) for consumer, hold in GLUED_HOLDS)
        elif message_id.startswith("m-"):
            calls.update({("payments", message_id + " ", "charge"), ("payments", " " + message_id, "charge")})
            calls.update({("payments-eu", message_id, "fee"), ("payments", "eu-" + message_id, "fee"),
                          ("payments", message_id, "refund-fee"), ("payments", message_id + "-refund", "fee"),
                          ("payments", message_id + "refund-", "fee"),  # m-x + refund-fee and m-xrefund- + fee
                          ("payments", message_id, "fee"), ("payments", message_id + ":fee", "charge")})
        else:
            calls.update({("payments2", message_id, "fee"), ("payments", message_id, "fee")})  # two of one name
            calls.add(("payments", "2" + message_id, "fee"))  # payments2 + a9f... and payments + 2a9f...
    calls.update((BUSY[0], message_id, BUSY[1]) for message_id in _long_ids(draw, LONG_IDS))
    for message_id in _message_ids(draw, DAY_OF_CALLS):
        if len(calls) >= DAY_OF_CALLS:
            break
        calls.add((draw.choice(CONSUMERS), message_id, draw.choice(CALLS)))
    return tuple(sorted(calls))


def telling_pairs(calls: tuple[tuple[str, str, str], ...]) -> list[list[tuple[tuple[str, str, str], ...]]]:
    """The pairs of different calls among ``calls`` that teach one rule each, in the order the hints teach them:
    two services, one message; two calls, one message; parts glued together; a long ID cut; letter case; a space;
    a ':' of the ID dropped or replaced; a '-' between the parts; the default call left out; a ':' escaped as the
    text another ID holds."""
    present = set(calls)
    rules: list[list[tuple[tuple[str, str, str], ...]]] = [[] for _ in range(10)]
    for consumer, message_id, call in calls:
        if consumer in ("refunds", "payments2") and ("payments", message_id, call) in present:
            rules[0].append((("payments", message_id, call), (consumer, message_id, call)))
        if consumer == "payments2" and ("payments", "2" + message_id, call) in present:
            rules[2].append(((consumer, message_id, call), ("payments", "2" + message_id, call)))
        if message_id.startswith("EVT_") and ("payments", message_id.swapcase(), call) in present:
            rules[4].append((("payments", message_id.swapcase(), call), (consumer, message_id, call)))
        if message_id.endswith(" ") and ("payments", message_id.strip(), call) in present:
            rules[5].append((("payments", message_id.strip(), call), (consumer, message_id, call)))
        if (consumer, call) == GLUED_HOLDS[0] and (GLUED_HOLDS[1][0], message_id, GLUED_HOLDS[1][1]) in present:
            rules[2].append(((consumer, message_id, call), (GLUED_HOLDS[1][0], message_id, GLUED_HOLDS[1][1])))
        if consumer == "payments-eu" and ("payments", "eu-" + message_id, call) in present:
            rules[7].append(((consumer, message_id, call), ("payments", "eu-" + message_id, call)))
        if call == "refund-fee" and (consumer, message_id + "refund-", "fee") in present:
            rules[2].append(((consumer, message_id, call), (consumer, message_id + "refund-", "fee")))
        if call == "charge" and message_id.endswith(":fee") and (consumer, message_id[:-4], "fee") in present:
            rules[8].append(((consumer, message_id, call), (consumer, message_id[:-4], "fee")))
        if call == "refund-fee" and (consumer, message_id + "-refund", "fee") in present:
            rules[7].append(((consumer, message_id, call), (consumer, message_id + "-refund", "fee")))
        if message_id.startswith("order:") and (consumer, message_id.replace(":", ESCAPED_COLON), call) in present:
            rules[9].append(((consumer, message_id, call), (consumer, message_id.replace(":", ESCAPED_COLON), call)))
        if message_id.startswith("order:") and consumer == "payments" and call == "charge":
            family = [message_id, *(message_id.replace(":", other) for other in PUNCTUATION)]
            rules[6] += [((consumer, one, call), (consumer, other, call)) for n, one in enumerate(family)
                         for other in family[n + 1:] if (consumer, one, call) in present and (consumer, other, call) in present]
    rules[1] = [(("payments", "m-7f3", one), ("payments", "m-7f3", other)) for one in CALLS for other in CALLS if one < other]
    rules[3] = [(("payments", one, call), ("payments", other, call))
                for length in LONG_LENGTHS for one, other in _one_apart(length) for call in CALLS]
    return rules


def _hint_for(rule: int, first: tuple[str, str, str], second: tuple[str, str, str]) -> str:
    """The hint for two different calls that got one key, by the rule (of :func:`telling_pairs`) they break."""
    (consumer_a, message_a, call_a), (consumer_b, message_b, call_b) = first, second
    return [
        f"The {call_a} of message {message_a!r} by {consumer_a!r} and by {consumer_b!r} got the same key, so on one "
        "provider account the second service's call is answered with the first one's stored charge and never made. "
        "What must the key say besides the message and the call? (Section 2, one key per consumer.)",
        f"Two calls of one message ({call_a!r} and {call_b!r} for {message_a!r}) got the same key, so the provider "
        "takes the second for a repeat of the first. Keep the whole name of the call in the key.",
        f"{first} and {second} got the same key: glued together with nothing between them, the parts of the two calls "
        "read the same. Where does one part end and the next begin?",
        f"Two different calls, {first} and {second}, got the same key, so the second would be answered with the first "
        "one's stored result and never made. A key cut short collides; keep the whole ID and the whole call.",
        f"Message IDs {message_a!r} and {message_b!r} are two messages (an ID is compared exactly, letter case "
        "included), but they got the same key. What did the key do to the ID's letters?",
        f"Message IDs {message_a!r} and {message_b!r} are two messages (a space is part of an ID), but they got the "
        "same key. Keep the ID as it came, character for character.",
        f"Message IDs {message_a!r} and {message_b!r} are two messages (a producer's ID may hold any character, its "
        "punctuation included), but they got the same key. Keep the ID as it came, character for character: the "
        "consumer's and the call's names are your own, so they are the parts that keep clear of your separator.",
        f"{first} and {second} got the same key: the character between your parts also occurs inside the services' "
        "own names (payments-eu, refund-fee), so a reader of the key cannot tell where the consumer ends and the "
        "ID begins, or where the ID ends and the call begins. Join with a character those names never hold "
        "(the exercise says what they are made of).",
        f"{first} and {second} got the same key: a key that leaves out the name of the call when it is "
        f"{call_a!r} reads like the key of another call of another message. Name every call in the key, the "
        "default one too.",
        f"Message IDs {message_a!r} and {message_b!r} are two messages, but they got the same key: it writes a ':' "
        "of one as the other holds it as it came. An escape keeps IDs apart only if it escapes its own escape "
        "character too ('%' as '%25', as urllib.parse.quote(message_id, safe='') does); or keep the ID as it came, "
        "since the consumer's and the call's names are the parts that keep clear of ':'.",
    ][rule]


Call = tuple[str, str, str]  # consumer, message ID, call


@functools.lru_cache(maxsize=2)  # what a day is judged on, worked out once per seed
def _judged(seed: int) -> tuple[tuple[Call, ...], list[list[tuple[Call, ...]]], tuple[int, ...], tuple[int, ...]]:
    """The day's calls, their telling pairs, where the calls sit that the repeat and the restart are judged on, and
    where the busy pair's 200-character IDs sit (the keys a digest's width is read off).

    The repeat and the restart are judged on every 500th call and on every kind of ID the day holds, the rare
    ones too: both calls of the first and last pairs of each rule (long IDs, ':', letter case, spaces, ...) and
    some of the busy pair's long IDs, so a key that goes wrong only for some kind of ID shows there."""
    calls = provider_calls(seed=seed)
    pairs = telling_pairs(calls)
    busy = tuple(at for at, (consumer, message_id, call) in enumerate(calls)
                 if (consumer, call) == BUSY and len(message_id) == LONGEST)
    rare = {bisect.bisect_left(calls, call) for rule in pairs for pair in rule[:2] + rule[-2:] for call in pair}  # sorted
    return calls, pairs, tuple(sorted({*range(0, len(calls), 500), *rare, *busy[::200]})), busy


def _collided(first: Call, second: Call, key: str, bits: float) -> str:
    """The hint for two different calls that got one ``key`` and are no telling pair: an ID cut short (the key
    keeps its start or its end), or a digest (of ``bits`` bits, read off the busy pair's keys) too narrow."""
    if any(len(message_id) > 6 and (message_id[:6] in key or message_id[-6:] in key) for _, message_id, _ in
           (first, second)):
        return _hint_for(3, first, second)
    both = (f"Two different calls, {first} and {second}, got the same key {key!r}, so the second would be answered "
            "with the first one's stored result and never made.")
    if bits < MIN_DIGEST_BITS:
        return f"{both} {too_short(bits, DAY_OF_CALLS, 'Its keys', 'calls')}"
    return f"{both} Keep every part whole, or digest all of them together into {MIN_DIGEST_BITS} bits or more."


@exercise
def check_key_function(call_key: Any, *, seed: int = 4) -> Feedback:
    """Lesson 04: a function from (consumer, message ID, call name) to the idempotency key of that call.

    Judged on a day's calls on one provider account (:func:`provider_calls`, drawn by ``seed``), asked
    twice, and again in fresh processes on other machines, days later.
    """
    if (missing := blank(call_key, "a function such as def call_key(consumer, message_id, call): ...")) is not None:
        return missing
    if not callable(call_key):
        return hint("Give a function that takes the consumer's name, a message ID and a call name, and returns the "
                    "key (a string).")
    calls, pairs, sample_at, busy_at = _judged(seed)
    try:
        keys = call_each(call_key, calls)
    except Exception as error:  # noqa: BLE001 - the learner's code: any error is worth a hint, not a traceback
        shown = ", ".join(map(repr, failed_call(error) or calls[0]))
        arity = (" It takes three arguments: the consumer's name, the message ID and the name of the call."
                 if isinstance(error, TypeError) else "")
        return hint(f"Calling it as call_key({shown}) failed ({type(error).__name__}: {error}).{arity}")
    if not all(isinstance(key, str) and key for key in keys):
        wrong = next(key for key in keys if not (isinstance(key, str) and key))
        return hint(f"A key is sent as a header's text, so each must be a non-empty string; it gave {wrong!r} "
                    f"({type(wrong).__name__}).")
    longest = max(keys, key=len)
    if len(longest) > (limit := fact_number("stripe_key_max_length")):
        return hint(f"A key of {len(longest)} characters: Stripe accepts keys of up to {limit}, and message IDs run to "
                    "200. Keep each part whole, but spend no characters on padding or repeats.")
    sample, expected = [calls[at] for at in sample_at], [keys[at] for at in sample_at]
    if call_each(call_key, sample) != expected:
        return hint("Asked twice for the key of the same call, it gave two different keys, as a fresh UUID or the clock "
                    "would. A retry must send the key of the first attempt, or the provider sees a new request.")
    if len(set(keys)) < len(keys):
        key_of = dict(zip(calls, keys))
        for rule, rule_pairs in enumerate(pairs):
            for first, second in rule_pairs:
                if key_of[first] == key_of[second]:
                    return hint(_hint_for(rule, first, second))
        first_with: dict[str, Call] = {}
        for one, key in zip(calls, keys):
            if key in first_with:
                return hint(_collided(first_with[key], one, key, key_space_bits(keys[at] for at in busy_at)))
            first_with[key] = one
    if (bits := key_space_bits(keys[at] for at in busy_at)) < MIN_DIGEST_BITS:
        return hint(f"No two calls got one key here, but only by luck: the day spreads its calls over several services "
                    f"and calls, and one service's charges alone can make a day's {DAY_OF_CALLS:,}. Read off the keys "
                    f"of the {len(busy_at):,} {BUSY[1]}s by {BUSY[0]!r} with {LONGEST}-character IDs, it digests into "
                    f"too few values. {too_short(bits, DAY_OF_CALLS, 'Its keys', 'calls')}")
    try:
        restarted = [in_fresh_process(call_key, sample, machine, hash_seed)
                     for hash_seed, machine in enumerate(OTHER_MACHINES, start=1)]
    except Exception as error:  # noqa: BLE001 - any failure of the rerun is the learner's to fix, as a hint
        return hint(f"The check reruns your function in a fresh Python process, as a restarted consumer would, and that "
                    f"failed ({error}). Import what it uses at the top of its cell.")
    if any(again != expected for again in restarted):
        return hint("In a fresh process (a consumer restarted after a crash, or redeployed on another machine, a day "
                    "or a year later) it gave other keys for the same calls. A restart brings back your code, not your memory: "
                    "a dict of keys starts empty, a UUID made at start-up is a new one, and a process ID, a host name, "
                    "the clock (a date, an hour) and Python's hash() of a string all change. Build the key only from "
                    "the consumer's name and what the message itself carries.")
    provider = PaymentProvider()
    for _ in range(3):  # the first attempt, the retry after a restart, one more redelivery
        provider.charge(restarted[0][0], order_id=1042, amount=40)
    services = len({consumer for consumer, _, _ in calls})
    return right(f"{len(calls):,} calls of {services} services on one provider account, {len(calls):,} keys, none shared; "
                 f"a restarted process gives them again, and three attempts of one call made {len(provider.charges)} "
                 "charge.")
