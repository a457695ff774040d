"""Reviewing a design of the mortgage case (lesson 12): run it under faults and answer the five questions of section 7.

A :class:`Design` is one setting of the account service (its guard, its payout key,
how long it keeps its own processed IDs, whether it records its payout intent and
looks an unconfirmed payout up before sending it again). The payment system is not
the team's to tune: it forgets a key once it is 24 hours old, as Stripe's v1 API may. Every function
here runs designs on the course's simulator and reports what they did to loan
accounts and payouts, so each cell of the lesson's tables comes from a run, never
from a hand-written verdict.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from idemlib.case_study.loan_bank import LoanBank
from idemlib.case_study.mortgage import APPLICATION_42, AccountService, open_account_message
from idemlib.explore import fault_points
from idemlib.facts import fact_number
from idemlib.faults import Crash, FaultPlan, LostAck, LostResponse
from idemlib.handlers import Handler
from idemlib.messages import Message
from idemlib.provider import Behaviour, PaymentProvider, Response, behaviours
from idemlib.sim import RunResult, simulate
from idemlib.stores import PaymentsDatabase


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

    def paid(self, application_id: int) -> bool:
        """Whether this application's loan has been paid out: the lookup a reconciliation makes.

        The model's assumption: the payment system keeps every payout it made, findable by the
        application it was for, long after it has forgotten the idempotency key that came with it.
        """
        return bool(self.charges_for(application_id))


@dataclass(frozen=True)
class Design:
    """One way to build the account service: its guard, its payout key, how long it keeps its processed IDs
    (``keep_hours``; ``math.inf``, the default, for never pruned), and whether it reconciles (``reconcile``):
    records the payout intent with the account, and looks an intent left unconfirmed up at the payment
    system before sending the payout again."""

    label: str
    guard: str = "inbox"
    payout_key: str = "derived"
    keep_hours: float = math.inf
    reconcile: bool = False

    def __post_init__(self) -> None:
        hours = self.keep_hours
        # numbers.Real takes numpy's integers and floats too (what a pandas computation returns).
        if isinstance(hours, (bool, np.bool_)) or not isinstance(hours, numbers.Real) or not 0 < hours <= math.inf:
            raise ValueError(f"keep_hours must be a number of hours above 0 (math.inf for IDs kept forever), "
                             f"not {hours!r}")
        if isinstance(self.reconcile, np.bool_):  # what a pandas or numpy comparison returns
            object.__setattr__(self, "reconcile", bool(self.reconcile))
        if not isinstance(self.reconcile, bool):
            raise ValueError(f"reconcile must be True or False, not {self.reconcile!r}")
        self.service()  # an unknown guard or payout key is refused here, naming the accepted ones

    def service(self, payments: RecordingPaymentSystem | None = None) -> AccountService:
        """A fresh account service (a fresh process: nothing in memory), looking payouts up at ``payments``."""
        look_up = None
        if self.reconcile:
            look_up = payments.paid if payments is not None else _no_payment_system
        return AccountService(self.guard, self.payout_key, keep_hours=self.keep_hours, look_up=look_up)

    def bank(self) -> LoanBank:
        """An empty database, with the business constraint where this design relies on it."""
        bank = _bank(unique_per_application=self.guard == "unique application")
        bank.empty()
        return bank

    def payment_system(self) -> RecordingPaymentSystem:
        """A fresh payment system, keeping keys as Stripe's v1 API may: 24 hours."""
        return RecordingPaymentSystem(behaviours()["stripe-v1"])

    def parts(self) -> tuple[AccountService, LoanBank, RecordingPaymentSystem]:
        """A fresh run's parts (an explorer's setup): the service, its empty database and its payment system."""
        payments = self.payment_system()
        return self.service(payments), self.bank(), payments


def _no_payment_system(application_id: int) -> bool:
    raise RuntimeError("this service was built without a payment system to look payouts up at: "
                       "use Design.service(payments)")


@functools.cache
def _bank(*, unique_per_application: bool) -> LoanBank:
    # One database per schema, emptied before each run: opening a DuckDB database costs
    # more than the run itself, and the simulator rolls back every session it opened.
    return LoanBank(unique_per_application=unique_per_application)


MISTAKES = (
    Design("mistake 1: check outside the transaction", guard="check outside"),
    Design("mistake 2: key made up on each attempt", payout_key="per attempt"),
    Design("mistake 3: deduplication in memory only", guard="memory"),
    Design("mistake 4: IDs kept too briefly", keep_hours=1),
    Design("mistake 5: key not passed on", payout_key="none"),
)
"""The five typical mistakes, each one setting away from the safe inbox."""

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
    lookups: int = 0
    """Payouts looked up at the payment system (a reconciling service's, when it found an intent unconfirmed)."""

    @property
    def once(self) -> bool:
        """One account and one payout: the only right answer."""
        return self.accounts == 1 and self.payouts == 1

    def __str__(self) -> str:
        return f"{self.accounts} account{'s' * (self.accounts != 1)}, {self.payouts} payout{'s' * (self.payouts != 1)}"


def run(design: Design, faults: FaultPlan | None = None, *, messages: tuple[Message, ...] = (APPLICATION_42,),
        visibility_timeout: float = 30.0, max_deliveries: int = 5, consumers: int = 1,
        step_seconds: Mapping[str, float] | None = None, rate_limit_first_payout: bool = False) -> Outcome:
    """Deliver ``messages`` to ``design``'s service under ``faults`` until each is acked or dead-lettered.

    ``rate_limit_first_payout`` has the payment system answer the first payout call 429 (rate
    limited). Stripe's rate limiters run before its idempotency layer: nothing is paid and
    nothing is saved under the key, so the payout is certainly called again.
    """
    payments = design.payment_system()
    if rate_limit_first_payout:
        payments.refuse_next(status=RATE_LIMITED)
    bank = design.bank()
    result = simulate(design.service(payments), messages, faults=faults, database=bank, provider=payments,
                      visibility_timeout=visibility_timeout, max_deliveries=max_deliveries, consumers=consumers,
                      step_seconds=step_seconds)
    lookups = result.trace[(result.trace["event"] == "step") & (result.trace["detail"] == "look up payout")]
    return Outcome(len(bank.accounts()), payments.payouts, tuple(payments.keys_seen), len(result.dead_letters),
                   len(lookups))


@functools.cache
def crash_outcomes(design: Design) -> dict[str, Outcome]:
    """``design`` crashed before each of its steps in turn (and its ack lost), each run to the end.

    Computed once per design (the runs are deterministic): do not modify the result.
    """
    return {fault: run(design, plan) for fault, plan in fault_points(design.service())}


def accounts_and_payouts(service: Handler, bank: PaymentsDatabase, result: RunResult) -> dict[str, object]:
    """A crash matrix's columns for the account service (:func:`idemlib.explore.crash_matrix`'s ``measure``):
    the accounts the run opened and the loans it paid out."""
    assert isinstance(bank, LoanBank) and isinstance(result.provider, RecordingPaymentSystem)
    return {"accounts": len(bank.accounts()), "payouts": result.provider.payouts}


def racing(design: Design) -> tuple[AccountService, Message, LoanBank]:
    """Two consumers holding the same message, for :func:`idemlib.explore.interleavings`: the service, the
    approval and an empty database.

    The payout is left out of the race: the derived key already makes a second call
    harmless (question 5), and one step fewer is a third of the interleavings.
    """
    return AccountService(design.guard, design.payout_key, payout=False), APPLICATION_42, design.bank()


SLOW_SECONDS = 45.0
"""How long each delivery in :func:`at_once` pauses before its second step: longer than its lease."""
AT_ONCE_LEASE = 30.0
"""The lease (visibility timeout) of :func:`at_once`'s deliveries."""


def at_once(design: Design) -> Outcome:
    """Two consumers hold the message at once (one run, no crash).

    Every delivery pauses :data:`SLOW_SECONDS` before its second step, so the first
    consumer's lease runs out after its first step and the broker hands the message to
    the second while the first still works.
    """
    return run(design, consumers=2, step_seconds={design.service().steps[1]: SLOW_SECONDS},
               visibility_timeout=AT_ONCE_LEASE)


def _after_payout(design: Design) -> Crash:
    """A crash just after the payout call, before the step that follows it."""
    steps = design.service().steps
    return Crash(steps[steps.index("pay out") + 1])


RATE_LIMITED = int(fact_number("stripe_rate_limit_status"))
"""The status of a rate-limited request (429), which Stripe answers before its idempotency layer."""
KEY_HOURS = behaviours()["stripe-v1"].retention_seconds / 3600
"""How long the payment system keeps an idempotency key: Stripe v1 may remove it at 24 hours."""

OUTAGE_HOURS = 3.0
"""How late the redelivery and the retried payout of question 4 come: the lease of a consumer that was down."""

QUESTIONS = (
    "What happens when this message arrives twice?",
    "Who creates the idempotency key, and does it stay the same on retry?",
    "Is the processing record written in the same transaction as the data?",
    "How long do we keep keys, and is it enough for the longest outage?",
    "Do we pass the key on to the systems we call?",
)
"""The five questions of lesson 12's section 7, in its order."""

QUESTION_RUNS = (
    f"an ack lost; a restart after the commit; two consumers holding it at once: every delivery pauses "
    f"{SLOW_SECONDS:g} s after its first step, longer than its {AT_ONCE_LEASE:g} s lease, so the broker hands the "
    "message to the second consumer while the first has neither committed anything nor called the payment system",
    f"the payout's answer lost; the payout answered {RATE_LIMITED} (rate limited); each call repeated",
    "a crash before every step, and the ack lost",
    f"the ack lost while the service is down, the message back hours later ({OUTAGE_HOURS:g} h unless said "
    "otherwise); a crash just after the payout call, retried as late",
    "a crash just after the payout call, retried at once",
)
"""What each of :data:`QUESTIONS` is answered by: the runs :func:`answer_runs` makes, in words a design can be
predicted from."""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


@functools.cache
def answer_runs(design: Design, outage_hours: float) -> tuple[tuple[bool, str, str], ...]:
    """For each question: whether the runs come out right, the wrong outcome in a few words, and what was measured.

    Each detail names only what its verdict judges, so no "yes" stands beside a wrong count.
    """
    crashes = crash_outcomes(design)
    after_payout = _after_payout(design)
    twice, restarted, together = crashes["ack lost"], crashes["crash before ack"], at_once(design)
    crash_after_call = crashes[f"crash before {after_payout.before}"]
    # Two retries of the payout: after its answer was lost, and after a 429 (a reconciling
    # service finds nothing paid then, so it calls again, and the key it sends shows).
    retried = (run(design, FaultPlan(lost_responses=[LostResponse()])), run(design, rate_limit_first_payout=True))
    late_redelivery = run(design, FaultPlan(lost_acks=[LostAck()]), visibility_timeout=outage_hours * 3600)
    late_payout = run(design, FaultPlan(crashes=[after_payout]), visibility_timeout=outage_hours * 3600)
    keys = {key for outcome in retried for key in outcome.keys}
    calls = sum(len(outcome.keys) for outcome in retried)
    paid = max(outcome.payouts for outcome in retried)
    arrivals = {"ack lost": twice, "restart after the commit": restarted, "two consumers at once": together}
    doubled = [f"{name}: {outcome}" for name, outcome in arrivals.items() if not outcome.once]
    wrong_points = [fault for fault, outcome in crashes.items() if outcome.accounts != 1]
    no_key = None in crash_after_call.keys
    kept = "kept forever" if design.keep_hours == math.inf else f"kept {design.keep_hours:g} h"
    reconciled = "; intent recorded, looked up" if design.reconcile else ""
    return (
        (not doubled, doubled[0] if doubled else "",
         "; ".join(f"{name}: {outcome}" for name, outcome in arrivals.items())),
        (all(len(set(outcome.keys)) == 1 for outcome in retried) and None not in keys and paid == 1,
         "no key sent" if None in keys else
         "a new key per call" if any(len(set(o.keys)) > 1 for o in retried) else _plural(paid, "payout"),
         f"{'no key sent; ' if None in keys else ''}answer lost, then a {RATE_LIMITED} (rate limited before the "
         f"idempotency layer), each retried: "
         f"{_plural(len(keys - {None}), 'distinct key')} over {calls} calls; at most {_plural(paid, 'payout')}"),
        (not wrong_points, f"{crashes[wrong_points[0]].accounts} accounts, {wrong_points[0]}" if wrong_points else "",
         "every crash point opens one account" if not wrong_points else
         "; ".join(f"{fault}: {_plural(crashes[fault].accounts, 'account')}" for fault in wrong_points)),
        (late_redelivery.once and late_payout.payouts == 1,
         f"{_plural(late_redelivery.accounts, 'account')} after the late redelivery" if not late_redelivery.once
         else f"{_plural(late_payout.payouts, 'payout')} after the late retry",
         f"IDs {kept}; redelivered {outage_hours:g} h later: {late_redelivery}; payout retried {outage_hours:g} h "
         f"later (the payment system forgets a key {KEY_HOURS:g} h old{reconciled}): "
         f"{_plural(late_payout.payouts, 'payout')}"),
        (crash_after_call.payouts == 1 and not no_key,
         "no key sent" if no_key else _plural(crash_after_call.payouts, "payout"),
         f"{'no key sent; ' if no_key else ''}crash after the payout, retried at once: "
         f"{_plural(crash_after_call.payouts, 'payout')}"),
    )


def payout_after_key_window(hours: float = 30.0) -> pd.DataFrame:
    """The case the payout intent is for: a crash just after the payment system paid, before the service recorded it,
    and the message back ``hours`` later, after the payment system has forgotten the key.

    The inbox as section 5 builds it, and the same inbox reconciling (its intent recorded with
    the account, an unconfirmed one looked up). One row each: where the crash struck, loans
    paid out, payout calls, lookups, accounts.
    """
    rows = []
    for design in (SAFE[0], Design("inbox, payout intent recorded and looked up", reconcile=True)):
        crash = _after_payout(design)
        outcome = run(design, FaultPlan(crashes=[crash]), visibility_timeout=hours * 3600)
        rows.append((design.label, f"after the payout, before {crash.before}", outcome.payouts, len(outcome.keys),
                     outcome.lookups, outcome.accounts))
    return pd.DataFrame(rows, columns=["design", "crash", "payouts", "payout calls", "lookups", "accounts"]
                        ).set_index("design")


def five_questions(design: Design, outage_hours: float = OUTAGE_HOURS) -> pd.Series:
    """The five questions for ``design``, each answered by running it: yes or NO, then what was measured.

    1. two deliveries (an ack lost; a restart after the commit; two consumers at once,
    :func:`at_once`); 2. the payout's answer lost, and the payout answered 429 (rate limited
    before the payment system's idempotency layer), each call retried; 3. a crash
    before each step (the loan accounts; the payout is questions 2, 4 and 5); 4. the ack
    lost and the message redelivered ``outage_hours`` later, and a crash just after the
    payout retried as late; 5. the same crash, retried at once.
    """
    return pd.Series({question: f"{'yes' if ok else 'NO'}: {detail}"
                      for question, (ok, _, detail) in zip(QUESTIONS, answer_runs(design, outage_hours))},
                     name=design.label)


def review(designs: tuple[Design, ...], *, outage_hours: float = OUTAGE_HOURS) -> pd.DataFrame:
    """The five questions (columns Q1-Q5) for each design (rows): "yes", or "no" and the wrong outcome in a few words.

    Question 4's redelivery and retry come ``outage_hours`` after the first attempt;
    :func:`five_questions` gives each run's full measurement.
    """
    rows = {design.label: ["yes" if ok else f"no: {short}" for ok, short, _ in answer_runs(design, outage_hours)]
            for design in designs}
    return pd.DataFrame.from_dict(rows, orient="index", columns=[f"Q{n}" for n in range(1, len(QUESTIONS) + 1)])


SCENARIOS = {
    MISTAKES[0].label: ("two consumers hold m-42 at once (the first slow, its lease runs out)", at_once),
    MISTAKES[1].label: ("the payment system's answer is lost, the payout retried",
                        lambda d: run(d, FaultPlan(lost_responses=[LostResponse()]))),
    MISTAKES[2].label: ("the service restarts after the commit, before the ack",
                        lambda d: run(d, FaultPlan(crashes=[Crash("ack")]))),
    MISTAKES[3].label: (f"the ack is lost while the service is down; m-42 comes back {OUTAGE_HOURS:g} h later",
                        lambda d: run(d, FaultPlan(lost_acks=[LostAck()]), visibility_timeout=OUTAGE_HOURS * 3600)),
    MISTAKES[4].label: ("a crash after the payout, before the commit; retried at once",
                        lambda d: run(d, FaultPlan(crashes=[_after_payout(d)]))),
}
"""For each mistake, the failure that exposes it, as a function of the design it is run on."""


RESENT_42 = open_account_message("m-42-resent", 42, 250_000)
"""The same approval of application 42 sent again under a new message ID (the approval service's retry made a new
message, or an operator re-sent it by hand): a copy of the business fact that no message ID links to ``m-42``."""
SECOND_42 = open_account_message("m-42-top-up", 42, 50_000, version=2)
"""A legitimate second operation: a top-up loan of \\$50,000 approved for application 42 after its account was
opened (at version 2, the version opening the first account moved the application to)."""


def telling_apart(designs: tuple[Design, ...] = SAFE) -> pd.DataFrame:
    """The runs where the three safe designs differ: the same approval re-sent under a new message ID (right: one
    account, one payout), a legitimate second operation (right: two accounts, two payouts), and a stale command
    that arrives before the application reached its version (right: nothing yet, the command kept to retry)."""
    early = open_account_message("m-42-v2", 42, 250_000, version=2)
    runs = {"approval re-sent under a new ID": ((APPLICATION_42, RESENT_42), (1, 1)),
            "a second, legitimate approval": ((APPLICATION_42, SECOND_42), (2, 2)),
            "version 2 delivered before version 1's account": ((early,), (0, 0))}
    rows = []
    for design in designs:
        for name, (messages, (accounts, payouts)) in runs.items():
            outcome = run(design, messages=messages)
            dead = f", {outcome.dead_letters} dead-lettered" if outcome.dead_letters else ""
            rows.append((design.label, name, f"{outcome}{dead}",
                         (outcome.accounts, outcome.payouts) == (accounts, payouts)))
    table = pd.DataFrame(rows, columns=["design", "run", "outcome", "right"])
    return table.pivot(index="run", columns="design", values="outcome").reindex(columns=[d.label for d in designs]
                                                                              ).reindex(list(runs))


def reproduce_mistakes(fix: Design = SAFE[0]) -> pd.DataFrame:
    """Each mistake under the failure that exposes it, then ``fix`` under the very same failure."""
    rows = []
    for mistake in MISTAKES:
        scenario, play = SCENARIOS[mistake.label]
        wrong, right = play(mistake), play(fix)
        rows.append((mistake.label, scenario, wrong.accounts, wrong.payouts, right.accounts, right.payouts))
    return pd.DataFrame(rows, columns=["mistake", "failure", "accounts", "payouts", "accounts, fixed", "payouts, fixed"])
