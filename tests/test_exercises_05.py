"""Lesson 05's exercise: the ID the inbox should trust, computed from what each copy carries."""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid

from exercise_bank import Bank, Wrong, bank_tests


def request_id(record):
    return record["request_id"]


def prefixed(record):
    return f"payment/{record['request_id']}"  # a namespaced form of the same ID


def request_and_order(record):
    return f"{record['request_id']}:{record['order_id']}"


def content_hash(record):
    return hashlib.sha256(json.dumps([record["order_id"], record["amount"]]).encode()).hexdigest()


def whole_record_hash(record):
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def with_attempt(record):
    return f"{record['request_id']}#{record['attempt']}"


def order_only(record):
    return str(record["order_id"])


def fresh_uuid(record):
    return str(uuid.uuid4())


def builtin_hash(record):
    return str(hash(record["request_id"]))  # shorter, but another value in every restarted process


def sent_at(record):
    return f"{record['order_id']}@{record['sent_at']}"


ID_FIELDS = ["request_id"]  # a constant beside the function, as in a notebook


def from_listed_fields(record):
    return "/".join(str(record[field]) for field in ID_FIELDS)


def five_minute_bucket(record):
    return f"{record['order_id']}:{record['amount']}:{int(record['sent_at'] // 300)}"  # copies minutes or hours apart


def hour_bucket(record):
    return f"{record['request_id']}@{int(record['sent_at'] // 3600)}"


def request_prefix(record):
    return record["request_id"][:16]  # a shorter key, but request IDs run to 185 characters


def request_suffix(record):
    return record["request_id"][-12:]  # the other end: request IDs that differ only in the middle collide


def month_bucket(record):
    return f"{record['request_id']}:{datetime.date.today():%Y-%m}"  # the same for days, another ID next month


def hardware_address(record):
    return f"{uuid.getnode():x}/{record['request_id']}"  # the machine's MAC address


STARTED = uuid.uuid4()


def startup_uuid(record):
    return f"{STARTED}/{record['request_id']}"  # the same until the consumer restarts


SEEN = {}


def remembered(record):
    return SEEN.setdefault(record["request_id"], str(uuid.uuid4()))  # a memory a restart empties


def with_today(record):
    return f"{record['request_id']}:{datetime.date.today()}"


PAYMENTS = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")


def namespaced_uuid5(record):
    return str(uuid.uuid5(PAYMENTS, record["request_id"]))


def as_tuple(record):
    return (record["request_id"], record["order_id"])


def missing_field(record):
    return record["event_id"]


BANKS = {
    "check_message_id": Bank(
        right=[(request_id,), (prefixed,), (request_and_order,), (lambda r: r["request_id"],), (as_tuple,), (from_listed_fields,),
               (namespaced_uuid5,)],
        wrong=[
            Wrong((content_hash,), "same order and amount"),
            Wrong((order_only,), "same order and amount"),
            Wrong((whole_record_hash,), "same on every copy"),
            Wrong((with_attempt,), "same on every copy"),
            Wrong((fresh_uuid,), "same on every copy"),
            Wrong((builtin_hash,), "fresh process"),
            Wrong((sent_at,), "same on every copy"),
            Wrong((five_minute_bucket,), "same on every copy"),
            Wrong((hour_bucket,), "same on every copy"),
            Wrong((request_prefix,), "same ID"),
            Wrong((request_suffix,), "same ID"),
            Wrong((month_bucket,), "clock"),
            Wrong((hardware_address,), "host name"),
            Wrong((startup_uuid,), "start-up"),
            Wrong((remembered,), "starts empty"),
            Wrong((with_today,), "clock"),
            Wrong((missing_field,), "KeyError"),
            Wrong(("req-0007",), "function"),
            Wrong((lambda record: None,), "no ID"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
