"""Lesson 08's exercise: what a client does after a 409 and after a 422, played out against a fresh server."""

from __future__ import annotations

from http import HTTPStatus

from exercise_bank import Bank, Wrong, bank_tests


def moves(after_409, after_422):
    return ({409: after_409, 422: after_422},)


BANKS = {
    "check_client_moves": Bank(
        right=[moves("same key later", "correct it"),
               ({"409": "Same key, later.", "422 Unprocessable Content": " correct IT "},),
               ({HTTPStatus.CONFLICT: "same-key-later", HTTPStatus.UNPROCESSABLE_ENTITY: "Correct it!"},),
               # the descriptions copied from the lesson's table of moves, instead of their short names
               moves("Wait, then send the same request again with the same key.",
                     "change the request (its body or its key) to what was meant, then send it")],
        wrong=[
            Wrong(moves("correct it", "same key later"), "what did the server say was wrong"),  # the two swapped
            Wrong(moves("new key", "correct it"), "$80"),  # a new key while the first is still at work
            Wrong(moves("same key later", "new key"), "$4040"),  # a new key for a retry whose body changed
            Wrong(moves("same key later", "same key later"), "422 again"),  # 422 read as "not yet"
            Wrong(moves("give up", "correct it"), "told the payment failed"),
            Wrong(moves("same key later", "give up"), "told the payment failed"),
            Wrong(moves("new key", "new key"), "charged the card"),
            Wrong(moves("wait", "correct it"), "could not read: 'wait'"),
            Wrong(moves("same key later", "send the request again at once, with a new key"), "$4040"),  # a description
            Wrong(({409: "same key later"},), "exactly two keys"),
            Wrong(({400: "correct it", 409: "same key later", 422: "correct it"},), "exactly two keys"),
            Wrong((["same key later", "correct it"],), "dict"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
