"""Lesson 04's exercise: the idempotency key of one call of one message."""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import time
import uuid
import zlib
from hashlib import sha256
from uuid import NAMESPACE_URL, uuid5

from exercise_bank import Bank, Wrong, bank_tests


def joined(message_id, call):
    return f"{message_id}:{call}"  # the lesson's form, m-7f3:charge


def _clean(text):
    return text.strip()


def with_a_helper(message_id, call):
    return f"{_clean(message_id)}:{_clean(call)}"  # a helper defined beside it, as in a notebook


def call_first(message_id, call):
    return "/".join([call, message_id])


def digest_of_both(message_id, call):
    return sha256(f"{message_id}:{call}".encode()).hexdigest()


def crc_of_both(message_id, call):
    return str(zlib.crc32(f"{message_id}|{call}".encode()))


def upper(message_id, call):
    return message_id.upper()


def digest_of_the_id(message_id, call):
    return hashlib.sha256(message_id.encode()).hexdigest()


def builtin_hash(message_id, call):
    return str(hash(f"{message_id}:{call}"))


def with_the_pid(message_id, call):
    return f"{message_id}:{call}:{os.getpid()}"


def fresh_uuid(message_id, call):
    return str(uuid.uuid4())


def the_call_only(message_id, call):
    return call


def with_the_date(message_id, call):
    return f"{message_id}:{call}:{datetime.date.today()}"  # another key tomorrow, or on a machine in another zone


def with_the_hour(message_id, call):
    return f"{message_id}:{call}:{time.strftime('%Y%m%d%H')}"


def with_the_host(message_id, call):
    return f"{socket.gethostname()}:{message_id}:{call}"  # another key when another instance takes the redelivery


def short_digest(message_id, call):
    return sha256(f"{message_id}:{call}".encode()).hexdigest()[:2]


def cut_short(message_id, call):
    return f"{message_id[:3]}:{call}"


def call_initial(message_id, call):
    return f"{message_id}:{call[0]}"  # charge and capture share a c


def cut_to_twelve(message_id, call):
    return f"{message_id[:12]}:{call}"  # enough for m-7f3, not for a 200-character ID


PAYMENTS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")  # a namespace written in the source


def namespaced_uuid5(message_id, call):
    return str(uuid.uuid5(PAYMENTS, f"{message_id}:{call}"))


def uuid5_from_a_module_constant(message_id, call):
    return str(uuid5(NAMESPACE_URL, f"urn:payments:{message_id}:{call}"))


STARTED = uuid.uuid4()  # made once at start-up: the same all day, another one after a restart


def startup_uuid(message_id, call):
    return f"{STARTED}:{message_id}:{call}"


REMEMBERED = {}


def remembered_uuid(message_id, call):
    return REMEMBERED.setdefault((message_id, call), str(uuid.uuid4()))  # a memory a restart empties


def utc_hour(message_id, call):
    return f"{message_id}:{call}:{datetime.datetime.now(datetime.timezone.utc):%Y%m%d%H}"


def utc_date(message_id, call):
    return f"{message_id}:{call}:{datetime.datetime.now(datetime.timezone.utc).date()}"


def five_minute_bucket(message_id, call):
    return f"{message_id}:{call}:{int(time.time() // 300)}"  # the same for copies seconds apart, not hours


def node_name(message_id, call):
    return f"{os.uname().nodename}/{message_id}/{call}"


def month_bucket(message_id, call):
    return f"{message_id}:{call}:{datetime.date.today():%Y-%m}"  # the same for days, another key next month


def year_bucket(message_id, call):
    return f"{message_id}:{call}:{datetime.datetime.now().year}"


def hardware_address(message_id, call):
    return f"{uuid.getnode():x}:{message_id}:{call}"  # the machine's MAC address: another machine, another key


def etc_hostname(message_id, call):
    with open("/etc/hostname") as file:
        return f"{file.read().strip()}:{message_id}:{call}"


def crc_last_byte(message_id, call):
    return f"{zlib.crc32(message_id.encode()) & 0xFF}:{call}"  # 256 values: collides among a day's messages


def three_hex_digits(message_id, call):
    return hashlib.md5(f"{message_id}:{call}".encode()).hexdigest()[:3]


def call_cut_to_two(message_id, call):
    return f"{message_id}:{call[:2]}"  # charge and charge-2 share "ch"


def key_maker(separator):
    def key(message_id, call):
        return f"{message_id}{separator}{call}"
    return key


made_by_a_factory = key_maker(":")  # a right answer: the restart runs this statement again
made_with_a_startup_uuid = key_maker(f":{uuid.uuid4()}:")  # run again, it gets another UUID


class KeyMaker:
    def __call__(self, message_id, call):
        return f"{message_id}:{call}"


def one_argument(message_id):
    return f"{message_id}:charge"


BANKS = {
    "check_key_function": Bank(
        right=[(joined,), (call_first,), (digest_of_both,), (lambda m, call: f"{m}:{call}",),
               (crc_of_both,), (with_a_helper,), (namespaced_uuid5,), (uuid5_from_a_module_constant,),
               (made_by_a_factory,)],
        wrong=[
            Wrong((upper,), "besides which message"),
            Wrong((digest_of_the_id,), "besides which message"),
            Wrong((builtin_hash,), "fresh process"),
            Wrong((with_the_pid,), "fresh process"),
            Wrong((fresh_uuid,), "first attempt"),
            Wrong((the_call_only,), "the same key"),
            Wrong((with_the_date,), "clock"),
            Wrong((with_the_hour,), "clock"),
            Wrong((utc_hour,), "clock"),
            Wrong((utc_date,), "clock"),
            Wrong((five_minute_bucket,), "clock"),
            Wrong((startup_uuid,), "start-up"),
            Wrong((remembered_uuid,), "starts empty"),
            Wrong((node_name,), "host name"),
            Wrong((cut_to_twelve,), "cut down"),
            Wrong((with_the_host,), "host name"),
            Wrong((short_digest,), "cut down"),
            Wrong((cut_short,), "the same key"),
            Wrong((call_initial,), "besides which message"),
            Wrong((month_bucket,), "clock"),
            Wrong((year_bucket,), "clock"),
            Wrong((hardware_address,), "host name"),
            Wrong((etc_hostname,), "host name"),
            Wrong((crc_last_byte,), "cut down"),
            Wrong((three_hex_digits,), "cut down"),
            Wrong((call_cut_to_two,), "besides which message"),
            Wrong((made_with_a_startup_uuid,), "fresh process"),
            Wrong((KeyMaker(),), "written with def"),
            Wrong((one_argument,), "two arguments"),
            Wrong(("m-7f3:charge",), "function"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def notebook_function(cells, name):
    """A function as a notebook defines it: cells run one after another in one namespace, kept in ``_ih``."""
    import linecache

    namespace = {"__name__": "__main__", "_ih": ["", *cells]}
    for number, cell in enumerate(cells, start=1):
        filename = f"<notebook cell {number}>"  # IPython registers each cell's text the same way
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        exec(compile(cell, filename, "exec"), namespace)
    return namespace[name]


NOTEBOOK = ["import uuid", 'NS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")\nSEEN = {}\nPREFIX = "old"',
            'PREFIX = "pay"\ndef call_key(m, c):\n    return str(uuid.uuid5(NS, f"{PREFIX}:{m}:{c}"))',
            "def remembered(m, c):\n    return SEEN.setdefault((m, c), str(uuid.uuid4()))\nfor n in range(3):\n    SEEN[n] = n"]


def test_in_a_notebook_the_restart_reruns_the_cells_that_define_what_the_key_reads():
    from idemlib.course.exercises import check_key_function

    assert check_key_function(notebook_function(NOTEBOOK, "call_key"))  # the namespace and the last PREFIX come back
    refused = check_key_function(notebook_function(NOTEBOOK, "remembered"))  # SEEN comes back empty
    assert not refused and "starts empty" in refused.message
