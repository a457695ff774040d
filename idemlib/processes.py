"""Real consumer processes killed with SIGKILL between two steps of a handler, on a database file.

The simulator's crash is a model: it rolls the session back and drops the job. Here
the consumer is a child process of its own, with its own connection to a DuckDB or
SQLite file, and the crash is the operating system's ``SIGKILL``: no ``finally`` runs, no
rollback is sent, the file is left as the dead process left it. What survives is
what the engine made durable at ``COMMIT``; the next process to open the file
recovers it from the write-ahead log.

The parent runs the simulator's engine (the course's broker on a virtual clock),
with the child as its consumer. The child announces each step before doing it and
waits for a ``go``; a :class:`~idemlib.faults.FaultPlan` crash before that step is a
``SIGKILL`` instead of the ``go``. The killed delivery's lease then runs out, a fresh child is
started, and the broker delivers the message again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable

from idemlib.broker import Delivery
from idemlib.faults import FaultPlan
from idemlib.handlers import Context, Handler, Steps, handler_named
from idemlib.messages import Message
from idemlib.sim import Engine, NoSession, RunResult, StepFailed, Worker
from idemlib.stores import DuckDBPayments, SQLitePayments, SqlPayments
from idemlib.trace import Event

CONSUMER = "consumer process"
ENGINES: dict[str, Callable[[str], SqlPayments]] = {"DuckDB": DuckDBPayments, "SQLite": SQLitePayments}
"""The engines that keep a database in a file a consumer process can open, by name."""


class _Child:
    """One consumer process and the two pipes the parent talks to it through."""

    def __init__(self, engine: str, path: str, handler: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "idemlib.processes", engine, path, handler],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def read(self) -> tuple[str, str]:
        """The child's next report, as (kind, detail)."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            assert self.process.stderr is not None
            raise RuntimeError(f"the consumer process exited unexpectedly:\n{self.process.stderr.read()}")
        kind, _, detail = line.rstrip("\n").partition(" ")
        return kind, detail

    def kill(self) -> None:
        """The process death: SIGKILL, which the child cannot catch or clean up after."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.close_pipes()

    def stop(self) -> None:
        """End a child that has finished its work: close its input and wait for it to exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.close_pipes()

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


class ChildConsumer(Handler):
    """A course handler run in a child process, as a consumer on the simulator's engine.

    Each job hands the delivery to the child and yields each step the child
    announces; the engine's go is the next yield. A crash from the fault plan closes
    the job at its pause, which here is a ``SIGKILL``; the next job starts a new child.
    """

    def __init__(self, engine: str, path: str, handler: str) -> None:
        self.engine, self.path = engine, path
        self.name, self.steps = handler, handler_named(handler).steps  # an unknown name fails here, not in the child
        self.child: _Child | None = None

    def run(self, ctx: Context) -> Steps:
        delivery = ctx.delivery
        if self.child is None:
            self.child = _Child(self.engine, self.path, self.name)
            ctx.record(delivery, Event.STARTED, f"pid {self.child.process.pid}")
        child = self.child
        child.send(json.dumps({"message_id": delivery.message.message_id, "body": delivery.message.body,
                               "count": delivery.count}))
        while True:
            kind, detail = child.read()
            if kind == "step":
                try:
                    yield detail
                except GeneratorExit:  # the fault plan's crash before this step: a process death
                    child.kill()
                    self.child = None
                    raise
                child.send("go")
            elif kind == "ack":
                ctx.ack()
            elif kind == "failed":
                raise StepFailed(detail)
            elif kind == "note":
                ctx.note(detail)
            else:  # "done"
                return

    restart_seconds = 0.0  # the parent starts a new child as soon as the broker has a delivery for it

    def crash_detail(self, step: str, ctx: Context) -> str:
        return f"SIGKILL before {step}"

    def stop(self) -> None:
        """End the last child, whose work is done."""
        if self.child is not None:
            self.child.stop()
            self.child = None


def kill_between_steps(
    path: str,
    messages: Iterable[Message],
    faults: FaultPlan,
    *,
    handler: str = "inbox",
    engine: str = "DuckDB",
    visibility_timeout: float = 30.0,
    max_deliveries: int = 10,
) -> RunResult:
    """Work ``messages`` with a real consumer process on the database file at ``path``, killing it as ``faults`` say.

    Each crash in ``faults`` is a ``SIGKILL`` of the child just before the named
    step of the named delivery. A new child takes over; the message comes back when
    its lease runs out. Returns the run as :func:`~idemlib.sim.simulate` would, with
    the payments read back from the file after the last child has exited. Message
    bodies travel to the child as JSON, so each must be a mapping or JSON text.
    ``engine`` is one of :data:`ENGINES`; ``handler`` a name from :data:`~idemlib.handlers.HANDLERS`.
    Every step takes no simulated time; only leases do.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {sorted(ENGINES)} (an engine that keeps its database in a file), "
                         f"not {engine!r}")
    consumer = ChildConsumer(engine, path, handler)
    messages = list(messages)
    for message in messages:
        try:
            json.dumps([message.message_id, message.body])
        except (TypeError, ValueError) as error:
            raise ValueError(f"{message.label}: a message for a consumer process travels as JSON, and this one "
                             f"cannot ({error}). Give it a JSON object or JSON text as its body.") from None
    run = Engine(consumer, NoSession, faults=faults, step_seconds=lambda step, now: 0.0,
                 visibility_timeout=visibility_timeout, max_deliveries=max_deliveries)
    run.workers.append(Worker(CONSUMER, NoSession()))
    run.publish(messages)
    try:
        run.run()
    finally:
        consumer.stop()
    return run.result(messages, ENGINES[engine](path).payments())


def _say(kind: str, detail: str = "") -> None:
    print(kind, detail, flush=True)


def _consume(engine: str, path: str, handler_name: str) -> None:
    """The child's side: read deliveries from stdin, announce every step and wait for ``go`` before doing it."""
    handler = handler_named(handler_name)
    database = ENGINES[engine](path)
    for line in sys.stdin:
        sent = json.loads(line)
        message = Message(sent["message_id"], sent["body"])
        delivery = Delivery(message, position=0, receipt=0, count=sent["count"], consumer=CONSUMER,
                            lease_expires_at=0.0)
        session = database.session()
        context = Context(delivery, session, ack=lambda: _say("ack"), note=lambda event: _say("note", event))
        try:
            for step in handler.run(context):
                _say("step", step)
                if sys.stdin.readline().strip() != "go":
                    return
        except Exception as error:  # noqa: BLE001 - any failure is this delivery's, reported to the broker
            session.rollback()
            _say("failed", f"{type(error).__name__}: {error}".replace("\n", " "))
            continue
        _say("done")


if __name__ == "__main__":
    _consume(sys.argv[1], sys.argv[2], sys.argv[3])
