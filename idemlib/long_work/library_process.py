"""The child's side of a Powertools run: one delivery through the real library, on the run's clock (lesson 09).

:func:`consume_delivery` runs in a process of its own, forked for one delivery. It
stops at a gate before each step and waits for the parent's go, which carries the
run's time. The library reads the time through ``datetime.now()``; here that call
answers with the run's clock. Redis keeps the library's records, but their time to
live is counted on the same clock: :class:`RunClockRedis` stores each key without an
expiry and forgets it once the run's clock passes the time to live it was set with.
:class:`PeerSettings` says how the library is configured, in the course's words.
"""

from __future__ import annotations

import datetime
import json
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency import base as _library_base
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyKeyError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence import base as _persistence_base
from aws_lambda_powertools.utilities.idempotency.persistence import datarecord as _datarecord
from aws_lambda_powertools.utilities.idempotency.persistence import redis as _redis_layer
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer

from idemlib.trace import Event

EPOCH = 1_767_225_600.0
"""The wall-clock moment (2026-01-01 UTC) the library sees as the run's time 0."""
RAISED = str(Event.RAISED)
"""The trace event of a delivery whose function raised an error (the library deletes its record, then re-raises)."""


def library_defaults() -> dict[str, Any]:
    """What the library's own ``IdempotencyConfig()`` sets when given nothing, read from the installed package."""
    config = IdempotencyConfig()
    return {"records expire after (s)": config.expires_after_seconds,
            "payload validation": config.payload_validation_jmespath or "off",
            "raise_on_no_idempotency_key": config.raise_on_no_idempotency_key,
            "Lambda context registered (deadline)": config.lambda_context is not None}


@dataclass(frozen=True)
class PeerSettings:
    """How the library is configured for a run (the arguments of ``IdempotencyConfig``, in the course's words).

    ``time_left``: the seconds a registered Lambda context reports as left in the
    invocation when the record is claimed (``register_lambda_context``), which the
    library turns into the claim's deadline; None registers nothing, which is what
    code outside Lambda, or a handler that forgot, does. ``stopped_at_timeout``:
    the invocation is killed when that time runs out, as Lambda does; off, nothing
    enforces the deadline, as with a stand-in context outside Lambda.
    """

    expires_after_seconds: int = IdempotencyConfig().expires_after_seconds
    time_left: float | None = None
    stopped_at_timeout: bool = False
    payload_validation: bool = False
    raise_on_no_key: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.expires_after_seconds, bool) or not isinstance(self.expires_after_seconds, int) \
                or self.expires_after_seconds < 1:
            raise ValueError("expires_after_seconds must be a whole number of seconds, at least 1 (the library counts "
                             f"a record's life in whole seconds), not {self.expires_after_seconds!r}")
        if self.time_left is not None and not 0 <= self.time_left < float("inf"):
            raise ValueError(f"time_left must be None (no deadline) or seconds left, 0 or more, not {self.time_left!r}")
        if self.stopped_at_timeout and self.time_left is None:
            raise ValueError("stopped_at_timeout needs a time_left: without a registered context there is no timeout")

    def config(self) -> IdempotencyConfig:
        """The library's own configuration object for these settings."""
        config = IdempotencyConfig(event_key_jmespath="message_id", expires_after_seconds=self.expires_after_seconds,
                                   payload_validation_jmespath="[order_id, amount]" if self.payload_validation else "",
                                   raise_on_no_idempotency_key=self.raise_on_no_key)
        if self.time_left is not None:
            # A stand-in, not a LambdaContext: the library reads only get_remaining_time_in_millis.
            config.register_lambda_context(RemainingTime(round(self.time_left * 1000)))  # type: ignore[arg-type]
        return config


@dataclass(frozen=True)
class RemainingTime:
    """Stands in for a Lambda context: all the library asks of it is the time left, in milliseconds.

    It only reports a number. Inside Lambda the same number is a promise that the
    invocation is stopped when it runs out; this stand-in promises nothing.
    """

    millis: int

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


def expiry_hash(prefix: str) -> str:
    """The hash beside a run's keys that holds when each one expires on the run's clock."""
    return f"{prefix}:expiries"


class ChargeFailed(RuntimeError):
    """The error the decorated function raises where a run asks it to (a provider that timed out, say)."""


class _RunClock:
    """The child's view of the run's clock: the moment the parent last sent, as ``datetime.now()`` answers it."""

    now = 0.0

    @classmethod
    def datetime_module(cls) -> types.SimpleNamespace:
        """The ``datetime`` module as the library's modules see it in the child: the same, but ``now()`` is the run's."""

        class RunDateTime(datetime.datetime):
            @classmethod
            def now(cls_, tz: datetime.tzinfo | None = None) -> RunDateTime:  # noqa: N805 - a classmethod
                return cls_.fromtimestamp(EPOCH + cls.now, tz)

        return types.SimpleNamespace(**{**vars(datetime), "datetime": RunDateTime})


class RunClockRedis:
    """The real Redis, with each key's time to live counted on the run's clock instead of Redis's own.

    The library gets this as its client (it needs ``get``, ``set`` and ``delete``).
    A key set with an expiry is stored without one; the moment it should expire is
    kept in a hash beside it, and the key is forgotten once the run's clock passes it.
    """

    def __init__(self, client: redis.Redis, prefix: str, now: Callable[[], float]) -> None:
        self._client, self._expiries, self._now = client, expiry_hash(prefix), now

    def _forget_if_expired(self, name: str) -> None:
        at = self._client.hget(self._expiries, name)
        if at is not None and float(at) <= self._now():
            self._client.delete(name)
            self._client.hdel(self._expiries, name)

    def get(self, name: str) -> bytes | str | None:
        self._forget_if_expired(name)
        return self._client.get(name)

    def set(self, name: str, value: Any, ex: float | None = None, px: float | None = None, nx: bool = False) -> Any:
        self._forget_if_expired(name)
        stored = self._client.set(name, value, nx=nx)
        if stored:
            seconds = ex if ex is not None else (px / 1000 if px is not None else None)
            if seconds is None:
                self._client.hdel(self._expiries, name)
            else:
                self._client.hset(self._expiries, name, self._now() + float(seconds))
        return stored

    def delete(self, *names: str) -> Any:
        self._client.hdel(self._expiries, *names)
        return self._client.delete(*names)


with warnings.catch_warnings():
    # In 3.37 the recommended name is an alias of a class marked deprecated for v4, and
    # subclassing it warns about the alias's old name; nothing here uses the old name.
    warnings.simplefilter("ignore", DeprecationWarning)

    class _GatedRedisLayer(CachePersistenceLayer):
        """The library's Redis layer, pausing before it claims and before it completes, so the parent can kill there."""

        def __init__(self, gate: Callable[[str], str], client: RunClockRedis) -> None:
            # RunClockRedis takes the str keys and number expiries the library passes: narrower than its protocol.
            super().__init__(client=client)  # type: ignore[arg-type]
            self._gate = gate

        def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
            self._gate("claim")
            super().save_inprogress(data, remaining_time_in_millis)

        def save_success(self, data: dict[str, Any], result: dict) -> None:
            self._gate("mark completed")
            super().save_success(data, result)


def consume_delivery(conn: Connection, event: dict[str, Any], settings: PeerSettings, prefix: str, url: str,
                     now: float) -> None:
    """The child process: one delivery through the library, reporting before each step and waiting for a go."""
    _RunClock.now = now
    run_datetime = _RunClock.datetime_module()
    for module in (_library_base, _persistence_base, _datarecord, _redis_layer):
        module.dt = run_datetime  # type: ignore[attr-defined]  # the library's clock is the run's

    def gate(step: str) -> str:
        conn.send(("before", step, []))
        action, _RunClock.now = conn.recv()
        return str(action)

    client = redis.Redis.from_url(url)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @idempotent_function(data_keyword_argument="event",
                             persistence_store=_GatedRedisLayer(gate, RunClockRedis(client, prefix, lambda: _RunClock.now)),
                             config=settings.config(), key_prefix=prefix)
        def charge(event: dict[str, Any]) -> dict[str, Any]:
            action = gate("charge")
            if action == "raise before":
                raise ChargeFailed("the provider timed out before charging")
            client.rpush(f"{prefix}:charges", json.dumps(event))  # committed at once: the side effect
            if action == "raise after":
                raise ChargeFailed("the provider charged, then the answer timed out")
            return {"charged": event.get("amount")}

        try:
            result = charge(event=event)
            gate("ack")
            verdict = ("done", f"result {result}")
        except IdempotencyAlreadyInProgressError as error:
            verdict = ("refused", f"{type(error).__name__}: {error}")
        except (IdempotencyValidationError, IdempotencyKeyError) as error:
            verdict = ("rejected", f"{type(error).__name__}: {error}")
        except ChargeFailed as error:
            verdict = (RAISED, f"{type(error).__name__}: {error}")
        except Exception as error:  # noqa: BLE001 - whatever else the library raises fails the invocation
            verdict = ("failed", f"{type(error).__name__}: {error}")
    conn.send((*verdict, [str(w.message) for w in caught]))
