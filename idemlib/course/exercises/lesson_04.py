"""Checks for lesson 04, Beyond your own database."""

from __future__ import annotations

import functools
import random
import string
from typing import Any

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
# message IDs that end "-refund" and a call "fee": a key joined with '-' collides there too.)
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
    200-character IDs that differ in their last character, a "payments2" call for ``a9f...`` beside a
    "payments" call for ``2a9f...``, and hyphens on both sides of a part: a "payments-eu" fee for ``m-...``
    beside a "payments" fee for ``eu-m-...``, a "refund-fee" for ``m-...`` beside a "fee" for ``m-...-refund``.
    """
    draw = random.Random(seed)
    calls: set[tuple[str, str, str]] = set()
    for message_id in ("m-7f3", "m-7f4", *(f"{_LONG[:length - 1]}{last}" for length in (9, 17, 36, 80, 200)
                                           for last in "ab")):
        calls.update(("payments", message_id, call) for call in CALLS)
    for message_id in _message_ids(draw, 3_000):
        calls.update({(consumer, message_id, "charge") for consumer in CONSUMERS[::2]})  # two services, one message
        if message_id.startswith("order:"):  # order:1042:payment:1, order1042payment1, order_1042_payment_1, ...
            calls.update(("payments", message_id.replace(":", other), "charge") for other in PUNCTUATION)
        elif message_id.startswith("evt_"):
            calls.add(("payments", message_id.swapcase(), "charge"))  # evt_1Nq and EVT_1nQ: two messages
        elif message_id.startswith("m-"):
            calls.update({("payments", message_id + " ", "charge"), ("payments", " " + message_id, "charge")})
            calls.update({("payments-eu", message_id, "fee"), ("payments", "eu-" + message_id, "fee"),
                          ("payments", message_id, "refund-fee"), ("payments", message_id + "-refund", "fee")})
        else:
            calls.update({("payments2", message_id, "fee"), ("payments", message_id, "fee")})  # two of one name
            calls.add(("payments", "2" + message_id, "fee"))  # payments2 + a9f... and payments + 2a9f...
    for message_id in _message_ids(draw, DAY_OF_CALLS):
        if len(calls) >= DAY_OF_CALLS:
            break
        calls.add((draw.choice(CONSUMERS), message_id, draw.choice(CALLS)))
    return tuple(sorted(calls))


def telling_pairs(calls: tuple[tuple[str, str, str], ...]) -> list[list[tuple[tuple[str, str, str], ...]]]:
    """The pairs of different calls among ``calls`` that teach one rule each, in the order the hints teach them:
    two services, one message; two calls, one message; parts glued together; a long ID cut; letter case; a space;
    a ':' of the ID dropped or replaced; a '-' between the parts."""
    present = set(calls)
    rules: list[list[tuple[tuple[str, str, str], ...]]] = [[] for _ in range(8)]
    for consumer, message_id, call in calls:
        if consumer in ("refunds", "payments2") and ("payments", message_id, call) in present:
            rules[0].append((("payments", message_id, call), (consumer, message_id, call)))
        if consumer == "payments2" and ("payments", "2" + message_id, call) in present:
            rules[2].append(((consumer, message_id, call), ("payments", "2" + message_id, call)))
        if message_id.startswith("EVT_") and ("payments", message_id.swapcase(), call) in present:
            rules[4].append((("payments", message_id.swapcase(), call), (consumer, message_id, call)))
        if message_id.endswith(" ") and ("payments", message_id.strip(), call) in present:
            rules[5].append((("payments", message_id.strip(), call), (consumer, message_id, call)))
        if consumer == "payments-eu" and ("payments", "eu-" + message_id, call) in present:
            rules[7].append(((consumer, message_id, call), ("payments", "eu-" + message_id, call)))
        if call == "refund-fee" and (consumer, message_id + "-refund", "fee") in present:
            rules[7].append(((consumer, message_id, call), (consumer, message_id + "-refund", "fee")))
        if message_id.startswith("order:") and consumer == "payments" and call == "charge":
            family = [message_id, *(message_id.replace(":", other) for other in PUNCTUATION)]
            rules[6] += [((consumer, one, call), (consumer, other, call)) for n, one in enumerate(family)
                         for other in family[n + 1:] if (consumer, one, call) in present and (consumer, other, call) in present]
    rules[1] = [(("payments", "m-7f3", one), ("payments", "m-7f3", other)) for one in CALLS for other in CALLS if one < other]
    rules[3] = [(("payments", f"{_LONG[:length - 1]}a", call), ("payments", f"{_LONG[:length - 1]}b", call))
                for length in (9, 17, 36, 80, 200) for call in CALLS]
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
    ][rule]


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
    calls = provider_calls(seed=seed)
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
    sample = calls[::500]
    if call_each(call_key, sample) != keys[::500]:
        return hint("Asked twice for the key of the same call, it gave two different keys, as a fresh UUID or the clock "
                    "would. A retry must send the key of the first attempt, or the provider sees a new request.")
    if len(set(keys)) < len(keys):
        key_of = dict(zip(calls, keys))
        for rule, pairs in enumerate(telling_pairs(calls)):
            for first, second in pairs:
                if key_of[first] == key_of[second]:
                    return hint(_hint_for(rule, first, second))
        first_with: dict[str, tuple[str, str, str]] = {}
        for one, key in zip(calls, keys):
            if key in first_with:
                return hint(f"Two different calls, {first_with[key]} and {one}, got the same key {key!r}, so the second "
                            f"would be answered with the first one's stored result and never made. Among the "
                            f"{len(calls):,} calls of a busy day a digest of 32 bits or so collides (half the time by "
                            "77,000 keys); keep a digest long enough for a day's traffic, or the parts themselves.")
            first_with[key] = one
    try:
        restarted = [in_fresh_process(call_key, sample, machine, hash_seed)
                     for hash_seed, machine in enumerate(OTHER_MACHINES, start=1)]
    except Exception as error:  # noqa: BLE001 - any failure of the rerun is the learner's to fix, as a hint
        return hint(f"The check reruns your function in a fresh Python process, as a restarted consumer would, and that "
                    f"failed ({error}). Import what it uses at the top of its cell.")
    if any(again != keys[::500] for again in restarted):
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
