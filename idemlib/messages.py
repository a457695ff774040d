"""Messages on the queue and the payment instruction each one carries.

A message is what the broker stores and delivers: an ID and a body. The ID must be
stable, the same on every delivery, or no consumer can recognise a duplicate. The
body of a payments message says which order to charge and how much.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any


class BadMessage(ValueError):
    """A message that no handler can process, however often it is delivered.

    The text names the message and the field at fault and says what to do, so the
    operator who finds it in the dead-letter queue knows where to start.
    """


@dataclass(frozen=True)
class Message:
    """One message as the producer published it.

    ``message_id`` is the stable ID the inbox remembers; ``body`` is either a mapping
    or the raw text a producer put on the wire (which may not be valid JSON).
    """

    message_id: str | None
    body: Any = field(default_factory=dict)

    @classmethod
    def charge(cls, message_id: str, order_id: int, amount: int) -> Message:
        """A message that asks the payments service to charge ``order_id`` ``amount`` dollars."""
        return cls(message_id, {"order_id": order_id, "amount": amount})

    @property
    def label(self) -> str:
        """How logs and errors name this message, even when it has no ID."""
        return self.message_id or "<message without an ID>"


@dataclass(frozen=True)
class Charge:
    """The payment instruction read from a message body: charge an order an amount in dollars."""

    order_id: int
    amount: int


def parse_charge(message: Message) -> Charge:
    """Read and validate the payment instruction in ``message``.

    Raises :class:`BadMessage` naming the message and the field when the ID is
    missing, the body is not a JSON object, or a field is missing or of the wrong kind.
    """
    if not isinstance(message.message_id, str) or not message.message_id.strip():
        raise BadMessage(
            f"{message.label}: the message has no message_id, so a redelivery could not be "
            "told apart from a new payment. Fix the producer to give every message a stable "
            "ID (for example the order's payment-request ID); this one goes to the dead-letter queue."
        )
    body = message.body
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except ValueError as error:
            raise BadMessage(
                f"{message.label}: the body is not valid JSON ({error}). Send a JSON object such as "
                '{"order_id": 1042, "amount": 40}.'
            ) from None
    if not isinstance(body, dict):
        raise BadMessage(
            f"{message.label}: the body must be a JSON object with order_id and amount, "
            f"not {type(body).__name__}."
        )
    return Charge(
        order_id=_positive_int(message, body, "order_id"),
        amount=_positive_int(message, body, "amount"),
    )


def _positive_int(message: Message, body: dict[str, Any], name: str) -> int:
    if name not in body:
        raise BadMessage(f"{message.label}: field {name!r} is missing from the body. Add it as a positive whole number.")
    value = body[name]
    # bool is an int in Python; a body saying "amount": true is a producer bug, not $1.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadMessage(
            f"{message.label}: field {name!r} must be a positive whole number, got {value!r}."
        )
    return value


def payment_stream(count: int, *, seed: int = 42) -> list[Message]:
    """``count`` distinct payment messages (IDs ``p-0001``, ``p-0002``, ...), seeded.

    Amounts are whole dollars from $5 to $100; each message charges its own order.
    The same seed always gives the same stream.
    """
    rng = random.Random(seed)
    return [
        Message.charge(f"p-{n:04d}", order_id=2000 + n, amount=5 * rng.randint(1, 20))
        for n in range(1, count + 1)
    ]
