"""Lesson 08's exercise: what a client does after a 409 and after a 422, played out against fresh servers."""

from __future__ import annotations

from http import HTTPStatus

from exercise_bank import Bank, Wrong, bank_tests


def moves(after_409, after_422):
    return ({409: after_409, 422: after_422},)


BANKS = {
    "check_client_moves": Bank(
        right=[moves("same key later", "correct it"),
               ({"409": " same key later ", "422 Unprocessable Content": "correct it"},),
               ({HTTPStatus.CONFLICT: "same key later", HTTPStatus.UNPROCESSABLE_ENTITY: "correct it"},),
               ({422.0: "correct it", 409.0: "same key later"},),
               ({409: "Same Key  Later", 422: "CORRECT IT"},)],  # a name in any case, its spaces run together
        wrong=[
            Wrong(moves("correct it", "same key later"), "409 again"),  # the two swapped: at once meets it still at work
            Wrong(moves("correct it", "correct it"), "what ends that state"),
            Wrong(moves("new key", "correct it"), "$80"),  # a new key while the first is still at work
            Wrong(moves("same key later", "new key"), "the rebuilt body said 4000"),  # cents read as dollars
            Wrong(moves("give up", "new key"), "told the payment failed"),
            Wrong(moves("correct it", "new key"), "409 again"),  # the first harm found is the 409's
            Wrong(moves("same key later", "Give Up"), "told the payment failed"),  # any case names the move
            Wrong(moves("new key", "same key later"), "$80"),
            Wrong(moves("same key later", "same key later"), "422 again"),  # 422 read as "not yet"
            Wrong(moves("give up", "correct it"), "told the payment failed"),
            Wrong(moves("same key later", "give up"), "told the payment failed"),
            Wrong(moves("new key", "new key"), "charged the card"),
            Wrong(moves("wait", "correct it"), "is one of the names"),
            Wrong(moves("Same key, later!", "correct it"), "is one of the names"),  # names are exact: no guessing
            Wrong(moves("same key later", "send the same body again at once, with a new key"), "is one of the names"),
            Wrong(({409: "same key later"},), "exactly two keys"),
            Wrong(({409: "same key later", "409": "same key later", 422: "correct it"},), "exactly two keys"),
            Wrong(({400: "correct it", 409: "same key later", 422: "correct it"},), "exactly two keys"),
            Wrong((["same key later", "correct it"],), "dict"),
            Wrong(([("409", "same key later"), ("422", "correct it")],), "dict"),  # pairs, not a dict
            Wrong(({409: "same key later", 422: "correct it", 500: "give up"},), "exactly two keys"),
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
