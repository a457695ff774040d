"""The real Powertools idempotency utility beside the course's inbox and in-progress record (lesson 09).

:func:`side_by_side` crashes m-7f3 at the points the three consumers share and
tabulates what each did; :func:`powertools_scenarios` measures the library's other
behaviours (expiry, payload validation, a missing key, an orphaned record, a
concurrent duplicate). The library's runs are real (see :mod:`idemlib.long_work.powertools`); the
course's consumers run in the simulator.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler
from idemlib.long_work.inprogress import BACKED_OFF, LEASE_SECONDS, InProgressHandler, RecordsDuckDB, run_long
from idemlib.messages import Message
from idemlib.long_work.powertools import PeerRun, PeerSettings, run_powertools
from idemlib.sim import outcome_of, simulate
from idemlib.stores import DuckDBPayments

CRASH_POINTS: tuple[tuple[str, str | None, str | None, str | None], ...] = (
    ("no fault", None, None, None),
    ("crash before the claim", "begin", "claim", "claim"),
    ("crash after the claim", "charge", "call provider", "charge"),
    ("crash after the charge", "commit", "mark completed", "mark completed"),
    ("crash before the ack", "ack", "ack", "ack"),
    ("ack lost", None, None, None),
)
"""The crash points the comparison shares, and the step each consumer has there: (point, inbox, in progress, library).

The inbox's "claim" is its ``record id`` inside the open transaction and its
"completion" is its commit; the in-progress handler's charge is its provider call.
"""


def _plan(point: str, step: str | None) -> FaultPlan:
    if point == "ack lost":
        return FaultPlan(lost_acks=[LostAck()])
    return FaultPlan(crashes=[Crash(step)]) if step else FaultPlan()


def side_by_side(peers: dict[str, PeerSettings] | None, *, lease: float = 0.2,
                 course_deadline_leases: float = 2.0) -> pd.DataFrame:
    """m-7f3 crashed at each shared point, handled by the inbox, the in-progress handler and the library.

    The course's consumers run in the simulator with a 30 s lease; each library
    configuration in ``peers`` runs for real with a lease of ``lease`` seconds (None:
    the library is left out). One row per (consumer, crash point), in the columns
    :func:`idemlib.pictures.plots.plot_crash_matrix` reads.
    """
    jobs = [(label, point, settings, _plan(point, peer_step))
            for label, settings in (peers or {}).items() for point, _, _, peer_step in CRASH_POINTS]
    # Started first: the library's runs mostly wait out real leases, and the course's simulated runs fill that time.
    started = _in_parallel([(([RUNNING_EXAMPLE], settings), {"faults": plan, "lease": lease})
                            for _, _, settings, plan in jobs])
    rows = []
    handler = InProgressHandler(course_deadline_leases * LEASE_SECONDS)
    inbox_db, records_db = DuckDBPayments(), RecordsDuckDB()
    for point, inbox_step, course_step, _ in CRASH_POINTS:
        inbox_db.empty()
        inbox = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=_plan(point, inbox_step), database=inbox_db)
        charges = len(inbox.payments)
        rows.append(("inbox (one transaction)", point, charges, 0, 0.0, len(inbox.dead_letters), outcome_of(charges)))
        course = run_long(handler, faults=_plan(point, course_step), database=records_db)
        rows.append((f"in-progress record, deadline {course_deadline_leases:g} leases", point, course.card_charges,
                     course.refused, course.blocked_leases, len(course.result.dead_letters), course.outcome))
    for (label, point, _, _), run in zip(jobs, (future.result() for future in started)):
        summary = run.summary()
        rows.append((label, point, summary["charges"], summary["refused"], summary["blocked (leases)"],
                     summary["dead-lettered"], summary["outcome"]))
    table = pd.DataFrame(rows, columns=["handler", "fault", "charges", "refused", "blocked (leases)", "dead-lettered",
                                        "outcome"])
    table["total charged"] = table["charges"] * RUNNING_EXAMPLE.body["amount"]
    order = list(dict.fromkeys(table["handler"]))
    return table.sort_values("handler", key=lambda names: names.map(order.index), kind="stable").reset_index(drop=True)


def _in_parallel(calls: list[tuple[tuple[Any, ...], dict[str, Any]]], workers: int = 6) -> list[Future[PeerRun]]:
    """Start several independent runs at once: each mostly waits for leases and children, so they overlap well.

    Every run has its own broker, clock and key prefix; only the machine is shared.
    The runs go on in the background; each future gives its run when it ends.
    """
    pool = ThreadPoolExecutor(max_workers=workers)
    started = [pool.submit(run_powertools, *args, **kwargs) for args, kwargs in calls]
    pool.shutdown(wait=False)  # no more runs to submit; the pool's threads end with the last one
    return started


def compare_outcomes(table: pd.DataFrame) -> pd.DataFrame:
    """The side-by-side table as one row per crash point and one column per consumer, each cell saying what happened."""
    cells = table.assign(said=[
        f"{row['outcome']}: {row['charges']} charge{'s' if row['charges'] != 1 else ''}"
        + (f", {row['refused']} refused" if row["refused"] else "") + (", dead-lettered" if row["dead-lettered"] else "")
        for row in table.to_dict("records")])
    points = [point for point, *_ in CRASH_POINTS]
    return cells.pivot(index="fault", columns="handler", values="said").loc[points, list(dict.fromkeys(table["handler"]))]


def powertools_scenarios(lease: float = 0.2) -> pd.DataFrame:
    """The library's behaviours the lesson measures beyond :func:`side_by_side`, each a real run on the real Redis.

    One row per scenario: what the customers owe, what was charged, how many
    deliveries were refused or rejected, what was dead-lettered, which errors the
    library raised and what it warned. The short-expiry run waits out real seconds: a record lives at
    least one whole second (Redis counts its life in seconds), and the lease leaves a
    second's margin for a slow machine.
    """
    reused = [RUNNING_EXAMPLE, Message.charge("m-7f3", order_id=1042, amount=50)]
    no_key = Message(None, {"order_id": 1042, "amount": 40})
    scenarios: list[tuple[str, list[Message], PeerSettings, dict[str, Any]]] = [
        ("deadline, two crashes after the claim", [RUNNING_EXAMPLE], PeerSettings(deadline_ms=50),
         {"faults": FaultPlan(crashes=[Crash("charge"), Crash("charge", delivery=2)])}),
        ("expiry 1 s, ack lost, lease 2 s", [RUNNING_EXAMPLE], PeerSettings(expires_after_seconds=1),
         {"faults": _plan("ack lost", None), "lease": 2.0}),
        ("ID reused for $50, payload validation off", reused, PeerSettings(), {}),
        ("ID reused for $50, payload validation on", reused, PeerSettings(payload_validation=True), {}),
        ("no key, raise_on_no_idempotency_key off, ack lost", [no_key], PeerSettings(), {"faults": _plan("ack lost", None)}),
        ("no key, raise_on_no_idempotency_key on", [no_key], PeerSettings(raise_on_no_key=True), {}),
        ("duplicate published, both copies held at once", [RUNNING_EXAMPLE, RUNNING_EXAMPLE], PeerSettings(deadline_ms=5000),
         {"overlap_at": "charge", "lease": 1.0}),  # the first copy's lease outlasts the second copy's whole run
    ]
    rows = []
    started = _in_parallel([((messages, settings), {"lease": lease, **options})
                            for _, messages, settings, options in scenarios])
    for (name, messages, _, _), run in zip(scenarios, (future.result() for future in started)):
        owed = sum({(m.message_id, m.body["amount"]): m.body["amount"] for m in messages}.values())  # each payload once
        summary = run.summary()
        raised = run.trace[run.trace["event"].isin([BACKED_OFF, "rejected", "failed"])]["detail"]
        rows.append({"scenario": name, "owed ($)": owed, "charged ($)": summary["charged ($)"], "refused": summary["refused"],
                     "rejected": summary["rejected"], "failed": summary["failed"], "dead-lettered": summary["dead-lettered"],
                     "raised": ", ".join(dict.fromkeys(detail.split(":")[0] for detail in raised)) or "-",
                     "warned": "; ".join(dict.fromkeys(w.split(".")[0] for w in run.warnings)) or "-"})
    return pd.DataFrame(rows).set_index("scenario")
