"""Checks for lesson 07, What brokers call exactly-once.

The first check works its answer out by playing the broker's model; the second judges a
deduplication-ID function on many events and their retries, as SQS compares IDs.
"""

from __future__ import annotations

import functools
import numbers
import os
import re
import string
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from idemlib.brokers.models import SQS_FIFO_CONTENT
from idemlib.brokers.sources import SOURCES, run_broker
from idemlib.course.exercises.feedback import Feedback, blank, call_each, exercise, hint, right
from idemlib.course.exercises.restart import OTHER_MACHINES, in_fresh_process
from idemlib.messages import Message

__all__ = ["check_content_based", "check_dedup_id"]

M7F3 = Message.charge("m-7f3", 1042, 40)


def _name(item: Any) -> str:
    # "Dead-letter replay", "dead letter replay" and "dead-letter  replay." name the same source as the table's
    # row: case, spaces, punctuation and the kind of apostrophe are not what the exercise asks about.
    return " ".join(re.sub(r"[^0-9a-z]+", " ", re.sub(r"['\u2019]", "", str(item).lower())).split())


def _yes_or_no(value: Any) -> bool | None:
    """True, numpy's True and 1 read as True; False, numpy's False and 0 as False; anything else as None."""
    if isinstance(value, (bool, np.bool_, numbers.Integral)) and value in (0, 1):
        return bool(value)
    return None


def _chosen(answer: Any, items: dict[Any, Any], read: Callable[[Any], Any]) -> set[Any] | None | str:
    """The items an answer picks: a collection of them, or a mapping of every item to True/False.

    ``items`` maps each accepted spelling to its item, ``read`` turns one answer element
    into a spelling. Returns the set picked, None for an unreadable answer, or the
    message for a mapping that leaves items out.
    """
    if isinstance(answer, pd.Series) and pd.api.types.is_bool_dtype(answer):
        answer = answer.to_dict()  # a Series of True/False by item is the mapping answer, built with pandas
    if isinstance(answer, Mapping):
        picked, seen = set(), set()
        for key, value in answer.items():
            item, verdict = items.get(read(key)), _yes_or_no(value)
            if item is None or verdict is None:
                return None
            seen.add(item)
            if verdict:
                picked.add(item)
        missing = len(set(items.values()) - seen)
        return picked if not missing else f"Your mapping leaves {missing} out: give every one True or False."
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
        return None
    try:
        return {items[read(item)] for item in answer}
    except (KeyError, TypeError, ValueError):
        return None


@exercise
def check_content_based(answer: Any) -> Feedback:
    """Lesson 07: which duplicate sources reach the consumer on SQS FIFO with content-based deduplication."""
    if (missing := blank(answer, "a set of source names, as the table's rows spell them")) is not None:
        return missing
    chosen = _chosen(answer, {_name(source): source for source in SOURCES}, _name)
    if isinstance(chosen, str):
        return hint(chosen)
    if chosen is None:
        return hint(f"Answer with a set (or list) of source names, each one of {list(SOURCES)}, or a mapping of "
                    "every source to True (reaches the consumer) or False.")
    runs = run_broker(SQS_FIFO_CONTENT.open, M7F3)
    reached = set(runs.loc[runs["charges without inbox"] > 1, "source"])
    if chosen == reached:
        return right("the body is the key, so the relay's copy with its new ID is caught inside the five minutes; "
                     "what comes after the window, and every redelivery on the way out, still reaches the consumer.")
    hints = []
    if "relay republish with a new ID" in chosen:
        hints.append("With content-based deduplication and no deduplication ID sent, SQS computes the key from the "
                     "message: from which part, and does the relay's second send get the same key within the interval?")
    if "ack lost on the way" in chosen:
        hints.append("Look at the model table's \"ack answered\" column: does an SQS consumer learn that its delete "
                     "(its ack) did not arrive, while it can still send it again?")
    if chosen - reached - {"relay republish with a new ID", "ack lost on the way"}:
        hints.append("Some sources you listed are stopped by the broker: which sends repeat the same body inside "
                     "the interval?")
    if (reached - chosen) & {"application resend after the window", "dead-letter replay"}:
        hints.append("You left out a send of the same bytes that still gets through: same bytes, but when? Is the "
                     "body the key for ever, or only inside the deduplication interval (the model table gives its "
                     "length)?")
    if (reached - chosen) - {"application resend after the window", "dead-letter replay"}:
        hints.append("Some sources you left out get through: the window only works on the way in. What happens to "
                     "a message the broker already delivered?")
    return hint(" ".join(hints))


PRODUCERS = ("billing-EU", "billing-eu", "billing-1", "billing-11", "refunds", "Refunds", "billing-US-2")
"""The producers of exercise 2's events: names that differ only in case, and names that end in digits."""
EVENTS = 150_000
"""How many different events the check sends: enough that a short digest of a right key collides."""
RETRIES = 30_000
"""How many of them are sent again, each re-serialised by the producer's retry."""
ID_MAX_LENGTH = 128
"""SQS's longest MessageDeduplicationId (``sqs_dedup_id_format`` in ``data/facts.csv``)."""
_ALLOWED = re.compile(f"[{re.escape(string.ascii_letters + string.digits + string.punctuation)}]{{1,{ID_MAX_LENGTH}}}")


def sample_events(seed: int = 7, count: int = 6) -> list[dict[str, Any]]:
    """A few of exercise 2's events, as the producer hands them to the SQS client (the same kind the check sends)."""
    return [dict(event) for event in _events(seed, count)[0]]


@functools.lru_cache(maxsize=4)
def _events(seed: int, count: int, retries: int = 0) -> tuple[list[dict[str, Any]], list[tuple[int, dict[str, Any]]]]:
    """``count`` different events and ``retries`` re-sends of some of them (index of the original, the re-send).

    An event is a payment from one producer, which numbers its own events (``seq``). The
    same order can be paid twice with the same amount: two events. A retry carries the
    same producer and ``seq``, a new ``sent_at`` and ``attempt``, and its fields in another order.
    """
    rng = np.random.default_rng(seed)
    producer_at = rng.integers(len(PRODUCERS), size=count)
    steps = rng.choice((1, 1, 1, 9), size=count)  # a producer's numbers rise, sometimes with a gap
    seqs = np.empty(count, dtype=np.int64)
    for producer in range(len(PRODUCERS)):
        mine = producer_at == producer
        seqs[mine] = np.cumsum(steps[mine])
    orders, amounts = rng.integers(1000, 1300, size=count), rng.choice((12, 25, 40), size=count)
    # Sent in the last hour of a day, so that some retries, a few minutes later, carry the next day's date.
    sent = rng.integers(3600, size=count)
    events = [{"producer": PRODUCERS[p], "seq": int(q), "order_id": int(o), "amount": int(a),
               "sent_at": _timestamp(int(t)), "attempt": 1}
              for p, q, o, a, t in zip(producer_at.tolist(), seqs.tolist(), orders.tolist(), amounts.tolist(),
                                       sent.tolist())]
    resent = []
    for index, order, attempt, later in zip(rng.choice(count, size=retries, replace=False).tolist(),
                                            rng.permuted(np.tile(np.arange(6), (retries, 1)), axis=1).tolist(),
                                            rng.integers(2, 6, size=retries).tolist(),
                                            rng.integers(1, 300, size=retries).tolist()):
        fields = list(events[index].items())
        again = dict(fields[k] for k in order)  # the retry serialises the event again, its fields in another order
        again["attempt"] = attempt
        again["sent_at"] = _timestamp(int(sent[index]) + later)  # inside SQS's 5-minute interval, where it counts
        resent.append((index, again))
    return events, resent


def _timestamp(seconds_after_23h: int) -> str:
    """The ISO time ``seconds_after_23h`` seconds after 23:00 on 2026-12-01 (past midnight, the next day's date)."""
    return (_EVENING + timedelta(seconds=seconds_after_23h)).strftime("%Y-%m-%dT%H:%M:%SZ")


_EVENING = datetime(2026, 12, 1, 23, 0, 0)


MIN_ID_SPACE = 1e13
"""Fewer possible IDs than this, and the birthday bound gives 150,000 events a collision with odds above 1 in 1,000."""


def _id_space(ids: list[str]) -> float:
    """How many IDs the answer can make at most, judged from its output: its characters, to the power of its length.

    An ID that names the event grows with the producer's name and number, so its space is vast;
    a short digest (a CRC-32, eight hex digits) stays small whatever it is fed. Text every ID
    shares at its start or end (``"id-"``, base64's ``"=="``) adds no values, so it is not counted.
    """
    varying = _without_shared_ends(ids)
    alphabet, longest = len(set("".join(varying))), max(map(len, varying))
    return float(alphabet) ** longest if alphabet > 1 else float(longest)


def _without_shared_ends(ids: list[str]) -> list[str]:
    """The IDs with the prefix and the suffix that all of them share cut off (an ID left empty stays empty)."""
    start = len(os.path.commonprefix(ids))
    end = len(os.path.commonprefix([made[start:][::-1] for made in ids]))
    return [made[start:len(made) - end] for made in ids]


def _builtin_hashes(event: dict[str, Any]) -> set[str]:
    """Python's built-in hash() of the usual spellings of an event's identity, written out as an ID would be.

    hash() of a str is seeded per process, so an ID made from it differs after a restart;
    only such an ID equals one of these, so a right answer is never taken for one.
    """
    producer, seq = event["producer"], event["seq"]
    spellings: list[Any] = [(producer, seq), (seq, producer), (producer, str(seq)), f"{producer}{seq}",
                            *(f"{producer}{sep}{seq}" for sep in ":-|/_# .")]
    made = set()
    for spelling in spellings:
        value = hash(spelling)
        made |= {str(value), str(abs(value)), hex(value), format(value, "x"), str(value % 2**64),
                 format(value % 2**64, "x"), format(value % 2**64, "016x")}
    return made


RESTART_SAMPLE = 1_000
"""Every this many sends, the check makes the ID again in a fresh process, as a restarted producer would."""


def _restarted_producer(answer: Any, sent: list[dict[str, Any]], ids: list[str]) -> str | None:
    """Why a restarted producer (a fresh process on another machine, later) would give a sample of the sends other
    IDs than this process did, or None when it gives each the same one.

    A retry after a restart must carry the first send's ID, so an ID may depend only on the event:
    not on Python's per-process hash() seed, a UUID or namespace made at start-up, the process ID or its start time.
    """
    sample = list(range(0, len(sent), RESTART_SAMPLE))
    hash_seed = 2 if os.environ.get("PYTHONHASHSEED") == "1" else 1  # another seed than this process's
    try:
        there = in_fresh_process(answer, [(dict(sent[index]),) for index in sample], OTHER_MACHINES[0], hash_seed)
    except Exception as error:  # noqa: BLE001 - any failure of the rerun is the learner's to fix, as a hint
        return (f"The check makes your IDs again in a fresh Python process, as a restarted producer does, and that "
                f"failed ({error}). Import what your function uses at the top of its cell.")
    if len(there) == len(sample) and all(ids[index] == made for index, made in zip(sample, there)):
        return None
    if all(made in _builtin_hashes(event) for made, event in zip(ids[:3], sent)):
        return ("Your IDs are Python's built-in hash() of the event's identity. Within this one process they "
                "agree, but Python seeds its string hash anew in every process (PYTHONHASHSEED), so the retry "
                "a restarted producer sends gets another ID. Which functions give the same digest everywhere?")
    return ("A restarted producer (a fresh process, on another machine, later) made other IDs for the same events "
            "than this process did, so a retry it sends after the restart is not recognised as a duplicate. An ID "
            "that takes anything from the running process (Python's hash(), a UUID or namespace made at start-up, "
            "the process ID, the start time) cannot be rebuilt. Which fields of the event alone name it?")


def _why_same(first: dict[str, Any], second: dict[str, Any]) -> str:
    """What two different events that got one ID have in common, named as the misconception it shows."""
    if first["producer"].lower() == second["producer"].lower() and first["producer"] != second["producer"]:
        return (f"producers {first['producer']!r} and {second['producer']!r} are two producers, and IDs are compared "
                "exactly (case included); does your ID keep the name as it is?")
    if (first["order_id"], first["amount"]) == (second["order_id"], second["amount"]):
        return ("the customer paid the same order the same amount twice: two events, two charges owed. Which fields "
                "say which event this is, rather than what it pays?")
    if first["seq"] != second["seq"] and f"{first['producer']}{first['seq']}" == f"{second['producer']}{second['seq']}":
        return (f"{first['producer']!r} event {first['seq']} and {second['producer']!r} event {second['seq']} are two "
                "events; can two different (producer, seq) pairs run together into the same text in your ID?")
    if first["producer"] != second["producer"] and first["seq"] == second["seq"]:
        return (f"{first['producer']!r} and {second['producer']!r} both sent an event numbered {first['seq']}: each "
                "producer counts its own events, so is the number alone an identity?")
    return (f"{EVENTS:,} different events cannot all have different IDs if the ID has too few bits: how many "
            "values can your ID take, and what does the birthday bound say about that many events?")


@exercise
def check_dedup_id(answer: Any, *, seed: int = 7) -> Feedback:
    """Lesson 07: a MessageDeduplicationId function: one ID per event across its retries, a new one per event.

    The check sends :data:`EVENTS` different events from several producers and
    :data:`RETRIES` re-serialised retries of them, and judges the IDs as SQS would
    (compared exactly, at most 128 characters of letters, digits and punctuation). An ID
    must also mean the same in every producer process (not Python's seeded ``hash()``) and
    come from a space large enough for that many events (:data:`MIN_ID_SPACE`).
    ``seed`` picks other events of the same kind; a right answer passes for every seed.
    """
    if (missing := blank(answer, "a function that takes one event (a dict) and returns its deduplication ID")) is not None:
        return missing
    if not callable(answer):
        return hint(f"Answer with a function of one event, such as lambda event: ..., not a {type(answer).__name__}.")
    events, resent = _events(seed, EVENTS, RETRIES)
    ids: list[str] = []
    sent = [*events, *(again for _, again in resent)]
    try:
        # Copies: an answer that changes its event changes nothing here.
        made_ids = call_each(answer, [(dict(event),) for event in sent])
    except Exception as error:  # the learner's code: any failure becomes a hint, never a crash
        return hint(f"Your function raised {type(error).__name__}: {error} on one of the events, such as {sent[0]}.")
    for event, made in zip(sent, made_ids):
        if not isinstance(made, str):
            return hint(f"SQS takes the deduplication ID as a string; your function returned a "
                        f"{type(made).__name__} ({made!r:.60}) for {event}.")
        if not _ALLOWED.fullmatch(made):
            return hint(f"SQS refuses {made!r:.80}: an ID is 1 to {ID_MAX_LENGTH} characters of letters, digits and "
                        "punctuation (no spaces). A hash's hex digest fits; a whole event as text does not.")
        ids.append(made)
    for (index, _again), made in zip(resent, ids[EVENTS:]):
        if made != ids[index]:
            return hint(f"A retry got another ID than its first send ({ids[index]!r:.50} then {made!r:.50}): the retry "
                        "is the same event serialised again, with a new sent_at and attempt and its fields in another "
                        "order. Content-based deduplication fails this way because it hashes the body as sent; which "
                        "fields stay the same across retries?")
    first_with: dict[str, int] = {}
    for index, made in enumerate(ids[:EVENTS]):
        if (earlier := first_with.setdefault(made, index)) != index:
            return hint(f"Two different events got the same ID {made!r:.50}, so SQS would drop the second as a "
                        f"duplicate and its payment would never be made: {_why_same(events[earlier], events[index])}")
    if (restarted := _restarted_producer(answer, sent, ids)) is not None:
        return hint(restarted)
    if (values := _id_space(ids)) < MIN_ID_SPACE:
        varying = _without_shared_ends(ids)
        return hint(f"Besides what every ID shares at its start or end, your IDs use {len(set(''.join(varying)))} "
                    f"different characters and at most {max(map(len, varying))} of them: about {values:.1e} possible "
                    f"IDs. No two of these {EVENTS:,} events collided, but "
                    "that is luck or structure in this data: how many values can your ID take, and what does the "
                    "birthday bound say about that many events inside one deduplication interval?")
    return right(f"{EVENTS:,} events from {len(PRODUCERS)} producers got {EVENTS:,} different IDs, and each of "
                 f"{RETRIES:,} re-serialised retries got its event's ID: the ID names the event (its producer and "
                 "that producer's number), not the bytes that carried it.")
