"""Checks for lesson 04, Beyond your own database."""

from __future__ import annotations

import subprocess
import types
from typing import Any

from idemlib.course.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.provider import PaymentProvider

__all__ = ["check_key_function"]

# Message IDs of many lengths, up to 200 characters (NServiceBus's MessageId column is that wide), in pairs that
# differ only in their last character: a key cut to any length shorter than the longest ID collides, and so does
# a hash cut down to a few characters.
_STEM = "order-1042/payment-request/" + "7f3c9a1e" * 25
MESSAGES = ("m-7f3", "m-7f4", "m-9c2", "m-8a1", *(f"m-{n:03x}" for n in range(0x100, 0x10c)),
            *(f"{_STEM[:length - 1]}{last}" for length in (9, 17, 36, 80, 200) for last in "ab"),
            # and a thousand more, as a day's traffic: a key cut to a short hash (a few hex digits, a CRC's
            # last byte) collides among 4,000 calls, where among 78 it could slip through by luck
            *(f"m-{n:05x}" for n in range(0x20000, 0x20000 + 1000)))
# Calls that share a first letter (charge, capture) and one that extends another's name (charge, charge-2: a
# second instalment), so a key with the call's name cut to any prefix collides.
CALLS = ("charge", "fee", "capture", "charge-2")
PAIRS = [(message, call) for message in MESSAGES for call in CALLS]


@exercise
def check_key_function(call_key: Any) -> Feedback:
    """Lesson 04: a function from (message ID, call name) to the idempotency key of that call."""
    if (missing := blank(call_key, "a function such as def call_key(message_id, call): ...")) is not None:
        return missing
    if not isinstance(call_key, types.FunctionType):
        return hint("Give a function (written with def, or a lambda) that takes a message ID and a call name and "
                    "returns a key (a string).")
    try:
        keys = [call_key(message, call) for message, call in PAIRS]
    except TypeError as error:
        return hint(f"Calling it as call_key('m-7f3', 'charge') failed ({error}). It takes two arguments: "
                    "the message ID and the name of the call.")
    if not all(isinstance(key, str) and key for key in keys):
        return hint(f"Each key should be a non-empty string; for ('m-7f3', 'charge') it gave {keys[0]!r}.")
    if keys != [call_key(message, call) for message, call in PAIRS]:
        return hint("Asked twice for the key of the same call, it gave two different keys, as a fresh UUID or the clock "
                    "would. A retry must send the key of the first attempt, or the provider sees a new request.")
    by_pair = dict(zip(PAIRS, keys))
    if len(set(keys)) < len(keys):
        if all(len({by_pair[(m, call)] for call in CALLS}) < len(CALLS) for m in MESSAGES):
            return hint("Two calls of one message (its charge and its fee, say) got the same key, so the provider would "
                        "take the fee for a repeat of the charge with other parameters and refuse it. What must the key "
                        "say besides which message it belongs to?")
        first_with: dict[str, tuple[str, str]] = {}
        for pair, key in by_pair.items():
            if key in first_with:
                return hint(f"Two different calls, {first_with[key]} and {pair}, got the same key {key!r}, so the second "
                            "would be answered with the first one's stored result and never made. Keep the whole message "
                            "ID and the whole call name in the key; a hash cut down to a few characters collides too.")
            first_with[key] = pair
    try:
        restarted = [in_fresh_process(call_key, PAIRS, machine, seed)
                     for seed, machine in enumerate(OTHER_MACHINES, start=1)]
    except (OSError, RuntimeError, SyntaxError, TypeError, ValueError, subprocess.TimeoutExpired) as error:
        return hint(f"The check reruns your function in a fresh Python process, as a restarted consumer would, and that "
                    f"failed ({error}). Write it with def, and import what it uses at the top of its cell.")
    if any(again != keys for again in restarted):
        return hint("In a fresh process (a consumer restarted after a crash, or redeployed on another machine, a day "
                    "or a year later) it gave other keys for the same calls. A restart brings back your code, not your memory: "
                    "a dict of keys starts empty, a UUID made at start-up is a new one, and a process ID, a host name, "
                    "the clock (a date, an hour) and Python's hash() of a string all change. Build the key only from "
                    "what the message itself carries.")
    provider = PaymentProvider()
    for key in [keys[0], *restarted[0][:1], keys[0]]:  # first attempt, the retry after a restart, one more redelivery
        provider.charge(key, order_id=1042, amount=40)
    return right(f"'{keys[0]}' names the message and the call, and a restarted process gives it again: "
                 f"{len(provider.charges)} charge for three attempts.")
