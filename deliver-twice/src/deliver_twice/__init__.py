"""Deliver every message twice: test that a message consumer survives the duplicates every broker makes.

:func:`assert_idempotent` plays the duplicates a broker makes (a lost ack, a redelivery
after other work, a late copy, a replay, a consumer killed before each of its steps, two
deliveries at once on PostgreSQL) on your own ``handle(connection, message)`` and your
own database, and fails naming the scenario, the message, what differs and what fixes it.
The pytest plugin, registered on install, gives each test a PostgreSQL schema of its own.
"""

from deliver_twice.consumer_thread import Blocked
from deliver_twice.scenarios import (
                                     MAX_DELIVERIES,
                                     TIME_LIMIT,
                                     NotIdempotent,
                                     Report,
                                     Scenario,
                                     assert_idempotent,
                                     idempotency_report,
)
from deliver_twice.state import whole_database
from deliver_twice.steps import Crashed

__all__ = [
                                     "MAX_DELIVERIES",
                                     "TIME_LIMIT",
                                     "Blocked",
                                     "Crashed",
                                     "NotIdempotent",
                                     "Report",
                                     "Scenario",
                                     "assert_idempotent",
                                     "idempotency_report",
                                     "whole_database",
]
