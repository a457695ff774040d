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

# Many IDs, some sharing a prefix, so that a key cut short or hashed into too few characters collides.
MESSAGES = ("m-7f3", "m-7f4", "m-9c2", "m-8a1", *(f"m-{n:03x}" for n in range(0x100, 0x114)))
CALLS = ("charge", "fee", "capture")
PAIRS = [(message, call) for message in MESSAGES for call in CALLS]
# A restarted consumer may run on another machine, in another time zone: the fresh process gets other ones.
OTHER_MACHINES = (("consumer-2", "Etc/GMT+12"), ("consumer-3", "Etc/GMT-14"))


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


def keys_after_restart(function: Any, seed: int, host: str = "consumer-2", zone: str = "UTC") -> list[Any]:
    """The keys ``function`` gives for every (message, call) pair, computed by a fresh Python process.

    A consumer that restarts (a redeploy, a crash) must send the same key for the
    same call, so the key is worked out again in a new interpreter, with its own
    process ID, its own string-hash seed (``PYTHONHASHSEED``), and, as after a
    redeploy onto another machine, another host name and time zone (so a key that
    carries the local date or hour changes too).
    """
    name = "key_from_lambda" if function.__name__ == "<lambda>" else function.__name__
    other_machine = (f"import platform, socket; socket.gethostname = platform.node = lambda: {host!r}")
    program = "\n".join([other_machine, *_imports_for(function), _source_of(function),
                         "import json, sys",
                         f"print(json.dumps([{name}(m, c) for m, c in json.loads(sys.argv[1])]))"])
    done = subprocess.run([sys.executable, "-c", program, json.dumps(PAIRS)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONHASHSEED": str(seed), "TZ": zone})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
    return json.loads(done.stdout)


@exercise
def check_key_function(call_key: Any) -> Feedback:
    """Lesson 04: a function from (message ID, call name) to the idempotency key of that call."""
    if (missing := blank(call_key, "a function such as def call_key(message_id, call): ...")) is not None:
        return missing
    if not isinstance(call_key, types.FunctionType):
        return hint("Give a function (written with def, or a lambda) that takes a message ID and a call name and "
                    "returns a key (a string).")
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
        if all(len({by_pair[(m, call)] for call in CALLS}) < len(CALLS) for m in MESSAGES):
            return hint("Two calls of one message (its charge and its fee, say) got the same key, so the provider would "
                        "take the fee for a repeat of the charge with other parameters and refuse it. What must the key "
                        "say besides which message it belongs to?")
        first_with: dict[str, tuple[str, str]] = {}
        for pair, key in by_pair.items():
            if key in first_with:
                return hint(f"Two different calls, {first_with[key]} and {pair}, got the same key {key!r}, so the second "
                            "would be answered with the first one's stored result and never made. Keep the whole message "
                            "ID and the whole call name in the key; a hash cut down to a few characters collides too.")
            first_with[key] = pair
    try:
        restarted = [keys_after_restart(call_key, seed, host, zone)
                     for seed, (host, zone) in enumerate(OTHER_MACHINES, start=1)]
    except (OSError, RuntimeError, SyntaxError, TypeError, ValueError, subprocess.TimeoutExpired) as error:
        return hint(f"The check reruns your function in a fresh Python process, as a restarted consumer would, and that "
                    f"failed ({error}). Write it with def, and import what it uses at the top of its cell.")
    if any(again != keys for again in restarted):
        return hint("In a fresh process (a consumer restarted after a crash, or redeployed on another machine) it gave "
                    "other keys for the same calls. A process ID, a host name, the date or the hour, and Python's hash() "
                    "of a string change from one process or machine to the next; build the key only from what the "
                    "message itself carries.")
    provider = PaymentProvider()
    for key in [keys[0], *restarted[0][:1], keys[0]]:  # first attempt, the retry after a restart, one more redelivery
        provider.charge(key, order_id=1042, amount=40)
    return right(f"'{keys[0]}' names the message and the call, and a restarted process gives it again: "
                 f"{len(provider.charges)} charge for three attempts.")
