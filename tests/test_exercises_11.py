"""Lesson 11's exercises: a skip-rate rule for a thinner service, and the order a batch inserts its IDs in."""

from __future__ import annotations

import functools
import hashlib
import operator
import zlib
from fractions import Fraction

import numpy as np
from exercise_bank import Bank, Wrong, bank_tests

from idemlib.operating.metrics import SkipRateAlert


class Sorter:
    """A callable object, as a learner may write one (bound to a name, as in a notebook cell)."""

    def __call__(self, ids: list[str]) -> list[str]:
        return sorted(ids, key=lambda message_id: (len(message_id), message_id))


sorter = Sorter()


def hash_order_iterator(ids: list[str]) -> object:
    """Python's per-process hash() order, handed back as an iterator."""
    return iter(sorted(set(ids), key=hash))


def hash_order_generator(ids: list[str]) -> object:
    """Python's per-process hash() order, handed back as a generator."""
    return (message_id for message_id in sorted(ids, key=hash))
by_digest = functools.partial(sorted, key=lambda message_id: hashlib.sha256(message_id.encode()).digest())


BANKS = {
    "check_alert_rule": Bank(
        right=[({"threshold": 0.2, "windows": 1, "min_handled": 8},), ((0.25, 1, 6),), ([0.3, 1, 4],),
               ({"threshold": 0.18, "windows": 1, "min_handled": 6},), ((0.15, 1, 13),),
               # numpy numbers, what reading them off a pandas table gives
               ({"threshold": np.float64(0.2), "windows": np.int64(1), "min_handled": np.int64(9)},),
               # one stray in a night window of 3 makes it 1 of 4: 25 %, under 30 %
               ((0.3, 1, 3),),
               ((0.2, 1, 8.0),), ([0.2, 1.0, 8],)],  # whole numbers written as floats
        wrong=[
            # The reviewers' case: a floor of 1 pages on one stray skip on a quiet night.
            Wrong(((0.201, 1, 1),), "quiet night"),
            Wrong(((0.214, 1, 1),), "quiet night"),
            Wrong(((0.2, 1, 2),), "quiet night"),
            # The lesson's printed rules, copied: two windows (the storm's second window is low), or floor 10.
            Wrong(((0.15, 2, 5),), "would page"),
            Wrong(((0.15, 2, 10),), "never fires"),
            Wrong(((0.15, 1, 10),), "would page"),  # the lesson's exercise answer: one stray in a window of 12
            Wrong(((0.2, 1, 5),), "would page"),  # exactly one skip in five: 20 % is not below 20 %
            Wrong(((0.2, 1, 14),), "floor above"),  # the storm's busiest window after 15:00 handles 13
            Wrong(((0.5, 1, 6),), "threshold above"),
            Wrong(((0.35, 1, 4),), "first two windows"),
            Wrong(((0.3, 2, 4),), "high windows in a row"),
            Wrong(((0.05, 1, 10),), "quiet day"),
            Wrong((SkipRateAlert(0.2, 1, 8),), "plain numbers"),  # an object cannot be carried out to grading
            Wrong(({"threshold": 0.2, "windows": 1},), "exactly the keys"),
            Wrong(((20, 1, 8),), "between 0 and 1"),  # a percentage for a share
            Wrong(((0.2, 1.5, 8),), "whole number"),
            Wrong((0.2,), "dict"),
            Wrong(((Fraction(1, 5), 1, 8),), "plain number"),  # right in value, not plain data to carry out
            Wrong(({"threshold": "0.2", "windows": 1, "min_handled": 8},), "between 0 and 1"),
            Wrong(((0.2, 0, 8),), "whole number"),
            Wrong(((0.2, 1, float("nan")),), "whole number"),
            Wrong(((True, 1, 8),), "between 0 and 1"),
            Wrong(((0.2, 1, 10**9),), "never fires"),
        ],
    ),
    "check_batch_order": Bank(
        right=[(sorted,), (functools.partial(sorted, reverse=True),), (lambda ids: sorted(set(ids)),),
               (sorter,), (lambda ids: sorted(ids, key=operator.methodcaller("encode")),),
               (lambda ids: tuple(sorted(ids)),),  # any sequence in a consistent order
               (lambda ids: sorted(ids, key=lambda message_id: (len(message_id), message_id)),),  # ties broken
               (lambda ids: iter(sorted(ids)),),  # an iterator of them
               (lambda ids: sorted(ids, key=lambda message_id: message_id.encode("utf-16-be")),),  # another total order
               (by_digest,)],  # a partial bound to a name, as a notebook cell binds it
        wrong=[
            Wrong((lambda ids: ids,), "deadlock"),  # the order the broker delivered them in
            Wrong((lambda ids: list(dict.fromkeys(ids)),), "deadlock"),  # duplicates dropped, still arrival order
            Wrong((lambda ids: sorted(ids, key=len),), "deadlock"),  # ties keep arrival order
            Wrong((lambda ids: sorted(ids, key=str.lower),), "differ only in case"),  # IDs differing in case tie
            Wrong((lambda ids: sorted(ids, key=lambda message_id: message_id[:2]),), "deadlock"),
            # A key that collides (a one-byte checksum): colliding IDs keep their arrival order.
            Wrong((lambda ids: sorted(ids, key=lambda message_id: zlib.crc32(message_id.encode()) & 0xFF),),
                  "deadlock"),
            Wrong((lambda ids: sorted(ids)[:-1],), "missing"),
            Wrong((lambda ids: [message_id.lower() for message_id in sorted(ids)],), "other IDs"),
            Wrong((lambda ids: 1 / 0,), "ZeroDivisionError"),
            Wrong((lambda ids: None,), "as a list, not None"),  # it returned None: no "raised"
            Wrong((lambda ids: [1, 2],), "as strings"),
            Wrong(("sorted",), "function"),
            # Consistent inside one process, not across consumers: hash() is seeded per process, id() is an address.
            Wrong((lambda ids: sorted(ids, key=hash),), "another process"),
            # the same order handed back as an iterator or a generator: read out, it is judged as the list is
            Wrong((hash_order_iterator,), "another process"),
            Wrong((hash_order_generator,), "another process"),
            Wrong((lambda ids: iter(sorted(ids, key=hash)),), "another process"),
            Wrong((lambda ids: sorted(ids, key=id),), "another process"),
            Wrong((lambda ids: sorted(ids, key=str.casefold),), "differ only in case"),
            Wrong((lambda ids: list(reversed(ids)),), "deadlock"),
            # A learner's read: hash() of a hash, or hash() folded small, is still seeded per process.
            Wrong((lambda ids: sorted(ids, key=lambda message_id: hash(message_id) % 1000),), "without talking"),
            Wrong((lambda ids: sorted(ids, key=lambda message_id: (hash(message_id), message_id)),), "another process"),
            # Shuffled the same way on every call (a fixed seed) is not one order for two batches.
            Wrong((lambda ids: __import__("random").Random(0).sample(ids, len(ids)),), "deadlock"),
            Wrong((lambda ids: sorted(ids, key=lambda message_id: message_id[-1]),), "deadlock"),  # ties again
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_batch_order_judges_other_batches_by_seed() -> None:
    """A right order passes on other data than the learner saw; a wrong one fails there too."""
    from idemlib.course.exercises import check_batch_order

    for seed in (1, 7, 99):
        assert check_batch_order(sorted, seed=seed)
        assert not check_batch_order(lambda ids: sorted(ids, key=str.lower), seed=seed)


def test_batch_order_hints_point_at_the_section_without_naming_the_order() -> None:
    """A hint names the misconception and points at section 4's one order; it never hands over the expression."""
    from idemlib.course.exercises import check_batch_order

    def by_hash(ids):
        return sorted(ids, key=hash)

    for wrong in (by_hash, lambda ids: ids, lambda ids: sorted(ids, key=str.lower)):
        message = check_batch_order(wrong).message
        assert "section 4" in message
        assert "sorted" not in message.lower() and "themselves" not in message and "alphabet" not in message.lower()
