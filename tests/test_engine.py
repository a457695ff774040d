"""One run engine under every consumer: the fault plan reaches each kind, per copy included, and there is one loop."""

import ast
from pathlib import Path

import pandas as pd
import pytest

from idemlib.clock import VirtualClock
from idemlib.explore import RUNNING_EXAMPLE, Script
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import InboxHandler, NaiveHandler
from idemlib.messages import Message
from idemlib.operating import batch
from idemlib.operating.day import Day, run_day
from idemlib.processes import kill_between_steps
from idemlib.retention_and_ordering.offsets import Projection, consume
from idemlib.retention_and_ordering.ordered_log import MemoryLog
from idemlib.sim import Engine, simulate
from idemlib.stores import DuckDBPayments
from idemlib.trace import Event, Trace

COPIES = [RUNNING_EXAMPLE] * 4
"""Four copies of one message on the queue: one message ID, four positions."""


def plan(per_copy: bool) -> FaultPlan:
    # Seed 1 loses no first ack of m-7f3 when drawn per message, and some but not all when drawn per copy.
    return FaultPlan(ack_loss_rate=0.5, seed=1, per_copy=per_copy)


def first_acks_lost(trace: pd.DataFrame) -> int:
    return int(((trace["event"] == "ack lost") & (trace["delivery"] == 1)).sum())


def assert_per_copy_draws_apart(lost: dict[bool, int], copies: int) -> None:
    # Drawn per message ID, the copies share one draw: all of their first acks are lost, or none.
    assert lost[False] in (0, copies)
    # Drawn per copy, each copy has its own: the outcome changes, and the copies part ways.
    assert lost[True] != lost[False] and 0 < lost[True] < copies


def test_per_copy_reaches_a_plain_handler():
    lost = {per_copy: first_acks_lost(simulate(InboxHandler(), COPIES, faults=plan(per_copy), max_deliveries=20).trace)
            for per_copy in (False, True)}
    assert_per_copy_draws_apart(lost, len(COPIES))


def test_per_copy_reaches_the_batched_inbox():
    lost = {per_copy: first_acks_lost(batch.consume(DuckDBPayments(), COPIES, batch_size=4, faults=plan(per_copy),
                                                    max_deliveries=20).trace)
            for per_copy in (False, True)}
    assert_per_copy_draws_apart(lost, len(COPIES))


def test_per_copy_reaches_a_day_in_production():
    day = Day(messages=60, ack_loss=0.2)
    runs = {per_copy: run_day(Day(messages=60, ack_loss=0.2, per_copy=per_copy)) for per_copy in (False, True)}
    lost = {per_copy: set(run.events("ack lost")["message_id"]) for per_copy, run in runs.items()}
    assert lost[False] and lost[True] and lost[False] != lost[True]
    assert all(run.total_charged == run.expected_total for run in runs.values())  # the inbox absorbs either way
    assert day.faults(day.arrivals()).per_copy is False


def test_per_copy_reaches_a_real_process_killed_between_steps(tmp_path):
    lost = {per_copy: first_acks_lost(kill_between_steps(str(tmp_path / f"{per_copy}.duckdb"), COPIES, plan(per_copy),
                                                         max_deliveries=20).trace)
            for per_copy in (False, True)}
    assert_per_copy_draws_apart(lost, len(COPIES))


def test_per_copy_reaches_the_offset_consumer():
    # Four records of one message ID (a producer that published it four times), each its own copy on the log.
    def crashes(per_copy: bool) -> int:
        log, projection = MemoryLog(), Projection()
        for _ in range(4):
            log.append("orders", {"order_id": 1042, "amount": 40, "message_id": "m-7f3"})
        try:
            plan = FaultPlan(crash_rate=0.1, seed=2, per_copy=per_copy)
            died = consume(log, projection, use_ids=True, crash=plan)
        finally:
            log.close()
        assert projection.times_applied("m-7f3") == 1  # the IDs absorb every redelivery either way
        return died

    assert crashes(False) != crashes(True)


def test_per_copy_reaches_powertools():
    from idemlib.long_work.powertools import powertools_ready, run_powertools
    if not powertools_ready():
        pytest.skip("Redis is not running")
    lost = {per_copy: first_acks_lost(run_powertools(COPIES, faults=plan(per_copy), max_deliveries=20).trace)
            for per_copy in (False, True)}
    assert_per_copy_draws_apart(lost, len(COPIES))


def test_per_copy_reaches_the_design_review_service():
    from idemlib.case_study.design_review import SAFE
    from idemlib.case_study.mortgage import APPLICATION_42

    def lost(per_copy: bool) -> int:
        service, bank, payments = SAFE[0].parts()  # the account service, its bank and the payment system
        return first_acks_lost(simulate(service, [APPLICATION_42] * 4, faults=plan(per_copy), database=bank,
                                        provider=payments, max_deliveries=20).trace)

    assert_per_copy_draws_apart({per_copy: lost(per_copy) for per_copy in (False, True)}, 4)


def test_a_lost_ack_now_reaches_a_real_process_too(tmp_path):
    result = kill_between_steps(str(tmp_path / "p.duckdb"), [RUNNING_EXAMPLE], FaultPlan(lost_acks=[LostAck()]),
                                handler="naive")
    assert len(result.events("ack lost")) == 1 and result.total_charged == 80  # redelivered, and charged again


def test_a_misspelt_event_is_refused_where_it_is_recorded():
    trace = Trace(VirtualClock())
    trace.record("consumer A", Event.DUPLICATE_SKIPPED, "m-7f3")
    with pytest.raises(ValueError, match="'duplicate skiped'"):
        trace.record("consumer A", "duplicate skiped", "m-7f3")
    assert trace.rows[0].event == "duplicate skipped" and type(trace.rows[0].event) is str


def test_a_trace_with_an_event_outside_the_vocabulary_is_refused_by_the_step_through():
    from idemlib.pictures.scenes import scenes_of
    frame = simulate(InboxHandler(), [RUNNING_EXAMPLE], watch_total=True).trace
    frame.loc[3, "event"] = "comitted"
    with pytest.raises(ValueError, match="'comitted'"):
        scenes_of(frame)


def test_a_script_moves_consumers_in_its_order_and_then_lets_a_finish():
    script = Script("AB", "ABABABAB")
    engine = Engine(NaiveHandler(), DuckDBPayments().session, policy=script, step_seconds=lambda step, now: 0.0)
    engine.add_consumers(2, ready_at=(0.0, engine.broker.visibility_timeout))
    engine.publish([RUNNING_EXAMPLE])
    engine.run()
    assert script.taken == ["A:begin", "B:begin", "A:charge", "B:charge", "A:commit", "B:commit", "A:ack", "B:ack"]
    assert engine.trace.count(Event.COMMITTED) == 2  # both consumers charged: the naive handler's race


def test_step_durations_may_be_a_function_of_time():
    slow_after_start = Engine(NaiveHandler(), DuckDBPayments().session,
                              step_seconds=lambda step, now: 10.0 if step == "charge" else 1.0)
    slow_after_start.add_consumers(1)
    slow_after_start.publish([Message.charge("m-1", 1, 5)])
    slow_after_start.run()
    assert slow_after_start.clock.now() == 1 + 10 + 1 + 1


def test_a_named_crash_may_strike_one_copy_only():
    result = simulate(NaiveHandler(), COPIES[:2], faults=FaultPlan(crashes=[Crash("commit", copy=1)]))
    crashed = result.events("crashed")
    assert len(crashed) == 1 and result.total_charged == 80


RUN_LOOP_SIGNS = ("is_empty", "subscription", "subscribe(", ".fetch(", "crashes_before(", "loses_ack(", "loses_response(")
"""What a run loop touches: a queue it waits to see empty, a log subscription it reads, or the fault plan."""
NOT_SIMULATED = {"races.py:stress", "races.py:work"}
"""``races.stress`` and its threads: real threads on a real database engine, in wall-clock time, with no fault plan (a
stress test, not a simulated run)."""


def run_loops(source: str, name: str) -> list[str]:
    """Every ``while``/``for`` loop of a module whose head or body shows a run loop's signs, as ``file:function``."""
    found = []
    tree = ast.parse(source)
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.While | ast.For) and any(sign in ast.unparse(node) for sign in RUN_LOOP_SIGNS):
                found.append(f"{name}:{function.name}")
    return sorted(set(found) - NOT_SIMULATED)


def test_idemlib_has_one_run_loop():
    """A run loop drives consumers until the broker is empty or a log is read; only the engine may have one."""
    package = Path(__file__).resolve().parent.parent / "idemlib"
    loops = [loop for path in package.rglob("*.py")
             for loop in run_loops(path.read_text(encoding="utf-8"), str(path.relative_to(package)))]
    # The engine's: its run, and the acks of a batch (each consults the fault plan); nowhere else.
    assert loops == ["sim.py:_context", "sim.py:ack", "sim.py:run"], loops


def test_the_one_loop_check_finds_a_copied_loop():
    broker_copy = "def drain(broker):\n    while not broker.is_empty:\n        step(broker.receive('A'))\n"
    log_copy = "def consume(log):\n    for record in log.subscribe('payments'):\n        apply(record)\n"
    fetching = "def consume(sub):\n    while True:\n        record = sub.fetch()\n"
    faulty = "def play(plan, steps):\n    for step in steps:\n        if plan.crashes_before(step, 'm', 1):\n            break\n"
    for name, source in (("a", broker_copy), ("b", log_copy), ("c", fetching), ("d", faulty)):
        assert run_loops(source, name) == [f"{name}:{source.split('(')[0][4:]}"], source


def test_every_inbox_table_is_the_one_statement():
    import re

    from idemlib.stores.sql import SCHEMA, inbox_table
    laid_out = re.sub(r"\s+", " ", SCHEMA[1]).replace("( ", "(").replace(" )", ")").strip()
    assert laid_out == inbox_table(also="fingerprint VARCHAR", if_not_exists=True)
    package = Path(__file__).resolve().parent.parent / "idemlib"
    written = [str(path.relative_to(package)) for path in package.rglob("*.py")
               if "TABLE processed_messages (" in path.read_text(encoding="utf-8")]
    assert written == [], written


def test_a_lost_ack_reaches_the_offset_consumer_and_its_offset_absorbs_it():
    def applied(use_offset: bool) -> int:
        log, projection = MemoryLog(), Projection()
        try:
            log.append("orders", {"order_id": 1042, "amount": 40, "message_id": "m-7f3"})
            consume(log, projection, use_offset=use_offset, crash=FaultPlan(lost_acks=[LostAck()]))
        finally:
            log.close()
        return projection.times_applied("m-7f3")

    assert (applied(True), applied(False)) == (1, 2)  # redelivered after its ack wait; only the offset skips it
