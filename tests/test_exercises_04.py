"""Lesson 04's exercise: the idempotency key of one call of one message."""

from __future__ import annotations

import hashlib
import os
import uuid
from hashlib import sha256

from exercise_bank import Bank, Wrong, bank_tests


def joined(message_id, call):
    return f"{message_id}:{call}"  # the lesson's form, m-7f3:charge


def call_first(message_id, call):
    return "/".join([call, message_id])


def digest_of_both(message_id, call):
    return sha256(f"{message_id}:{call}".encode()).hexdigest()


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


def one_argument(message_id):
    return f"{message_id}:charge"


BANKS = {
    "check_key_function": Bank(
        right=[(joined,), (call_first,), (digest_of_both,), (lambda m, call: f"{m}:{call}",)],
        wrong=[
            Wrong((upper,), "besides which message"),
            Wrong((digest_of_the_id,), "besides which message"),
            Wrong((builtin_hash,), "fresh process"),
            Wrong((with_the_pid,), "fresh process"),
            Wrong((fresh_uuid,), "first attempt"),
            Wrong((the_call_only,), "different messages"),
            Wrong((one_argument,), "two arguments"),
            Wrong(("m-7f3:charge",), "function"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
