"""Section 3 of lesson 12: a day of approvals, and the two intuitive reactions to a duplicate account.

The account service as first written (no guard) works through a day of approvals
under crashes, lost acks and slow applications, run as it was, with retries turned
off, and retrying "more carefully". Every run is on the simulator's virtual clock,
with faults drawn the same way on every rerun.
"""

from __future__ import annotations

import random
from typing import TypedDict

import pandas as pd

from idemlib.case_study.loan_bank import LoanBank
from idemlib.case_study.mortgage import AccountService, open_account_message
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, Steps
from idemlib.messages import Message
from idemlib.sim import simulate


def applications(count: int, *, seed: int = 12) -> list[Message]:
    """A day of approvals: ``count`` open-account messages, one per application, amounts drawn the same way on every run."""
    rng = random.Random(seed)
    return [open_account_message(f"m-{number}", number, rng.randrange(50_000, 800_000, 1_000))
            for number in range(1, count + 1)]


class SometimesSlow(Handler):
    """``handler``, except that opening the account is slow for a share of the applications (the same ones on every run).

    The slow step gets `` (slow)`` added to its name, so ``step_seconds`` can give it its
    own duration: a consumer that outlives its lease there meets its message handed
    to another consumer.
    """

    def __init__(self, handler: Handler, share: float, *, seed: int = 12) -> None:
        self.handler, self.share, self.seed = handler, share, seed
        self.name = handler.name
        self.steps = handler.steps

    def run(self, ctx: Context) -> Steps:
        slow = random.Random(f"{self.seed}|{ctx.message_id}").random() < self.share
        for step in self.handler.run(ctx):
            yield f"{step} (slow)" if slow and step.endswith("open account") else step


DAY_FAULTS = FaultPlan(crash_rate=0.02, ack_loss_rate=0.05, seed=3)
"""Section 3's day: 2 % of steps crash and 5 % of acks are lost, drawn the same way on every rerun."""


class RetryPolicy(TypedDict):
    max_deliveries: int
    visibility_timeout: float


RETRY_POLICIES: dict[str, RetryPolicy] = {
    "retries on: 5 attempts, 30 s lease": {"max_deliveries": 5, "visibility_timeout": 30.0},
    "retries off: 1 attempt": {"max_deliveries": 1, "visibility_timeout": 30.0},
    "more carefully: 2 attempts, 120 s lease": {"max_deliveries": 2, "visibility_timeout": 120.0},
}
"""The service as first written, run three ways: as it was, with retries turned off, and retrying "more carefully"."""


def retry_policies(messages: list[Message], faults: FaultPlan, *, slow_share: float = 0.1,
                   slow_seconds: float = 45.0, consumers: int = 2, burst: int = 10) -> pd.DataFrame:
    """The unguarded account service under one fault plan with each of :data:`RETRY_POLICIES`.

    Approvals arrive through the day in bursts of ``burst``, each burst worked off by
    ``consumers`` consumers before the next arrives, so a message whose lease runs out
    is soon picked up by an idle consumer. One row per policy: applications with two or
    more accounts, applications with none (their message dead-lettered: the customer
    waits for an account that never comes), and the deliveries the broker made.
    """
    rows = []
    for label, settings in RETRY_POLICIES.items():
        bank = LoanBank(approved=())
        service = SometimesSlow(AccountService("none", payout=False), slow_share)
        deliveries = 0
        for start in range(0, len(messages), burst):
            result = simulate(service, messages[start:start + burst], faults=faults, database=bank,
                              consumers=consumers, step_seconds={f"{service.steps[0]} (slow)": slow_seconds},
                              **settings)
            deliveries += len(result.events("delivered"))
        per_application = bank.accounts()["message_id"].value_counts().reindex(
            [m.message_id for m in messages], fill_value=0)
        rows.append((label, int((per_application >= 2).sum()), int((per_application == 0).sum()), deliveries))
    return pd.DataFrame(rows, columns=["policy", "two or more accounts", "no account", "deliveries"])
