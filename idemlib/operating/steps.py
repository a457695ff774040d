"""A consumer's connection, watched call by call, so a test can kill the consumer between two of its steps.

The code lives in the ``deliver-twice`` package (``deliver-twice/`` in this repository,
installed with the course); this module keeps the course's imports working.
"""

from deliver_twice.delivery import NotAcknowledged, deliver
from deliver_twice.race import Race, two_at_once
from deliver_twice.sessions import Sessions, backend_pid
from deliver_twice.steps import Connection, Crashed, Handle, Watch, WatchedConnection, WatchedCursor, describe

__all__ = ["Connection", "Crashed", "Handle", "NotAcknowledged", "Race", "Sessions", "Watch", "WatchedConnection",
           "WatchedCursor", "backend_pid", "deliver", "describe", "two_at_once"]
