"""Lesson 08's exercises: what a client does after each refusal, and which requests the claim-number fence refuses."""

from __future__ import annotations

from exercise_bank import Bank, Wrong, bank_tests

RIGHT_MOVES = {"still at work": "same key later", "taken over": "same key later", "second payment": "new key",
               "rebuilt in cents": "first body"}


def moves(**changes):
    return ({**RIGHT_MOVES, **{name.replace("_", " "): move for name, move in changes.items()}},)


BANKS = {
    "check_client_moves": Bank(
        right=[moves(),
               moves(taken_over="first body"),  # the takeover had completed: sent at once, it gets the replay too
               ({"still at work": "Same Key  Later", "taken over": "SAME KEY LATER", "second payment": "New key",
                 "rebuilt in cents": " first body "},),  # a name in any case, its spaces run together
               ({"Still at work": "same key later", "taken over ": "same key later", "SECOND PAYMENT": "new key",
                 "rebuilt  in cents": "first body"},)],  # the situations' names too, as the moves' are
        wrong=[
            Wrong(moves(second_payment="first body"), "$40 of the $45 owed"),  # every 422 read as "send what was first sent"
            Wrong(moves(rebuilt_in_cents="new key"), "the rebuilt body said 4000"),  # every 422 read as "a new key"
            Wrong(moves(still_at_work="first body"), "409 again"),  # at once meets it still at work
            Wrong(moves(still_at_work="new key"), "$80"),  # a new key while the first is still at work
            Wrong(moves(taken_over="new key"), "$80"),
            Wrong(moves(still_at_work="give up"), "told the payment failed"),
            Wrong(moves(taken_over="give up"), "was charged the $40 owed"),  # harmless money, but no 201 in hand
            Wrong(moves(second_payment="same key later"), "422 again"),  # 422 read as "not yet"
            Wrong(moves(rebuilt_in_cents="same key later"), "422 again"),
            Wrong(moves(second_payment="give up"), "told the payment failed"),
            Wrong(moves(rebuilt_in_cents="give up"), "told the payment failed"),
            Wrong(moves(second_payment="first body", rebuilt_in_cents="new key"), "$40 of the $45 owed"),  # swapped
            Wrong(moves(still_at_work="correct it"), "is one of the names"),  # the old move's name
            Wrong(moves(still_at_work="wait"), "is one of the names"),
            Wrong(moves(second_payment="send the same body again at once, with a new key"), "is one of the names"),
            Wrong(({409: "same key later", 422: "first body"},), "exactly the situations"),  # by status: 422 has two
            Wrong(({"still at work": "same key later"},), "exactly the situations"),
            Wrong(({**RIGHT_MOVES, "Still at work": "same key later"},), "'still at work' a second time"),
            Wrong(({**{k: v for k, v in RIGHT_MOVES.items() if k != "taken over"}, "taken ovr": "same key later"},),
                  "'taken ovr' is not one of those keys"),  # a typo is named, not just the shape
            Wrong(({"still at work": "same key later"},), "'taken over' has no value"),
            Wrong((list(RIGHT_MOVES.values()),), "dict"),
        ],
    ),
    "check_fenced": Bank(
        right=[({"A", "C"},), (["c", "a"],), (("A", "C", "C"),), (frozenset({" a ", "C"}),)],
        wrong=[
            Wrong(({"A"},), "leaves out"),  # only the first is fenced, as in the lesson's takeover
            Wrong(({"C"},), "leaves out"),
            Wrong(({"A", "C", "D"},), "refuses nothing by itself"),  # a passed deadline read as a refusal
            Wrong(({"A", "B", "C"},), "before any work"),  # the 409 at the door read as the fence
            Wrong(({"B"},), "before any work"),
            Wrong(({"A", "C", "E"},), "stored answer"),
            Wrong(({"D"},), "refuses nothing by itself"),  # the last to commit read as the one refused
            Wrong((set(),), "leaves out"),
            Wrong(({"A", "B", "C", "D", "E"},), "before any work"),
            Wrong(("A, C",), "set of request names"),
            Wrong(({"A": True, "C": True},), "set of request names"),
            Wrong(({"A", "X"},), "is one of the names"),
            Wrong(({1, 3},), "is one of the names"),
        ],
    ),
}

test_bank = bank_tests(BANKS)


def test_the_moves_say_what_the_client_does_not_when() -> None:
    """A move's description names no situation, so the answer cannot be matched by its words (a learner did)."""
    from idemlib.course.exercises import CLIENT_MOVES

    for name, does in CLIENT_MOVES.items():
        for situation_word in ("if ", "when ", "retry", "new payment", "409", "422", "in progress", "at work"):
            assert situation_word not in does.lower(), f"{name!r}: {does!r} says when, with {situation_word!r}"


def test_the_timeline_is_played_on_a_real_server_and_charges_once() -> None:
    """The fence's verdicts come from the server: two requests fenced, one refused at the door, one charge."""
    from idemlib.course.exercises.lesson_08 import AT_THE_DOOR, COMMITTED, FENCED, REPLAYED, TIMELINE, play_timeline

    assert play_timeline() == {"A": FENCED, "B": AT_THE_DOOR, "C": FENCED, "D": COMMITTED, "E": REPLAYED}
    # Without D's late takeover of C, C commits and nobody else is fenced but A.
    shorter = tuple(event for event in TIMELINE if event[1] not in "DE")
    assert play_timeline(shorter) == {"A": FENCED, "B": AT_THE_DOOR, "C": COMMITTED}
