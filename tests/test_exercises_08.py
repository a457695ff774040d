"""Lesson 08's exercise: the statuses the server answers in the three refusals, read off a fresh server."""

from __future__ import annotations

from http import HTTPStatus

from exercise_bank import Bank, Wrong, bank_tests

CASES = ("missing key", "still in progress", "different payload")


def answer(*statuses):
    return (dict(zip(CASES, statuses)),)


BANKS = {
    "check_http_statuses": Bank(
        right=[answer(400, 409, 422), answer("400", "409", " 422 "),
               answer(HTTPStatus.BAD_REQUEST, HTTPStatus.CONFLICT, HTTPStatus.UNPROCESSABLE_ENTITY),
               answer("400 Bad Request", "409 Conflict", 422.0),
               ({"Missing key": 400, "still in  progress": 409, "different payload ": 422},)],
        wrong=[
            Wrong(answer(400, 422, 409), "still in progress"),  # the two conflicts swapped
            Wrong(answer(400, 409, 409), "three different statuses"),
            Wrong(answer(401, 409, 422), "missing key"),
            Wrong(answer(400, 429, 400), "different payload"),
            Wrong(answer("four hundred", 409, 422), "as a number"),
            Wrong(answer(400, 423, 422), "still in progress"),
            Wrong(answer(True, 409, 422), "as a number"),
            Wrong(answer("Bad Request 400", 409, 422), "as a number"),
            Wrong(({"missing key": 400, "still in progress": 409},), "exactly these keys"),
            Wrong(([400, 409, 422],), "exactly these keys"),
        ],
    ),
}

test_bank = bank_tests(BANKS)
