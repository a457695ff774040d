"""How many bits an answer's keys hold, read off the keys, and how many a day's traffic needs (lessons 04 and 05).

A check cannot see how an answer made its keys, only the keys. Read off them, the number of different values they
could take says how wide a digest in them is, whatever way it is written out (hex, base64, decimal); set against
the birthday bound over the exercise's traffic, it says whether a digest that happened not to collide on the
check's day is one that would collide on another.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["COLLISION_ODDS", "key_space_bits", "min_digest_bits", "odds_of_a_collision", "too_short"]

COLLISION_ODDS = 1e-6  # the chance, over the stated traffic, that a check accepts of two keys being one by chance


def key_space_bits(keys: Iterable[str]) -> float:
    """How many bits of difference ``keys`` can hold at most, read off the keys: log2 of how many strings have one of
    their lengths and, at each place, one of the characters seen there. A digest written out (hex, base64, decimal)
    of b bits comes out at b (given keys enough to show every character at every place: a couple of thousand); it
    can never come out at less than the keys really tell apart."""
    keys_by_length: dict[int, list[str]] = {}
    for key in keys:
        keys_by_length.setdefault(len(key), []).append(key)
    # zip(*same_length) gives each place's characters in one go: fast enough for all 300,000 keys
    return math.log2(sum(math.prod(len(set(place)) for place in zip(*same_length))
                         for same_length in keys_by_length.values()))


def odds_of_a_collision(bits: float, count: int) -> float:
    """The chance that two of ``count`` keys get one value from a digest of ``bits`` bits (the birthday bound)."""
    return -math.expm1(-count * (count - 1) / 2 / 2**bits)


def min_digest_bits(count: int) -> int:
    """The narrowest digest that gives ``count`` keys odds of a collision below :data:`COLLISION_ODDS`."""
    return math.ceil(math.log2(max(count * (count - 1) / 2, 1) / COLLISION_ODDS))


def too_short(bits: float, count: int, keys: str, things: str) -> str:
    """What a hint says of ``keys`` (``"Its IDs"``) that hold ``bits`` bits: the odds they give ``count`` ``things``
    (``"events"``), and the width a check asks for."""
    odds = odds_of_a_collision(bits, count)
    shown = f"{odds:.0%}" if odds >= 0.01 else f"1 in {round(1 / odds):,}"
    return (f"{keys} hold about {bits:.0f} bits: among the {count:,} {things}, the odds that two share one are {shown}. "
            f"Below one in a million takes a digest of at least {min_digest_bits(count)} bits.")
