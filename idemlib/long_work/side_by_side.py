"""The real Powertools idempotency utility beside the course's inbox and in-progress record (lesson 09).

:func:`side_by_side` crashes m-7f3 at the points the three consumers share and
tabulates what each did; :func:`raised_or_killed` sets an error the function raises
beside a process killed at the same point; :func:`deadline_enforced` runs a claim
whose deadline is shorter than the work, with and without the invocation being
stopped at it; :func:`powertools_scenarios` runs the library's other behaviours
(the orphan lock, expiry, payload validation, a missing key, a concurrent copy).
The library's runs are real (see :mod:`idemlib.long_work.powertools`); the course's
consumers run in the simulator. Both count time on a virtual clock.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pandas as pd

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler
from idemlib.long_work.inprogress import BACKED_OFF, LEASE_SECONDS, InProgressHandler, RecordsDuckDB, run_long
from idemlib.long_work.powertools import PeerRun, PeerSettings, run_powertools
from idemlib.messages import Message
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


def side_by_side(peers: dict[str, PeerSettings] | None, *, course_deadline_leases: float = 2.0) -> pd.DataFrame:
    """m-7f3 crashed at each shared point, handled by the inbox, the in-progress handler and the library.

    Every consumer has the same 30 s lease on the same kind of clock; each library
    configuration in ``peers`` runs for real (None: the library is left out). One
    row per (consumer, crash point), in the columns
    :func:`idemlib.pictures.plots.plot_crash_matrix` reads.
    """
    jobs = [(label, point, settings, _plan(point, peer_step))
            for label, settings in (peers or {}).items() for point, _, _, peer_step in CRASH_POINTS]
    started = _in_parallel([(([RUNNING_EXAMPLE], settings), {"faults": plan}) for _, _, settings, plan in jobs])
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
                     course.refused, course.waited_leases, len(course.result.dead_letters), course.outcome))
    for (label, point, _, _), run in zip(jobs, (future.result() for future in started)):
        summary = run.summary()
        rows.append((label, point, summary["charges"], summary["refused"], summary["waited (leases)"],
                     summary["dead-lettered"], summary["outcome"]))
    table = pd.DataFrame(rows, columns=["handler", "fault", "charges", "refused", "waited (leases)", "dead-lettered",
                                        "outcome"])
    table["total charged"] = table["charges"] * RUNNING_EXAMPLE.body["amount"]
    order = list(dict.fromkeys(table["handler"]))
    return table.sort_values("handler", key=lambda names: names.map(order.index), kind="stable").reset_index(drop=True)


def _in_parallel(calls: list[tuple[tuple[Any, ...], dict[str, Any]]], workers: int = 4) -> list[Future[PeerRun]]:
    """Start several independent runs at once: each mostly waits for its children, so they overlap well.

    Every run has its own broker, clock and key prefix; only the machine is shared,
    and no outcome depends on how fast it is. Each future gives its run when it ends.
    """
    pool = ThreadPoolExecutor(max_workers=workers)
    started = [pool.submit(run_powertools, *args, **kwargs) for args, kwargs in calls]
    pool.shutdown(wait=False)  # no more runs to submit; the pool's threads end with the last one
    return started


def compare_outcomes(table: pd.DataFrame) -> pd.DataFrame:
    """The side-by-side table as one row per crash point and one column per consumer, each cell saying what happened."""
    cells = table.assign(said=[
        f"{row['outcome']}: {row['charges']} charge{'s' if row['charges'] != 1 else ''}"
        + (f", {row['refused']} refused" if row["refused"] else "")
        for row in table.to_dict("records")])
    points = [point for point, *_ in CRASH_POINTS]
    return cells.pivot(index="fault", columns="handler", values="said").loc[points, list(dict.fromkeys(table["handler"]))]


def _tabulate(runs: dict[str, tuple[tuple[Any, ...], dict[str, Any]]]) -> pd.DataFrame:
    """Run each labelled call of :func:`run_powertools` and give one row of its summary per label."""
    started = _in_parallel(list(runs.values()))
    return pd.DataFrame({label: future.result().summary() for label, future in zip(runs, started)}).T


def raised_or_killed(settings: PeerSettings = PeerSettings()) -> pd.DataFrame:  # noqa: B008 - frozen, so one is safe
    """The function raising an error, beside the process killed, at the same two points: before and after its charge.

    The library deletes its record when the decorated function raises, so the
    redelivery runs the function again; a killed process leaves the record in progress.
    """
    one = [RUNNING_EXAMPLE]
    return _tabulate({
        "raises before the charge": ((one, settings), {"raises": "before the charge"}),
        "killed before the charge": ((one, settings), {"faults": FaultPlan(crashes=[Crash("charge")])}),
        "raises after the charge": ((one, settings), {"raises": "after the charge"}),
        "killed after the charge": ((one, settings), {"faults": FaultPlan(crashes=[Crash("mark completed")])}),
    })[["charges", "raised", "refused", "dead-lettered", "outcome"]]


def deadline_enforced(work_seconds: float = 45.0, time_left: float = 20.0) -> pd.DataFrame:
    """A registered deadline shorter than the work, two consumers: nothing stops the work, or the timeout does.

    Outside Lambda the stand-in context only reports time left: the consumer works
    on past its deadline, the redelivery after its lease finds the claim expired and
    takes over while the first still works. Inside Lambda the invocation is stopped
    when its time runs out. A deadline longer than the work is the third row.
    """
    one, work = [RUNNING_EXAMPLE], {"consumers": 2, "work_seconds": work_seconds}
    roomy = 2 * LEASE_SECONDS
    return _tabulate({
        f"{time_left:g} s left, work {work_seconds:g} s, not stopped (stand-in)":
            ((one, PeerSettings(time_left=time_left)), work),
        f"{time_left:g} s left, work {work_seconds:g} s, stopped at {time_left:g} s (as Lambda)":
            ((one, PeerSettings(time_left=time_left, stopped_at_timeout=True)), work),
        f"{roomy:g} s left, work {work_seconds:g} s, stopped at {roomy:g} s":
            ((one, PeerSettings(time_left=roomy, stopped_at_timeout=True)), work),
    })[["charges", "refused", "failed", "stopped", "dead-lettered", "outcome"]]


def powertools_scenarios() -> pd.DataFrame:
    """The library's behaviours the lesson runs beyond the crash points, each a real run on the real Redis.

    One row per scenario: what the customers owe, what was charged, how many
    deliveries were refused, rejected or failed, what was dead-lettered, which
    errors the library raised and what it warned. The lock the library takes to
    replace an orphaned record lives ``min(10 s, the record's life)``; the two
    orphan rows put a lease shorter and longer than that between deliveries.
    """
    reused = [RUNNING_EXAMPLE, Message.charge("m-7f3", order_id=1042, amount=50)]
    no_key = Message(None, {"order_id": 1042, "amount": 40})
    twice_after_claim = FaultPlan(crashes=[Crash("charge"), Crash("charge", delivery=2)])
    scenarios: list[tuple[str, list[Message], PeerSettings, dict[str, Any]]] = [
        ("orphan taken over, killed again; lease 2 s, shorter than the lock", [RUNNING_EXAMPLE],
         PeerSettings(time_left=1.0), {"faults": twice_after_claim, "lease": 2.0}),
        ("orphan taken over, killed again; lease 30 s, longer than the lock", [RUNNING_EXAMPLE],
         PeerSettings(time_left=20.0), {"faults": twice_after_claim}),
        ("records expire after 10 s, ack lost, lease 30 s", [RUNNING_EXAMPLE], PeerSettings(expires_after_seconds=10),
         {"faults": _plan("ack lost", None)}),
        ("ID reused for $50, payload validation off", reused, PeerSettings(), {}),
        ("ID reused for $50, payload validation on", reused, PeerSettings(payload_validation=True), {}),
        ("no key, raise_on_no_idempotency_key off, ack lost", [no_key], PeerSettings(), {"faults": _plan("ack lost", None)}),
        ("no key, raise_on_no_idempotency_key on", [no_key], PeerSettings(raise_on_no_key=True), {}),
        ("duplicate published, both copies held at once", [RUNNING_EXAMPLE, RUNNING_EXAMPLE],
         PeerSettings(time_left=2 * LEASE_SECONDS), {"consumers": 2, "work_seconds": 10.0}),
    ]
    rows = []
    started = _in_parallel([((messages, settings), options) for _, messages, settings, options in scenarios])
    for (name, messages, _, _), run in zip(scenarios, (future.result() for future in started)):
        owed = sum({(m.message_id, m.body["amount"]): m.body["amount"] for m in messages}.values())  # each payload once
        summary = run.summary()
        raised = run.trace[run.trace["event"].isin([BACKED_OFF, "rejected", "failed"])]["detail"]
        rows.append({"scenario": name, "owed ($)": owed, "charged ($)": summary["charged ($)"], "refused": summary["refused"],
                     "rejected": summary["rejected"], "failed": summary["failed"], "dead-lettered": summary["dead-lettered"],
                     "raised": ", ".join(dict.fromkeys(detail.split(":")[0] for detail in raised)) or "-",
                     "warned": "; ".join(dict.fromkeys(w.split(".")[0] for w in run.warnings)) or "-"})
    return pd.DataFrame(rows).set_index("scenario")
