"""The checks that the lessons' exercises call.

Each check works the right answer out with the simulator or a real database
rather than comparing to a stored constant, gives a specific hint for a wrong
answer without giving the answer away, and says plainly when nothing has been
answered yet (``...`` is how a student copy leaves an answer blank).

One module per lesson, each with its ``__all__``; a line below re-exports each
lesson's checks, so a notebook writes ``from idemlib.course.exercises import check_...``
whatever its lesson.
"""

from idemlib.course.exercises.feedback import Feedback, blank, hint, not_judged, one_of, right  # noqa: F401
from idemlib.course.exercises.lesson_00 import *  # noqa: F403
from idemlib.course.exercises.lesson_01 import *  # noqa: F403
from idemlib.course.exercises.lesson_02 import *  # noqa: F403
from idemlib.course.exercises.lesson_03 import *  # noqa: F403
from idemlib.course.exercises.lesson_04 import *  # noqa: F403
from idemlib.course.exercises.lesson_05 import *  # noqa: F403
from idemlib.course.exercises.lesson_06 import *  # noqa: F403
from idemlib.course.exercises.lesson_07 import *  # noqa: F403
from idemlib.course.exercises.lesson_08 import *  # noqa: F403
from idemlib.course.exercises.lesson_09 import *  # noqa: F403
from idemlib.course.exercises.lesson_10 import *  # noqa: F403
from idemlib.course.exercises.lesson_11 import *  # noqa: F403
from idemlib.course.exercises.lesson_12 import *  # noqa: F403
