"""The consumer under test runs in a thread of its own, so a delivery that never ends fails the test instead of hanging it.

The code lives in the ``deliver-twice`` package; this module keeps the course's imports working.
"""

from deliver_twice.consumer_thread import Blocked, ConsumerThread

__all__ = ["Blocked", "ConsumerThread"]
