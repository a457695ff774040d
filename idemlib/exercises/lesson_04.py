"""Checks for lesson 04, Beyond your own database."""

from __future__ import annotations

from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.provider import PaymentProvider

__all__ = ["check_key_function"]


@exercise
def check_key_function(charge_key: Any) -> Feedback:
    """Lesson 04: a function from a message ID to the idempotency key of that message's charge call."""
    if (missing := blank(charge_key, "a function such as def charge_key(message_id): ...")) is not None:
        return missing
    if not callable(charge_key):
        return hint("Give a function that takes a message ID and returns a key (a string).")
    first, again, other = charge_key("m-7f3"), charge_key("m-7f3"), charge_key("m-9c2")
    if not isinstance(first, str) or not first:
        return hint(f"The key should be a non-empty string; got {first!r}.")
    if first != again:
        return hint("Two calls for m-7f3 gave two different keys, as a fresh UUID per attempt would. A retry must send "
                     "the same key as the first attempt, or the provider sees a new request and charges again.")
    if first == other:
        return hint("m-7f3 and m-9c2 got the same key, so the second payment would be answered with the first one's "
                     "stored result and never charged. Build the key from the message ID.")
    if first == "m-7f3":
        return hint("That is the bare message ID. It works for one call, but a handler that makes two calls (a charge "
                     "and a fee, say) would give both the same key. Name the call in the key too.")
    provider = PaymentProvider()
    for _ in range(3):  # the first delivery's answer was lost; two redeliveries call again with their key
        provider.charge(charge_key("m-7f3"), order_id=1042, amount=40)
    return right(f"'{first}' is the same on every retry and unique to this message and call: "
                  f"{len(provider.charges)} charge for three calls.")
