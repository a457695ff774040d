"""Lesson 09's experiments with the in-progress handler: the lease first, every crash point, the deadline.

All of them run on the simulator's virtual clock, so their seconds are simulated
seconds, the same on any machine. :func:`lease_choices` keeps a live consumer's
lease (sized or extended) against long work; :func:`inprogress_matrix` crashes
the handler before every step; :func:`deadline_situations` sets the claim's
deadline against the work and the broker's patience; :func:`where_the_call_sits`
compares the provider call inside, before and after a committed claim.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE, fault_points, open_transaction_seconds
from idemlib.faults import Crash, FaultPlan
from idemlib.handlers import Handler, ProviderHandler
from idemlib.long_work.inprogress import LEASE_SECONDS, InProgressHandler, RecordsDuckDB, records_database, run_long
from idemlib.messages import Message
from idemlib.provider import PaymentProvider
from idemlib.servers import ready
from idemlib.sim import simulate
from idemlib.stores import postgres_unavailable

WORK_SECONDS = 45.0
"""The lesson's long work (a fraud check before the charge): one and a half leases of 30 s."""


def lease_choices(work_seconds: float = WORK_SECONDS, *, lease: float = LEASE_SECONDS,
                  deadline_seconds: float = 60.0) -> pd.DataFrame:
    """m-7f3 with long work and two consumers, no fault: a lease left shorter than the work, sized, or extended.

    One row per choice with what the broker and the consumers did. A lease that
    runs out while the first consumer still works hands the message to the second,
    which finds the claim in progress and is refused: a delivery spent with no fault.
    """
    parts = 3
    choices: dict[str, tuple[float, InProgressHandler]] = {
        f"lease {lease:g} s, shorter than the work": (lease, InProgressHandler(deadline_seconds)),
        f"lease {2 * lease:g} s, sized to outlast it": (2 * lease, InProgressHandler(deadline_seconds)),
        f"lease {lease:g} s, extended every {work_seconds / parts:g} s": (
            lease, InProgressHandler(deadline_seconds, extend_lease=True, work_parts=parts)),
    }
    rows = {}
    database = RecordsDuckDB()
    for label, (seconds, handler) in choices.items():
        run = run_long(handler, consumers=2, work_seconds=work_seconds, lease=seconds, database=database)
        rows[label] = {"extensions": len(run.result.events("lease extended")), **run.summary()}
    return pd.DataFrame.from_dict(rows, orient="index")


def inprogress_matrix(handlers: dict[str, InProgressHandler], engine: str = "DuckDB", *,
                      lease: float = LEASE_SECONDS) -> pd.DataFrame:
    """Every single fault (a crash before each step, a lost ack) on one delivery of m-7f3, for each labelled handler.

    One row per (handler, fault) with the card charges, the local rows, the
    refused deliveries, the time waited in leases and the outcome; the columns
    ``total charged`` (the card, in dollars) and ``outcome`` suit :func:`idemlib.pictures.plots.plot_crash_matrix`.
    """
    rows = []
    amount = RUNNING_EXAMPLE.body["amount"]
    database = records_database(engine)
    for label, handler in handlers.items():
        for fault, plan in fault_points(handler):
            run = run_long(handler, faults=plan, lease=lease, database=database)
            rows.append({"handler": label, "fault": fault, "total charged": run.card_charges * amount, **run.summary()})
    return pd.DataFrame(rows)


def outcomes_by_engine(matrix: pd.DataFrame, label: str, handlers: dict[str, InProgressHandler]) -> pd.DataFrame:
    """The outcome at each fault point of the handler ``label``: as run on DuckDB in ``matrix``, and on PostgreSQL.

    ``matrix`` and ``handlers`` are what :func:`inprogress_matrix` was given and
    returned. Without a PostgreSQL server the column is left out with a message
    saying how to start one (or, where servers are required, the run fails).
    """
    columns = {"DuckDB": matrix[matrix["handler"] == label].set_index("fault")["outcome"]}
    if ready(postgres_unavailable(), "Only DuckDB is shown."):
        on_postgres = inprogress_matrix({label: handlers[label]}, "PostgreSQL")
        columns["PostgreSQL"] = on_postgres.set_index("fault")["outcome"]
    return pd.DataFrame(columns)


def deadline_situations(deadlines: Iterable[float] = (15.0, 30.0, 60.0, 300.0), *,
                        work_seconds: float = WORK_SECONDS, lease: float = LEASE_SECONDS) -> pd.DataFrame:
    """What claim deadlines shorter and longer than the work do, with a live consumer that extends its lease.

    *crashed after its claim*: the consumer dies right after claiming, leaving an
    in-progress record; *second copy while at work*: the producer published m-7f3
    twice, and the copy reaches a second consumer while the first is still working
    (extending its lease stops redeliveries, not copies).
    """
    parts = 3
    situations: dict[str, dict[str, Any]] = {
        "crashed after its claim": {"faults": FaultPlan(crashes=[Crash("work")])},
        "second copy while at work": {"messages": [RUNNING_EXAMPLE, RUNNING_EXAMPLE], "consumers": 2},
    }
    rows = []
    database = RecordsDuckDB()
    for deadline in deadlines:
        handler = InProgressHandler(deadline, extend_lease=True, work_parts=parts)
        for situation, setup in situations.items():
            run = run_long(handler, lease=lease, work_seconds=work_seconds, database=database, **setup)
            rows.append({"deadline (s)": deadline, "situation": situation, **run.summary()})
    return pd.DataFrame(rows)


def heartbeat_situations(deadline_seconds: float = 20.0, *, work_seconds: float = WORK_SECONDS,
                         lease: float = LEASE_SECONDS, parts: int = 3) -> pd.DataFrame:
    """Section 4's two situations with a deadline shorter than the work, without and with a heartbeat.

    The heartbeat moves the claim's deadline ``deadline_seconds`` ahead before each of
    ``parts`` parts of the work (and extends the lease with it), on the condition that
    the claim number is still its own.
    """
    handlers = {"no heartbeat (lease extended)": InProgressHandler(deadline_seconds, extend_lease=True, work_parts=parts),
                f"heartbeat every {work_seconds / parts:g} s": InProgressHandler(deadline_seconds, heartbeat=True,
                                                                               work_parts=parts)}
    situations: dict[str, dict[str, Any]] = {
        "crashed after its claim": {"faults": FaultPlan(crashes=[Crash("work")])},
        "second copy while at work": {"messages": [RUNNING_EXAMPLE, RUNNING_EXAMPLE], "consumers": 2},
    }
    rows = []
    database = RecordsDuckDB()
    for label, handler in handlers.items():
        for situation, setup in situations.items():
            run = run_long(handler, lease=lease, work_seconds=work_seconds, database=database, **setup)
            rows.append({"claim": label, "situation": situation, **run.summary()})
    return pd.DataFrame(rows)


def where_the_call_sits(messages: list[Message], *, provider_seconds: float = 2.0, step_seconds: float = 0.05,
                        ack_loss_rate: float = 0.2, seed: int = 7) -> pd.DataFrame:
    """The provider call inside the open transaction, before it, or between a committed claim and the completion.

    Every handler sends the derived key. The table gives how long, on average, a
    delivery holds a database transaction open (simulated seconds), how many calls
    reached the provider and how many charges it made, under the same lost acks.
    """
    timings = {step: step_seconds for step in ("begin", "record id", "charge", "commit", "ack", "claim", "work",
                                               "mark completed")}
    timings["call provider"] = provider_seconds
    handlers: dict[str, Handler] = {"call inside the transaction": ProviderHandler("inside"),
                                    "call before the transaction": ProviderHandler("before"),
                                    "in-progress record": InProgressHandler(60.0)}
    rows = {}
    database = RecordsDuckDB()
    for label, handler in handlers.items():
        database.empty()
        provider = PaymentProvider()
        run = simulate(handler, messages, faults=FaultPlan(ack_loss_rate=ack_loss_rate, seed=seed), provider=provider,
                       step_seconds=timings, database=database)
        # The in-progress record opens its one transaction and commits it within the "mark completed" step.
        held = open_transaction_seconds(run.trace)
        rows[label] = {"simulated seconds a transaction stays open": round(float(held.mean()) if not held.empty else 0.0, 2),
                       "calls to the provider": len(run.events("provider answered")),
                       "charges at the provider": len(provider.charges), "payments owed": len(messages)}
    return pd.DataFrame.from_dict(rows, orient="index")
