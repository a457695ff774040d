"""Reviewing a design of the mortgage case (lesson 12): run it under faults and answer the seed's five questions.

A :class:`Design` is one setting of the account service (its guard, its payout key,
how long the payment system keeps keys). Every function here runs designs on the
course's simulator and reports what they did to loan accounts and payouts, so each
cell of the lesson's tables comes from a run, never from a hand-written verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from idemlib.explore import fault_points, interleavings
from idemlib.facts import fact_seconds
from idemlib.faults import Crash, FaultPlan, LostResponse
from idemlib.handlers import Context, Handler, Steps
from idemlib.messages import Message
from idemlib.case_study.mortgage import (
    APPLICATION_42,
    AccountService,
    LoanBank,
    open_account_message,
)
from idemlib.provider import Behaviour, PaymentProvider, Response, behaviours
from idemlib.sim import simulate


class RecordingPaymentSystem(PaymentProvider):
    """The payment system, also noting every idempotency key it is sent (None when none is)."""

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(behaviour=behaviour)
        self.keys_seen: list[str | None] = []

    def charge(self, key: str | None, *, order_id: int, amount: int) -> Response:
        self.keys_seen.append(key)
        return super().charge(key, order_id=order_id, amount=amount)

    @property
    def payouts(self) -> int:
        """Loans really paid out."""
        return len(self.charges)


@dataclass(frozen=True)
class Design:
    """One way to build the account service: its guard, its payout key, and how long the payment system keeps keys."""

    label: str
    guard: str = "inbox"
    payout_key: str = "derived"
    key_hours: float = fact_seconds("stripe_v1_key_min_age") / 3600

    def __post_init__(self) -> None:
        hours = self.key_hours
        if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not 0 < hours <= float("inf"):
            raise ValueError(f"key_hours must be a number of hours above 0 (float('inf') for keys kept forever), "
                             f"not {hours!r}")
        self.service()  # an unknown guard or payout key is refused here, naming the accepted ones

    def service(self) -> AccountService:
        """A fresh account service (a fresh process: nothing in memory)."""
        return AccountService(self.guard, self.payout_key)

    def bank(self) -> LoanBank:
        """An empty database, with the business constraint where this design relies on it."""
        bank = _bank(unique_per_application=self.guard == "unique application")
        bank.empty()
        return bank

    def payment_system(self) -> RecordingPaymentSystem:
        """A fresh payment system keeping keys ``key_hours``."""
        return RecordingPaymentSystem(dataclasses.replace(behaviours()["stripe-v1"],
                                                          retention_seconds=self.key_hours * 3600))


@functools.cache
def _bank(*, unique_per_application: bool) -> LoanBank:
    # One database per schema, emptied before each run: opening a DuckDB database costs
    # more than the run itself, and the simulator rolls back every session it opened.
    return LoanBank(unique_per_application=unique_per_application)


MISTAKES = (
    Design("1 · check outside the transaction", guard="check outside"),
    Design("2 · key made up on each attempt", payout_key="per attempt"),
    Design("3 · deduplication in memory only", guard="memory"),
    Design("4 · keys kept too briefly", key_hours=1),
    Design("5 · key not passed on", payout_key="none"),
)
"""The seed's five typical mistakes, each one setting away from the safe inbox."""

SAFE = (
    Design("inbox"),
    Design("unique account per application", guard="unique application"),
    Design("aggregate version", guard="version"),
)
"""The three safe designs: an inbox, a business unique constraint, an aggregate version."""


@dataclass(frozen=True)
class Outcome:
    """What one run did to the bank and the money: accounts opened, loans paid out, keys sent, dead letters."""

    accounts: int
    payouts: int
    keys: tuple[str | None, ...]
    dead_letters: int

    @property
    def once(self) -> bool:
        """One account and one payout: the only right answer."""
        return self.accounts == 1 and self.payouts == 1

    def __str__(self) -> str:
        return f"{self.accounts} account{'s' * (self.accounts != 1)}, {self.payouts} payout{'s' * (self.payouts != 1)}"


def run(design: Design, faults: FaultPlan | None = None, *, messages: tuple[Message, ...] = (APPLICATION_42,),
        visibility_timeout: float = 30.0, max_deliveries: int = 5, consumers: int = 1,
        step_seconds: Mapping[str, float] | None = None) -> Outcome:
    """Deliver ``messages`` to ``design``'s service under ``faults`` until each is acked or dead-lettered."""
    payments = design.payment_system()
    bank = design.bank()
    result = simulate(design.service(), messages, faults=faults, database=bank, provider=payments,
                      visibility_timeout=visibility_timeout, max_deliveries=max_deliveries, consumers=consumers,
                      step_seconds=step_seconds)
    return Outcome(len(bank.accounts()), payments.payouts, tuple(payments.keys_seen), len(result.dead_letters))


@functools.cache
def crash_outcomes(design: Design) -> dict[str, Outcome]:
    """``design`` crashed before each of its steps in turn (and its ack lost), each run to the end.

    Computed once per design (the runs are deterministic): do not modify the result.
    """
    return {fault: run(design, plan) for fault, plan in fault_points(design.service())}


def crash_matrix(design: Design) -> pd.DataFrame:
    """The crash points of ``design`` as a table: accounts opened and loans paid out after each."""
    rows = [(design.label, fault, outcome.accounts, outcome.payouts)
            for fault, outcome in crash_outcomes(design).items()]
    return pd.DataFrame(rows, columns=["design", "fault", "accounts", "payouts"])


@functools.cache
def race(design: Design) -> pd.DataFrame:
    """Every interleaving of two consumers holding the same message (lesson 03's explorer): accounts opened.

    The payout is left out of the race: the derived key already makes a second call
    harmless (question 5), and one step fewer is a third of the interleavings. Runs are
    deterministic, so each design's table is computed once and shared: do not modify it.
    """
    service = AccountService(design.guard, design.payout_key, payout=False)
    return interleavings(service, APPLICATION_42, design.bank()).rename(columns={"charges": "accounts"})


SLOW_SECONDS = 45.0
"""How long the first consumer in :func:`at_once` pauses before its second step: longer than its 30 s lease."""


def at_once(design: Design) -> Outcome:
    """Two consumers hold the message at once (one run, no crash).

    Every delivery pauses :data:`SLOW_SECONDS` before its second step, so the first
    consumer's lease runs out after its first step and the broker hands the message to
    the second while the first still works.
    """
    return run(design, consumers=2, step_seconds={design.service().steps[1]: SLOW_SECONDS})


def _after_payout(design: Design) -> Crash:
    """A crash just after the payout call, before the step that follows it."""
    steps = design.service().steps
    return Crash(steps[steps.index("pay out") + 1])


OUTAGE_HOURS = 3.0
"""How long after the first attempt the retry in question 4 comes: the lease of a consumer that was down."""


@functools.cache
def five_questions(design: Design, outage_hours: float = OUTAGE_HOURS) -> pd.Series:
    """The seed's five questions for ``design``, each answered by running it: the measured result and yes or no.

    1. two deliveries (an ack lost; a restart after the commit; two consumers at once,
    :func:`at_once`); 2. the payout's answer
    lost, so the call is retried; 3. a crash before each step (the loan accounts only:
    the payout is questions 2, 4 and 5); 4. a crash just after the payout whose retry
    comes ``outage_hours`` later; 5. the same crash, retried at once. Questions 4 and
    5 judge the payouts (the system called); the accounts are shown beside them.
    Computed once per design and outage (the runs are deterministic): do not modify the result.
    """
    crashes = crash_outcomes(design)
    after_payout = _after_payout(design)
    twice, restarted, together = crashes["ack lost"], crashes["crash before ack"], at_once(design)
    crash_after_call = crashes[f"crash before {after_payout.before}"]
    answered_late = run(design, FaultPlan(lost_responses=[LostResponse()]))
    outage = run(design, FaultPlan(crashes=[after_payout]), visibility_timeout=outage_hours * 3600)
    keys = set(answered_late.keys)
    wrong = {fault: outcome.accounts for fault, outcome in crashes.items() if outcome.accounts != 1}
    answers = {
        "What happens when this message arrives twice?":
            (twice.once and restarted.once and together.once,
             f"ack lost: {twice}; restart after the commit: {restarted}; two consumers at once: {together}"),
        "Who creates the idempotency key, and does it stay the same on retry?":
            (len(keys) == 1 and None not in keys and answered_late.payouts == 1,
             "no key sent" if keys == {None} else
             f"{len(keys)} distinct key{'s' * (len(keys) > 1)} over {len(answered_late.keys)} calls: "
             f"{answered_late.payouts} payout{'s' * (answered_late.payouts > 1)}"),
        "Is the processing record written in the same transaction as the data?":
            (not wrong, "every crash point opens one account" if not wrong else
             "; ".join(f"{fault}: {accounts} accounts" for fault, accounts in wrong.items())),
        "How long do we keep keys, and is it enough for the longest outage?":
            (outage.payouts == 1, f"keys kept {design.key_hours:g} h, retry {outage_hours:g} h later: {outage}"),
        "Do we pass the key on to the systems we call?":
            (crash_after_call.payouts == 1 and None not in crash_after_call.keys,
             f"{'no key sent; ' if None in crash_after_call.keys else ''}"
             f"crash after the payout, retried: {crash_after_call}"),
    }
    return pd.Series({question: f"{'yes' if ok else 'NO'}: {detail}" for question, (ok, detail) in answers.items()},
                     name=design.label)


def review(designs: tuple[Design, ...], *, outage_hours: float = OUTAGE_HOURS) -> pd.DataFrame:
    """The five questions (rows) for each design (columns), every cell from a run.

    Question 4's retry comes ``outage_hours`` after the first attempt.
    """
    return pd.concat([five_questions(design, outage_hours) for design in designs], axis=1)


def applications(count: int, *, seed: int = 12) -> list[Message]:
    """A day of approvals: ``count`` open-account messages, one per application, seeded amounts."""
    rng = random.Random(seed)
    return [open_account_message(f"m-{number}", number, rng.randrange(50_000, 800_000, 1_000))
            for number in range(1, count + 1)]


class SometimesSlow(Handler):
    """``handler``, except that opening the account is slow for a seeded share of the applications.

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


RETRY_POLICIES = {
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


SCENARIOS = {
    MISTAKES[0].label: ("two consumers hold m-42 at once (the first slow, its lease runs out)", at_once),
    MISTAKES[1].label: ("the payment system's answer is lost, the payout retried",
                        lambda d: run(d, FaultPlan(lost_responses=[LostResponse()]))),
    MISTAKES[2].label: ("the service restarts after the commit, before the ack",
                        lambda d: run(d, FaultPlan(crashes=[Crash("ack")]))),
    MISTAKES[3].label: (f"a crash after the payout; the retry comes {OUTAGE_HOURS:g} h later",
                        lambda d: run(d, FaultPlan(crashes=[_after_payout(d)]), visibility_timeout=OUTAGE_HOURS * 3600)),
    MISTAKES[4].label: ("a crash after the payout, before the commit; retried at once",
                        lambda d: run(d, FaultPlan(crashes=[_after_payout(d)]))),
}
"""For each mistake, the failure that exposes it, as a function of the design it is run on."""


def reproduce_mistakes(fix: Design = SAFE[0]) -> pd.DataFrame:
    """Each mistake under the failure that exposes it, then ``fix`` under the very same failure."""
    rows = []
    for mistake in MISTAKES:
        scenario, play = SCENARIOS[mistake.label]
        wrong, right = play(mistake), play(fix)
        rows.append((mistake.label, scenario, wrong.accounts, wrong.payouts, right.accounts, right.payouts))
    return pd.DataFrame(rows, columns=["mistake", "failure", "accounts", "payouts", "accounts, fixed", "payouts, fixed"])
