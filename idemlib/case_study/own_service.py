"""Questions 2 and 5 asked of a service of your own: a fake payment client that records every key it is sent.

The simulator answers the five questions for the account service it models. A real service
answers questions 2 and 5 (who makes the key, does it survive a retry, is it passed on) the
same way, with its own handler and this stand-in for the payment system: it records the
idempotency key of every call, pays once per key as Stripe v1 does, answers one call with a
timeout *after* paying (the money left, the answer was lost) and one with a 429 *before*
paying (nothing left, nothing saved under the key), and the message is delivered again after
each, as a broker redelivers an unacknowledged message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from idemlib.messages import Message


class RateLimited(Exception):
    """The payment system's 429: refused before its idempotency layer ran, so nothing was paid or saved."""


class PaymentTimedOut(Exception):
    """The call's answer never came back; the payout behind it was made."""


@dataclass
class RecordingPayments:
    """A stand-in payment client for a handler under test.

    ``time_out_call`` and ``rate_limit_call`` name which call (1 for the first) gets which
    failure; ``None`` gives none. A key it has paid under gets the stored answer, as Stripe
    v1 replays a request whose key it knows; a call without a key always pays.
    """

    time_out_call: int | None = 1
    rate_limit_call: int | None = 2
    keys: list[str | None] = field(default_factory=list)
    payouts: list[tuple[int, int]] = field(default_factory=list)
    _paid: dict[str, str] = field(default_factory=dict)

    def pay_out(self, application_id: int, amount: int, *, idempotency_key: str | None = None) -> str:
        """Pay ``amount`` out for ``application_id``; returns the payout's ID, or raises as the plan says."""
        self.keys.append(idempotency_key)
        call = len(self.keys)
        if call == self.rate_limit_call:
            raise RateLimited(f"call {call}: 429, rate limited; nothing paid")
        if idempotency_key is not None and idempotency_key in self._paid:
            return self._paid[idempotency_key]
        self.payouts.append((application_id, amount))
        payout_id = f"po_{len(self.payouts)}"
        if idempotency_key is not None:
            self._paid[idempotency_key] = payout_id
        if call == self.time_out_call:
            raise PaymentTimedOut(f"call {call}: no answer; the payout {payout_id} was made")
        return payout_id


Handler = Callable[[Message, RecordingPayments], Any]


def ask_questions_2_and_5(handlers: dict[str, Handler], message: Message, *, deliveries: int = 4) -> pd.DataFrame:
    """Deliver ``message`` to each handler until it returns (at most ``deliveries`` times) and read what it sent.

    Question 2: did every call for this one message carry one key, made before the first
    attempt? Question 5: was a key passed on at all, and was the loan paid out once?
    """
    rows = {}
    for label, handle in handlers.items():
        payments = RecordingPayments()
        handled = 0
        for _ in range(deliveries):
            handled += 1
            try:
                handle(message, payments)
                break
            except (RateLimited, PaymentTimedOut):
                continue  # no ack: the broker delivers the message again
        rows[label] = _verdict(payments.keys, len(payments.payouts), handled)
    return pd.DataFrame(rows).T


def _verdict(keys: Iterable[str | None], payouts: int, handled: int) -> dict[str, Any]:
    sent = list(keys)
    distinct = set(sent)
    return {"deliveries": handled, "payout calls": len(sent), "distinct keys": len(distinct - {None}),
            "calls without a key": sent.count(None), "payouts": payouts,
            "Q2: one key, kept on retry": "yes" if len(distinct) == 1 and None not in distinct else "no",
            "Q5: key passed on, paid once": "yes" if None not in distinct and payouts == 1 else "no"}
