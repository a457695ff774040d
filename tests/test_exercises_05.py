"""Lesson 05's exercise: the ID the inbox should trust, computed from what each copy carries (a CloudEvent on SQS)."""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import operator
import uuid
import zlib
from urllib.parse import quote

from exercise_bank import Bank, Wrong, bank_tests


def source_and_id(record):
    return f"{record['source']} {record['id']}"  # CloudEvents: source + id is unique for each distinct event


def as_tuple(record):
    return (record["source"], record["id"])


def digest_of_both(record):
    return hashlib.sha256(json.dumps([record["source"], record["id"]]).encode()).hexdigest()


PAYMENTS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")


def namespaced_uuid5(record):
    return str(uuid.uuid5(PAYMENTS, json.dumps([record["source"], record["id"]])))


def pick(fields, record):
    return "|".join(record[field] for field in fields)


picked = functools.partial(pick, ("source", "id"))  # functools.partial, bound to a name


class Picker:
    def __init__(self, *fields):
        self.fields = fields

    def __call__(self, record):
        return tuple(record[field] for field in self.fields)


picker = Picker("id", "source")  # a callable object, bound to a name


def with_the_type(record):
    return (record["type"], record["source"], record["id"])  # more than needed, still one per event


def length_prefixed(record):
    return f"{len(record['source'])}:{record['source']}:{record['id']}"  # the length says where the source ends


def json_array(record):
    return json.dumps([record["source"], record["id"]])


def escaped(record):
    return f"{quote(record['source'], safe='')}/{quote(record['id'], safe='')}"  # '/' and ':' escaped inside: unambiguous


def nul_separated(record):
    return f"{record['source']}\x00{record['id']}"  # a character no source or id here holds


id_then_source = lambda r: (r["id"], r["source"])  # noqa: E731 - a lambda, as a learner passes one


# Wrong: the review's forms first.
def the_id_alone(record):
    return record["id"]  # two producers both send evt-000007


def crc_16_bits(record):
    return zlib.crc32(f"{record['source']}|{record['id']}".encode()) & 0xFFFF


def sha_24_bits(record):
    return hashlib.sha256(f"{record['source']}|{record['id']}".encode()).hexdigest()[:6]


def sha_32_bits(record):
    return hashlib.sha256(f"{record['source']}|{record['id']}".encode()).hexdigest()[:8]


def lowered(record):
    return f"{record['source']}|{record['id'].lower()}"


def trimmed(record):
    return f"{record['source']}|{record['id'].strip()}"


def sqs_message_id(record):
    return record["message_id"]  # the broker's: new on a producer retry, a republish, a redrive


def data_hash(record):
    return hashlib.sha256(json.dumps(record["data"], sort_keys=True).encode()).hexdigest()


def whole_record_hash(record):
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def with_attempt(record):
    return f"{record['source']}|{record['id']}#{record['attempt']}"


def with_receive_count(record):
    return f"{record['source']}|{record['id']}#{record['receive_count']}"


def source_and_time(record):
    return f"{record['source']}@{record['time']}"  # forty events a second


def order_only(record):
    return record["data"]["order_id"]


def fresh_uuid(record):
    return str(uuid.uuid4())


def builtin_hash(record):
    return hash((record["source"], record["id"]))


def hour_bucket(record):
    return f"{record['source']}|{record['id']}@{int(record['sent_at'] // 3600)}"


def month_bucket(record):
    return f"{record['source']}|{record['id']}:{datetime.date.today():%Y-%m}"


def hardware_address(record):
    return (uuid.getnode(), record["source"], record["id"])


STARTED = uuid.uuid4()


def startup_uuid(record):
    return (str(STARTED), record["source"], record["id"])


SEEN = {}


def remembered(record):
    return SEEN.setdefault((record["source"], record["id"]), str(uuid.uuid4()))  # a memory a restart empties


def glued(record):
    return record["source"] + record["id"]  # /stores/1 with 23 and /stores/12 with 3 read the same


def digest_of_glued(record):
    return hashlib.sha256((record["source"] + record["id"]).encode()).hexdigest()  # long, but of an ambiguous text


def glued_format(record):
    return "{source}{id}".format(**record)


def changes_its_record(record):
    record["data"]["amount"] = 0  # an answer that writes to what it is given changes nothing the check reads
    return record.pop("source"), record.pop("id")


def colon_joined(record):
    return f"{record['source']}:{record['id']}"  # urn:shop:1 with 2:17 and urn:shop:1:2 with 17 read the same


def slash_joined(record):
    return f"{record['source']}/{record['id']}"  # /stores/1 with 2/17 and /stores/1/2 with 17 read the same


def digest_of_colon_joined(record):
    return hashlib.sha256(f"{record['source']}:{record['id']}".encode()).hexdigest()  # long, of an ambiguous text


def type_slash_source_slash_id(record):
    return f"{record['type']}/{record['source']}/{record['id']}"


def as_a_list(record):
    return [record["source"], record["id"]]  # cannot be a key


def missing_field(record):
    return record["request_id"]  # last section's field; this record has none


BANKS = {
    "check_message_id": Bank(
        right=[(source_and_id,), (as_tuple,), (digest_of_both,), (namespaced_uuid5,), (picked,), (picker,),
               (operator.itemgetter("source", "id"),), (with_the_type,), (id_then_source,), (changes_its_record,),
               (length_prefixed,), (json_array,), (escaped,), (nul_separated,), ("{source}\x00{id}".format_map,)],
        wrong=[
            Wrong((the_id_alone,), "names the producer"),
            Wrong((glued,), "nothing between"),
            Wrong((digest_of_glued,), "nothing between"),
            Wrong((glued_format,), "nothing between"),
            Wrong((colon_joined,), "occurs inside"),
            Wrong((slash_joined,), "occurs inside"),
            Wrong((digest_of_colon_joined,), "occurs inside"),
            Wrong((type_slash_source_slash_id,), "occurs inside"),
            Wrong(("{source}/{id}".format_map,), "occurs inside"),
            Wrong((crc_16_bits,), "16 or 32 bits"),
            Wrong((sha_24_bits,), "16 or 32 bits"),
            Wrong((sha_32_bits,), "16 or 32 bits"),
            Wrong((lowered,), "letter case"),
            Wrong((trimmed,), "space is part"),
            Wrong((sqs_message_id,), "producer retry"),
            Wrong((data_hash,), "same order and amount"),
            Wrong((order_only,), "same order and amount"),
            Wrong((whole_record_hash,), "same on every copy"),
            Wrong((with_attempt,), "producer retry"),
            Wrong((with_receive_count,), "redelivery"),
            Wrong((source_and_time,), "same second"),
            Wrong((fresh_uuid,), "same on every copy"),
            Wrong((builtin_hash,), "fresh process"),
            Wrong((hour_bucket,), "same on every copy"),
            Wrong((month_bucket,), "clock"),
            Wrong((hardware_address,), "host name"),
            Wrong((startup_uuid,), "start-up"),
            Wrong((remembered,), "starts empty"),
            Wrong((as_a_list,), "cannot be a key"),
            Wrong((missing_field,), "KeyError"),
            Wrong(("evt-000007",), "function"),
            Wrong((lambda record: None,), "no ID"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_copies_come_from_several_producers_at_scale_and_differ_by_seed():
    from idemlib.course.exercises.lesson_05 import event_copies

    events = list(event_copies())
    assert len(events) >= 300_000
    named = {(copies[0]["source"], copies[0]["id"]) for copies in events}
    assert len(named) == len(events)  # source + id names one event
    assert len({event_id for _, event_id in named}) < len(events)  # the id alone does not
    assert len({source + event_id for source, event_id in named}) < len(events)  # nor the two glued together
    for separator in ":/":  # nor joined by a character that sources and IDs hold
        assert len({f"{source}{separator}{event_id}" for source, event_id in named}) < len(events)
    new_messages = [(copies[0], copy) for copies in events for copy in copies[1:]
                    if copy["message_id"] != copies[0]["message_id"]]  # a retry, a republish, a redrive
    assert new_messages and all((copy["source"], copy["id"], copy["data"]) == (first["source"], first["id"], first["data"])
                                for first, copy in new_messages)
    assert [c[0]["id"] for c in list(event_copies(seed=6))[:50]] != [c[0]["id"] for c in events[:50]]


def test_a_record_handed_out_is_the_callers_to_change():
    from idemlib.course.exercises.lesson_05 import event_copies

    first = next(event_copies())[0]
    first["data"]["amount"], first["id"] = 0, "changed"
    again = next(event_copies())[0]
    assert again["id"] != "changed" and again["data"]["amount"] != 0
