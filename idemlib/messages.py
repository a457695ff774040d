"""Messages on the queue and the payment instruction each one carries.

A message is what the broker stores and delivers: an ID and a body. The ID must be
stable, the same on every delivery, or no consumer can recognise a duplicate. The
body of a payments message says which order to charge and how much.
"""

from __future__ import annotations

import json
import random
import reprlib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LARGEST_INTEGER = 2**31 - 1
"""The largest order ID or amount the stores hold: their INTEGER columns are 32-bit on DuckDB and PostgreSQL."""
LONGEST_ID = 255
"""The longest message ID accepted, in characters: well inside PostgreSQL's limit on an index entry."""
DEEPEST_NESTING = 64
"""How deeply a JSON body may nest arrays and objects; a charge needs one level."""

_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 60  # errors name a value without echoing a huge one


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
        if self.message_id is None or self.message_id == "":
            return "<message without an ID>"
        return self.message_id if isinstance(self.message_id, str) else repr(self.message_id)


@dataclass(frozen=True)
class Charge:
    """The payment instruction read from a message body: charge an order an amount in dollars."""

    order_id: int
    amount: int


def parse_charge(message: Message) -> Charge:
    """Read and validate the payment instruction in ``message``.

    Raises :class:`BadMessage` naming the message and the field when the ID is
    missing or cannot be stored, the body is not a JSON object (or nests too deeply
    to read), or a field is missing, of the wrong kind or beyond what the stores hold.
    """
    _check_id(message)
    body = message.body
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadMessage(f"{message.label}: the body is not UTF-8 text ({error}). Send the JSON encoded as UTF-8.") from None
    if isinstance(body, str):
        body = _json_object(message, body)
    if not isinstance(body, dict):
        raise BadMessage(
            f"{message.label}: the body must be a JSON object with order_id and amount, "
            f"not {type(body).__name__}."
        )
    return Charge(
        order_id=_positive_int(message, body, "order_id"),
        amount=_positive_int(message, body, "amount"),
    )


def valid_charges(messages: Iterable[Message]) -> dict[str, Charge]:
    """The charge each distinct valid message ID asks for, as first published.

    Messages :func:`parse_charge` refuses are left out (they belong in the
    dead-letter queue); a body sent as JSON text counts like any other.
    """
    charges: dict[str, Charge] = {}
    for message in messages:
        try:
            charge = parse_charge(message)
        except BadMessage:
            continue
        charges.setdefault(str(message.message_id), charge)
    return charges


def expected_total(messages: Iterable[Message]) -> int:
    """Dollars a correct consumer charges for ``messages``: each valid message ID once."""
    return sum(charge.amount for charge in valid_charges(messages).values())


def id_fault(message_id: object) -> tuple[str, str] | None:
    """Why the consumer refuses ``message_id`` as an inbox key, and what the producer should send instead; None if
    it takes it. A key is text, not blank, of at most :data:`LONGEST_ID` characters, with no control character
    (PostgreSQL text cannot hold a NUL), and writable as UTF-8."""
    if not isinstance(message_id, str):
        return f"must be text, not {type(message_id).__name__}", "Fix the producer to send the ID as a string."
    if not message_id.strip():
        return "is blank", "Fix the producer to give every message a stable ID."
    if len(message_id) > LONGEST_ID:
        return (f"is {len(message_id)} characters long; the inbox holds IDs of at most {LONGEST_ID}",
                "Fix the producer to send a short stable ID, such as a UUID.")
    # isprintable() is one quick pass, and printable text holds no control character (a check runs this on 300,000 keys)
    control = None if message_id.isprintable() else next(
        (char for char in message_id if unicodedata.category(char) == "Cc"), None)
    if control is not None:
        return (f"contains the control character {control!r}; PostgreSQL cannot store a NUL in text, and the others "
                "garble every log", "Send printable IDs only.")
    try:
        message_id.encode("utf-8")
    except UnicodeEncodeError:
        return ("is not valid Unicode (a lone surrogate), so it cannot be written as UTF-8",
                "Send the ID as proper UTF-8 text.")
    return None


def _check_id(message: Message) -> None:
    message_id = message.message_id
    if message_id is None or (isinstance(message_id, str) and not message_id.strip()):
        raise BadMessage(
            f"{message.label}: the message has no message_id, so a redelivery could not be "
            "told apart from a new payment. Fix the producer to give every message a stable "
            "ID (for example the order's payment-request ID); this one goes to the dead-letter queue."
        )
    fault = id_fault(message_id)
    if fault is not None:
        raise BadMessage(f"{_shown.repr(message_id)}: the message_id {fault[0]}. {fault[1]}")


def _json_object(message: Message, text: str) -> Any:
    depth = _nesting(text)
    if depth > DEEPEST_NESTING:
        raise BadMessage(f"{message.label}: the body is nested {depth} levels deep; at most {DEEPEST_NESTING} "
                         'are read. Send a flat JSON object such as {"order_id": 1042, "amount": 40}.')
    try:
        return json.loads(text)
    except ValueError as error:
        raise BadMessage(
            f"{message.label}: the body is not valid JSON ({error}). Send a JSON object such as "
            '{"order_id": 1042, "amount": 40}.'
        ) from None


def _nesting(text: str) -> int:
    """How deeply ``text`` nests JSON arrays and objects, counted without parsing (brackets in strings don't count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _positive_int(message: Message, body: dict[str, Any], name: str) -> int:
    if name not in body:
        raise BadMessage(f"{message.label}: field {name!r} is missing from the body. Add it as a positive whole number.")
    value = body[name]
    # bool is an int in Python; a body saying "amount": true is a producer bug, not $1.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadMessage(
            f"{message.label}: field {name!r} must be a positive whole number, got {_shown.repr(value)}."
        )
    if value > LARGEST_INTEGER:
        raise BadMessage(f"{message.label}: field {name!r} is {_shown.repr(value)}, more than the payments table "
                         f"holds (at most {LARGEST_INTEGER:,}). Check the producer; this one goes to the dead-letter queue.")
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
