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
               ({422.0: "correct it", 409.0: "same key later"},)],
        wrong=[
            Wrong(moves("correct it", "same key later"), "409 again"),  # the two swapped: at once meets it still at work
            Wrong(moves("correct it", "correct it"), "ask for a change, or for time"),
            Wrong(moves("new key", "correct it"), "$80"),  # a new key while the first is still at work
            Wrong(moves("same key later", "new key"), "$4040"),  # a new key for a retry whose body changed
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
