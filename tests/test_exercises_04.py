"""Lesson 04's exercise: the idempotency key of one call a consumer makes while handling one message."""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import socket
import time
import uuid
import zlib
from hashlib import sha256
from urllib.parse import quote
from uuid import NAMESPACE_URL, uuid5

from exercise_bank import Bank, Wrong, bank_tests

from idemlib.provider import key_of_call


def joined(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}"  # the lesson's m-7f3:charge with the consumer's name in front


def _clean(text):
    return text  # a helper defined beside it, as in a notebook (it keeps the ID as it came)


def with_a_helper(consumer, message_id, call):
    return "/".join(_clean(part) for part in (consumer, message_id, call))


def call_first(consumer, message_id, call):
    return " ".join([call, message_id, consumer])  # another order, a space between


def digest_of_all(consumer, message_id, call):
    return sha256(json.dumps([consumer, message_id, call]).encode()).hexdigest()  # 64 characters, unambiguous


def joined_with(separator, consumer, message_id, call):
    return separator.join((consumer, message_id, call))


partial_key = functools.partial(joined_with, "|")  # functools.partial, bound to a name
formatted = "{}:{}:{}".format  # a bound method of a string


class KeyMaker:
    def __init__(self, separator=":"):
        self.separator = separator

    def __call__(self, consumer, message_id, call):
        return self.separator.join((consumer, message_id, call))


key_object = KeyMaker("#")  # a callable object, bound to a name
made_with_a_startup_uuid = KeyMaker(f":{uuid.uuid4().hex[:8]}:")  # run again, it gets another UUID


def key_maker(separator):
    def key(consumer, message_id, call):
        return f"{consumer}{separator}{message_id}{separator}{call}"
    return key


made_by_a_factory = key_maker(":")  # a right answer: the restart runs this statement again
factory_with_a_startup_uuid = key_maker(f":{uuid.uuid4().hex[:8]}:")


PAYMENTS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")  # a namespace written in the source


def namespaced_uuid5(consumer, message_id, call):
    return str(uuid.uuid5(PAYMENTS, f"{consumer}:{message_id}:{call}"))


def uuid5_from_a_module_constant(consumer, message_id, call):
    return str(uuid5(NAMESPACE_URL, f"urn:{consumer}:{message_id}:{call}"))


def length_prefixed(consumer, message_id, call):
    return f"{len(consumer)}.{consumer}{len(message_id)}.{message_id}{call}"  # no separator, but unambiguous


def colons_doubled(consumer, message_id, call):
    return f"{consumer}:{message_id.replace(':', '::')}:{call}"  # escaping: a ':' of the ID can no longer end a part


def url_quoted(consumer, message_id, call):
    return ":".join(quote(part, safe="") for part in (consumer, message_id, call))


def as_json(consumer, message_id, call):
    return json.dumps([consumer, message_id, call])  # the unambiguous encoding, readable


def message_first(consumer, message_id, call):
    return f"{message_id}:{consumer}:{call}"  # the two names of its own still mark where the ID ends


def dotted(consumer, message_id, call):
    return f"{consumer}.{message_id}.{call}"  # the services' names hold no '.', so it marks where they end


def spaced_pipes(consumer, message_id, call):
    return " | ".join((consumer, message_id, call))


# Wrong: the review's forms first.
def dashed(consumer, message_id, call):
    return f"{consumer}-{message_id}-{call}"  # payments-eu + m-1 and payments + eu-m-1 read the same


def no_consumer(consumer, message_id, call):
    return f"{message_id}:{call}"  # the lesson's two-part key: two services share m-7f3:charge


def no_separator(consumer, message_id, call):
    return f"{consumer}{message_id}{call}"


def digest_of_glued(consumer, message_id, call):
    return sha256(f"{consumer}{message_id}{call}".encode()).hexdigest()  # long, but of an ambiguous text


def colons_dropped(consumer, message_id, call):
    return f"{consumer}:{message_id.replace(':', '')}:{call}"  # "so that my separator stays unique"


def colons_replaced(consumer, message_id, call):
    return f"{consumer}:{message_id.replace(':', '_')}:{call}"


def separator_removed(consumer, message_id, call):
    return f"{consumer}|{message_id.replace('|', '')}|{call}"


def lowered(consumer, message_id, call):
    return f"{consumer}:{message_id.lower()}:{call}"


def trimmed(consumer, message_id, call):
    return f"{consumer}:{message_id.strip()}:{call}"


def sha_32_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:8]


def crc32_key(consumer, message_id, call):
    return str(zlib.crc32(f"{consumer}|{message_id}|{call}".encode()))


def sha_16_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:4]


def upper(consumer, message_id, call):
    return f"{consumer}:{message_id.upper()}:{call}"


def digest_of_the_id(consumer, message_id, call):
    return hashlib.sha256(message_id.encode()).hexdigest()


def builtin_hash(consumer, message_id, call):
    return str(hash(f"{consumer}:{message_id}:{call}"))


def with_the_pid(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{os.getpid()}"


def fresh_uuid(consumer, message_id, call):
    return str(uuid.uuid4())


def the_call_only(consumer, message_id, call):
    return call


def with_the_date(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{datetime.date.today()}"


def with_the_hour(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{time.strftime('%Y%m%d%H')}"


def with_the_host(consumer, message_id, call):
    return f"{socket.gethostname()}:{message_id}:{call}"


def cut_to_twelve(consumer, message_id, call):
    return f"{consumer}:{message_id[:12]}:{call}"  # enough for m-7f3, not for a 200-character ID


def call_initial(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call[0]}"  # charge and capture share a c


def call_cut_to_two(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call[:2]}"  # charge and charge-2 share "ch"


def consumer_initial(consumer, message_id, call):
    return f"{consumer[0]}:{message_id}:{call}"  # payments and payments2 share a p


STARTED = uuid.uuid4()  # made once at start-up: the same all day, another one after a restart


def startup_uuid(consumer, message_id, call):
    return f"{STARTED}:{consumer}:{message_id}:{call}"


REMEMBERED = {}


def remembered_uuid(consumer, message_id, call):
    return REMEMBERED.setdefault((consumer, message_id, call), str(uuid.uuid4()))  # a memory a restart empties


def five_minute_bucket(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{int(time.time() // 300)}"


def month_bucket(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{datetime.date.today():%Y-%m}"


def hardware_address(consumer, message_id, call):
    return f"{uuid.getnode():x}:{consumer}:{message_id}:{call}"


def etc_hostname(consumer, message_id, call):
    with open("/etc/hostname") as file:
        return f"{file.read().strip()}:{consumer}:{message_id}:{call}"


def padded(consumer, message_id, call):
    return f"{consumer:<100}:{message_id:<200}:{call}"  # fixed-width columns: past Stripe's 255 characters


def as_a_uuid_object(consumer, message_id, call):
    return uuid.uuid5(PAYMENTS, f"{consumer}:{message_id}:{call}")  # right value, but not a string


def two_arguments(message_id, call):
    return f"{message_id}:{call}"  # last lesson's form


def id_glued_to_the_call(consumer, message_id, call):
    return f"{consumer}:{message_id}{call}"  # m-xrefund- + fee and m-x + refund-fee read the same


def digest_of_the_id_glued_to_the_call(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}{call}".encode()).hexdigest()


def default_call_left_out(consumer, message_id, call):
    # "backward compatible" with keys sent before a second call existed: m-x:fee's charge reads as m-x's fee
    return f"{consumer}:{message_id}" if call == "charge" else f"{consumer}:{message_id}:{call}"


unbound_startup_object = KeyMaker(f":{uuid.uuid4().hex[:8]}:")


# Digests, cuts and escapes the day judges by its width, its long IDs and its URL-encoded ones.
def id_crc32_names_kept(consumer, message_id, call):
    return f"{consumer}:{zlib.crc32(message_id.encode()):08x}:{call}"  # 32 bits per service and call: ~19k keys each


def id_sha_32_bits_names_kept(consumer, message_id, call):
    return f"{consumer}:{sha256(message_id.encode()).hexdigest()[:8]}:{call}"


def sha_40_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:10]  # 4 % odds of a collision a day


def sha_44_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:11]


def sha_52_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:13]  # 1 in 100,000: still above the bar


def sha_56_bits(consumer, message_id, call):
    return sha256(f"{consumer}:{message_id}:{call}".encode()).hexdigest()[:14]  # the narrowest the check takes


def long_ids_crc32(consumer, message_id, call):
    return f"{consumer}:{message_id if len(message_id) <= 64 else zlib.crc32(message_id.encode())}:{call}"


def long_ids_sha256(consumer, message_id, call):
    return f"{consumer}:{message_id if len(message_id) <= 64 else sha256(message_id.encode()).hexdigest()}:{call}"


def long_ids_sha256_marked(consumer, message_id, call):
    short = len(message_id) <= 100
    return f"{consumer}:{message_id if short else '#' + sha256(message_id.encode()).hexdigest()}:{call}"


def long_ids_hashed(consumer, message_id, call):
    return f"{consumer}:{message_id if len(message_id) <= 64 else hash(message_id)}:{call}"  # the 40 rare calls


def tail_kept(consumer, message_id, call):
    return f"{consumer}:{message_id[-64:]}:{call}"  # "a long ID's counter is at its end": not every producer's


def head_and_tail_kept(consumer, message_id, call):
    return f"{consumer}:{message_id[:20] + message_id[-20:]}:{call}"


def head_and_tail_with_an_ellipsis(consumer, message_id, call):
    return f"{consumer}:{message_id if len(message_id) <= 80 else message_id[:40] + '...' + message_id[-40:]}:{call}"


def colon_escaped_alone(consumer, message_id, call):
    return f"{consumer}:{message_id.replace(':', '%3A')}:{call}"  # but a '%' of the ID stays as it came


def consumer_glued_to_the_call(consumer, message_id, call):
    return f"{consumer}{call}:{message_id}"  # payments + 24h-hold reads as payments2 + 4h-hold


def monotonic_day(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}:{int(time.monotonic() // 86400)}"  # the machine's uptime in days


def with_the_lessons_helper(consumer, message_id, call):
    return f"{consumer}:{key_of_call(message_id, call)}"  # idemlib.provider imports pandas in the fresh process


SEPARATOR = ":"
Key = str


def with_a_default_separator(consumer, message_id, call, sep=SEPARATOR):
    return sep.join((consumer, message_id, call))  # SEPARATOR is read by the def line, not the body


def with_an_annotation(consumer: str, message_id: str, call: str) -> Key:
    return f"{consumer}:{message_id}:{call}"


@functools.lru_cache(maxsize=None)  # noqa: UP033 - the learner's form: a decorator called with arguments
def cached_key(consumer, message_id, call):
    return f"{consumer}:{message_id}:{call}"  # a decorated def, rebuilt with its decorator


class Joiner:
    def __init__(self, separator):
        self.separator = separator

    def key(self, consumer, message_id, call):
        return self.separator.join((consumer, message_id, call))


joiner = Joiner(":")
bound_method = joiner.key  # a bound method of a class written here


class Replayed:
    """A key remembered per call, with methods named like the grader's own: they answered the check's batched
    calls and its restart from this object's memory, so a fresh UUID per call passed as a key a restart rebuilds."""

    def __init__(self):
        self.memo = {}

    def __call__(self, consumer, message_id, call):
        return self.memo.setdefault((consumer, message_id, call), str(uuid.uuid4()))

    def call_each(self, arguments):
        return [self(*args) for args in arguments]

    def in_fresh_process(self, arguments, machine, seed):
        return [self(*args) for args in arguments]


replayed = Replayed()


def no_colons_please(consumer, message_id, call):
    if ":" in message_id:  # fine on the first call, raises on a later one
        raise ValueError("no colons please")
    return f"{consumer}|{message_id}|{call}"


BANKS = {
    "check_key_function": Bank(
        right=[(joined,), (call_first,), (digest_of_all,), (lambda c, m, x: f"{c}:{m}:{x}",), (with_a_helper,),
               (namespaced_uuid5,), (uuid5_from_a_module_constant,), (made_by_a_factory,), (partial_key,),
               (formatted,), ("{}/{}/{}".format,), (key_object,), (length_prefixed,), (colons_doubled,), (url_quoted,),
               (as_json,), (message_first,), (dotted,), (spaced_pipes,), ("{}_{}_{}".format,),
               (sha_56_bits,), (long_ids_sha256,), (long_ids_sha256_marked,),
               (with_the_lessons_helper,), (with_a_default_separator,), (with_an_annotation,), (cached_key,),
               (bound_method,)],
        wrong=[
            Wrong((no_consumer,), "besides the message"),
            Wrong((no_separator,), "nothing between"),
            Wrong((dashed,), "own names"),
            Wrong(("{}-{}-{}".format,), "own names"),
            Wrong((digest_of_glued,), "nothing between"),
            Wrong((lowered,), "letter case"),
            Wrong((upper,), "letter case"),
            Wrong((colons_dropped,), "punctuation included"),
            Wrong((colons_replaced,), "punctuation included"),
            Wrong((separator_removed,), "punctuation included"),
            Wrong((trimmed,), "space is part"),
            Wrong((sha_32_bits,), "about 32 bits"),
            Wrong((crc32_key,), "about 32 bits"),
            Wrong((sha_16_bits,), "about 16 bits"),
            Wrong((digest_of_the_id,), "besides the message"),
            Wrong((builtin_hash,), "fresh process"),
            Wrong((with_the_pid,), "fresh process"),
            Wrong((fresh_uuid,), "first attempt"),
            Wrong((the_call_only,), "besides the message"),
            Wrong((with_the_date,), "clock"),
            Wrong((with_the_hour,), "clock"),
            Wrong((five_minute_bucket,), "clock"),
            Wrong((month_bucket,), "clock"),
            Wrong((startup_uuid,), "start-up"),
            Wrong((remembered_uuid,), "starts empty"),
            Wrong((with_the_host,), "besides the message"),
            Wrong((hardware_address,), "host name"),
            Wrong((etc_hostname,), "host name"),
            Wrong((cut_to_twelve,), "cut short"),
            Wrong((id_crc32_names_kept,), "at least 56 bits"),
            Wrong((id_sha_32_bits_names_kept,), "about 32 bits"),
            Wrong((sha_40_bits,), "about 40 bits"),
            Wrong((sha_44_bits,), "at least 56 bits"),
            Wrong((sha_52_bits,), "at least 56 bits"),
            Wrong((long_ids_crc32,), "about 32 bits"),
            Wrong((long_ids_hashed,), "fresh process"),
            Wrong((tail_kept,), "cut short"),
            Wrong((head_and_tail_kept,), "cut short"),
            Wrong((head_and_tail_with_an_ellipsis,), "cut short"),
            Wrong((colon_escaped_alone,), "its own escape character"),
            Wrong((consumer_glued_to_the_call,), "nothing between"),
            Wrong((call_initial,), "whole name of the call"),
            Wrong((call_cut_to_two,), "whole name of the call"),
            Wrong((consumer_initial,), "besides the message"),
            Wrong((made_with_a_startup_uuid,), "fresh process"),
            Wrong((factory_with_a_startup_uuid,), "fresh process"),
            Wrong((unbound_startup_object,), "fresh process"),
            Wrong((padded,), "255"),
            Wrong((as_a_uuid_object,), "string"),
            Wrong((two_arguments,), "three arguments"),
            Wrong(("payments:m-7f3:charge",), "function"),
            Wrong((id_glued_to_the_call,), "nothing between"),
            Wrong((digest_of_the_id_glued_to_the_call,), "nothing between"),
            Wrong((default_call_left_out,), "default one too"),
            Wrong((replayed,), "starts empty"),
            Wrong((no_colons_please,), "ValueError: no colons please"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
def notebook_function(cells, name):
    """A function as a notebook defines it: cells run one after another in one namespace, kept in ``_ih``.

    The namespace is a module's, as IPython's user namespace is the ``__main__`` module's."""
    import linecache
    import types

    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["_ih"] = ["", *cells]
    NOTEBOOK_MODULES.append(module)
    for number, cell in enumerate(cells, start=1):
        filename = f"<notebook cell {number}>"  # IPython registers each cell's text the same way
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        exec(compile(cell, filename, "exec"), namespace)
    return namespace[name]


NOTEBOOK_MODULES = []  # the modules notebook_function made, for the test to install as __main__

NOTEBOOK = ["import uuid", 'NS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")\nSEEN = {}\nPREFIX = "old"',
            'PREFIX = "pay"\ndef call_key(s, m, c):\n    return str(uuid.uuid5(NS, f"{PREFIX}:{s}:{m}:{c}"))',
            "def remembered(s, m, c):\n    return SEEN.setdefault((s, m, c), str(uuid.uuid4()))\n"
            "for n in range(3):\n    SEEN[n] = n",
            "import functools\ndef glue(sep, s, m, c):\n    return sep.join((s, m, c))\nkey = functools.partial(glue, '|')",
            "class Maker:\n    def __init__(self):\n        self.started = str(uuid.uuid4())\n    def __call__(self, s, m, c):\n"
            "        return f'{self.started}:{s}:{m}:{c}'\nmaker = Maker()"]


def test_in_a_notebook_the_restart_reruns_the_cells_that_define_what_the_key_reads(monkeypatch):
    import sys

    from idemlib.course.exercises import check_key_function

    assert check_key_function(notebook_function(NOTEBOOK, "call_key"))  # the namespace and the last PREFIX come back
    refused = check_key_function(notebook_function(NOTEBOOK, "remembered"))  # SEEN comes back empty
    assert not refused and "starts empty" in refused.message
    assert check_key_function(notebook_function(NOTEBOOK, "key"))  # a partial of a cell's function
    maker = notebook_function(NOTEBOOK, "maker")
    monkeypatch.setitem(sys.modules, "__main__", NOTEBOOK_MODULES[-1])  # as in a kernel: the notebook is __main__
    refused = check_key_function(maker)  # an object whose state a restart makes anew
    assert not refused and "fresh process" in refused.message


def test_the_day_of_calls_holds_the_pairs_production_meets_and_differs_by_seed():
    from idemlib.course.exercises.lesson_04 import DAY_OF_CALLS, provider_calls

    calls = provider_calls()
    assert len(calls) == len(set(calls)) == DAY_OF_CALLS >= 100_000
    assert {("payments", "m-7f3", call) for call in ("charge", "fee", "capture", "charge-2")} <= set(calls)
    messages = {message for _, message, _ in calls}
    assert len({m.lower() for m in messages}) < len(messages)  # IDs that differ only in letter case
    assert len({m.strip() for m in messages}) < len(messages)  # ... only in a space
    assert len({m.replace(":", "") for m in messages}) < len(messages)  # ... only in their punctuation
    assert provider_calls(seed=9) != calls


def test_keys_that_glue_the_id_to_the_call_or_leave_out_the_default_call_are_refused_with_their_hint():
    from idemlib.course.exercises import check_key_function
    glued = check_key_function(lambda c, m, k: f"{c}:{m}{k}")  # m-xrefund- + fee reads as m-x + refund-fee
    assert not glued and "nothing between" in glued.message
    digest = check_key_function(lambda c, m, k: sha256(f"{c}:{m}{k}".encode()).hexdigest())
    assert not digest and "nothing between" in digest.message
    default_left_out = check_key_function(lambda c, m, k: f"{c}:{m}" if k == "charge" else f"{c}:{m}:{k}")
    assert not default_left_out and "default one too" in default_left_out.message


def test_a_day_bucket_of_the_monotonic_clock_is_refused():
    from idemlib.course.exercises import check_key_function

    refused = check_key_function(monotonic_day)
    assert not refused and "fresh process" in refused.message


def test_the_day_judges_a_digest_by_its_width_and_a_cut_by_the_long_ids_that_differ_anywhere():
    from idemlib.course.exercises.digest_width import key_space_bits
    from idemlib.course.exercises.lesson_04 import BUSY, LONG_IDS, LONGEST, MIN_DIGEST_BITS, provider_calls, telling_pairs

    calls = provider_calls()
    busy = [message_id for consumer, message_id, call in calls if (consumer, call) == BUSY and len(message_id) == LONGEST]
    assert MIN_DIGEST_BITS == 56 and len(busy) > LONG_IDS  # the path IDs, and the long pairs that differ at one place
    assert key_space_bits(busy) > 500  # kept whole, the IDs themselves tell far more apart than a digest must
    cuts = telling_pairs(calls)[3]
    for cut in (slice(None, 199), slice(-64, None), slice(1, None)):  # the start, the end, all but the first
        assert any(one[1][cut] == other[1][cut] for one, other in cuts)
    middle = [(one, other) for one, other in cuts if len(one[1]) == LONGEST]
    assert any(one[1][:20] + one[1][-20:] == other[1][:20] + other[1][-20:] for one, other in middle)


def test_a_raising_answer_is_told_which_call_raised_and_no_advice_about_its_arguments():
    from idemlib.course.exercises import check_key_function
    from idemlib.course.exercises.lesson_04 import provider_calls

    said = check_key_function(no_colons_please).message
    first = next(call for call in provider_calls() if ":" in call[1])  # the first call it raises on
    assert f"Calling it as call_key{first!r} failed (ValueError: no colons please)." in said  # it named m-7f3's
    assert "three arguments" not in said


def test_a_function_that_never_returns_is_given_up_on_with_the_call_it_was_on(monkeypatch):
    from idemlib.course.exercises import check_key_function, feedback

    monkeypatch.setattr(feedback, "CALL_SECONDS", 1.0)

    def loops_on_colons(consumer, message_id, call):
        while ":" in message_id:
            message_id.replace(":", "_")  # the result is dropped: the loop never ends
        return f"{consumer}:{message_id}:{call}"

    from idemlib.course.exercises.lesson_04 import provider_calls

    refused = check_key_function(loops_on_colons)  # it hung the notebook, with no output
    first = next(call for call in provider_calls() if ":" in call[1])
    assert not refused and f"call_key{first!r} failed (TimeoutError: it did not return within 1 s)" in refused.message
