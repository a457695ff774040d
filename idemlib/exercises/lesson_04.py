"""Checks for lesson 04, Beyond your own database."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from typing import Any

from idemlib.exercises.feedback import Feedback, blank, exercise, hint, right
from idemlib.provider import PaymentProvider

__all__ = ["check_key_function"]

MESSAGES = ("m-7f3", "m-9c2", "m-8a1")
CALLS = ("charge", "fee")
PAIRS = [(message, call) for message in MESSAGES for call in CALLS]


def _source_of(function: Any) -> str:
    """The text of ``function``, as a definition a fresh interpreter can run (a lambda becomes ``key = lambda ...``)."""
    source = textwrap.dedent(inspect.getsource(function))
    if function.__name__ != "<lambda>":
        return source
    lambdas = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Lambda)]
    return f"key_from_lambda = {ast.unparse(lambdas[0])}"


def _imports_for(function: Any) -> list[str]:
    """Import lines for the modules and imported functions that ``function`` uses from its globals."""
    lines = []
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif callable(value) and getattr(value, "__module__", None) not in (None, "__main__"):
            lines.append(f"from {value.__module__} import {value.__name__} as {name}")
        elif isinstance(value, (str, int, float)):
            lines.append(f"{name} = {value!r}")
    return lines


def keys_after_restart(function: Any, seed: int) -> list[Any]:
    """The keys ``function`` gives for every (message, call) pair, computed by a fresh Python process.

    A consumer that restarts (a redeploy, a crash) must send the same key for the
    same call, so the key is worked out again in a new interpreter, with its own
    process ID and its own string-hash seed (``PYTHONHASHSEED``).
    """
    name = "key_from_lambda" if function.__name__ == "<lambda>" else function.__name__
    program = "\n".join([*_imports_for(function), _source_of(function),
                         "import json, sys",
                         f"print(json.dumps([{name}(m, c) for m, c in json.loads(sys.argv[1])]))"])
    done = subprocess.run([sys.executable, "-c", program, json.dumps(PAIRS)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONHASHSEED": str(seed)})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
    return json.loads(done.stdout)


@exercise
def check_key_function(call_key: Any) -> Feedback:
    """Lesson 04: a function from (message ID, call name) to the idempotency key of that call."""
    if (missing := blank(call_key, "a function such as def call_key(message_id, call): ...")) is not None:
        return missing
    if not callable(call_key):
        return hint("Give a function that takes a message ID and a call name and returns a key (a string).")
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
        if any(by_pair[(m, "charge")] == by_pair[(m, "fee")] for m in MESSAGES):
            return hint("The charge and the fee of one message got the same key, so the provider would take the fee for "
                        "a repeat of the charge with other parameters and refuse it. What must the key say besides "
                        "which message it belongs to?")
        return hint("Two different messages got the same key, so the second payment would be answered with the "
                    "first one's stored result and never charged.")
    try:
        restarted = [keys_after_restart(call_key, seed) for seed in (1, 2)]
    except (OSError, RuntimeError, SyntaxError, TypeError, ValueError, subprocess.TimeoutExpired) as error:
        return hint(f"The check reruns your function in a fresh Python process, as a restarted consumer would, and that "
                    f"failed ({error}). Write it with def, and import what it uses at the top of its cell.")
    if any(again != keys for again in restarted):
        return hint("In a fresh process (a consumer restarted after a crash or a redeploy) it gave other keys for the "
                    "same calls. A process ID, a clock or Python's hash() of a string change from one process to the "
                    "next; build the key only from what the message itself carries.")
    provider = PaymentProvider()
    for key in [keys[0], *restarted[0][:1], keys[0]]:  # first attempt, the retry after a restart, one more redelivery
        provider.charge(key, order_id=1042, amount=40)
    return right(f"'{keys[0]}' names the message and the call, and a restarted process gives it again: "
                 f"{len(provider.charges)} charge for three attempts.")
