"""idemlib: the simulations behind a course on the Idempotent Consumer (Inbox) pattern.

A message broker that delivers at least once, consumers written as named steps,
a fault plan that crashes them between any two steps or loses their acks, and real
databases that keep the money. The lessons import what they need from here.
"""

from idemlib.broker import Broker, DeadLetter, Delivery
from idemlib.explore import RUNNING_EXAMPLE, crash_matrix, fault_sweep
from idemlib.facts import fact, load_facts
from idemlib.faults import Crash, FaultPlan, LostAck
from idemlib.handlers import (
    HANDLERS,
    AckFirstHandler,
    Handler,
    IdFirstHandler,
    InboxHandler,
    NaiveHandler,
    WorkFirstHandler,
    handler_named,
)
from idemlib.messages import BadMessage, Charge, Message, parse_charge, payment_stream
from idemlib.sim import RunResult, simulate
from idemlib.stores import DuckDBPayments, WriteConflict

__all__ = [
    "HANDLERS", "RUNNING_EXAMPLE", "AckFirstHandler", "BadMessage", "Broker", "Charge", "Crash", "DeadLetter",
    "Delivery", "DuckDBPayments", "FaultPlan", "Handler", "IdFirstHandler", "InboxHandler", "LostAck", "Message",
    "NaiveHandler", "RunResult", "WorkFirstHandler", "WriteConflict", "fault_sweep", "crash_matrix", "fact",
    "handler_named", "load_facts", "parse_charge", "payment_stream", "simulate", "assert_idempotent",
]


def __getattr__(name: str) -> object:
    """``from idemlib import assert_idempotent``: lesson 11's deliver-twice helper, for a reader's own suite.

    Imported on first use only: it lives a layer up (``idemlib.operating``), which imports this package.
    """
    if name == "assert_idempotent":
        from idemlib.operating.testing import assert_idempotent

        return assert_idempotent
    raise AttributeError(f"module 'idemlib' has no attribute {name!r}")
