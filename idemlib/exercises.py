"""The checks that the lessons' exercises call.

Each check works the right answer out with the simulator or a real database
rather than comparing to a stored constant, gives a specific hint for a wrong
answer without giving the answer away, and says plainly when nothing has been
answered yet (``...`` is how a student copy leaves an answer blank).
"""

from __future__ import annotations

import html
import threading
import time
from dataclasses import dataclass
from typing import Any

import duckdb

from idemlib.explore import RUNNING_EXAMPLE, crash_matrix, interleavings, places_to_remember, store_matrix
from idemlib.ids import STRATEGIES, compare_strategies, twin_facts
from idemlib.stores.cache import MemoryCache
from idemlib.faults import FaultPlan
from idemlib.handlers import NaiveHandler, WorkFirstHandler, handler_named
from idemlib.http_api import ChargesApi, Client, serve
from idemlib.messages import Message, payment_stream
from idemlib.provider import PaymentProvider
from idemlib.races import race
from idemlib.sim import simulate
from idemlib.stores import DuckDBPayments


@dataclass(frozen=True)
class Feedback:
    """The verdict of a check: right or not, and what to do next."""

    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"{'✓ Correct' if self.correct else '✗ Not yet'}: {self.message}"

    def _repr_html_(self) -> str:
        colour, mark = ("#2b8a3e", "✓ Correct") if self.correct else ("#b3541e", "✗ Not yet")
        return (f'<div class="idemlib-feedback" style="border-left:4px solid {colour};padding:4px 10px">'
                f"<b style='color:{colour}'>{mark}:</b> {html.escape(self.message)}</div>")


def _right(message: str) -> Feedback:
    return Feedback(True, message)


def _hint(message: str) -> Feedback:
    return Feedback(False, message)


def _blank(answer: Any, what: str) -> Feedback | None:
    if answer is ... or answer is None:
        return _hint(f"Not answered yet: replace ... with {what}, run that cell, then run this check again.")
    return None


def check_running_example(message: Any) -> Feedback:
    """Lesson 00: the running example as a :class:`~idemlib.messages.Message`."""
    if (blank := _blank(message, "a Message built with Message.charge(...)")) is not None:
        return blank
    if not isinstance(message, Message):
        return _hint(f"That is a {type(message).__name__}; build a Message with Message.charge(message_id, order_id, amount).")
    if message.message_id != RUNNING_EXAMPLE.message_id:
        return _hint(f"The ID is {message.message_id!r}. Look again at the story: which ID does the message carry?")
    if message != RUNNING_EXAMPLE:
        return _hint("The ID is right; check the order number and the amount against the story.")
    return _right("that is m-7f3, the message the whole course follows.")


def check_triple_charge(plan: Any) -> Feedback:
    """Lesson 01: a fault plan under which the naive consumer charges m-7f3 three times ($120)."""
    if (blank := _blank(plan, "a FaultPlan(...)")) is not None:
        return blank
    if not isinstance(plan, FaultPlan):
        return _hint(f"That is a {type(plan).__name__}; the answer is a FaultPlan(...).")
    result = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=plan)
    charged, target = result.total_charged, 3 * RUNNING_EXAMPLE.body["amount"]
    if charged == target:
        return _right(f"the naive consumer charged ${charged}: every delivery whose ack went missing was charged again.")
    if result.dead_letters:
        return _hint(f"Your plan sent m-7f3 to the dead-letter queue after {result.dead_letters[0].deliveries} deliveries, "
                     f"with ${charged} charged. Fewer faults, placed where a commit has already happened.")
    if charged < target:
        return _hint(f"Your plan charged ${charged}. Each extra charge needs a delivery that commits and yet is delivered "
                     "again. Which fault lets the commit stand but keeps the message on the queue?")
    return _hint(f"Your plan charged ${charged}: too many redeliveries. Count how many deliveries must commit.")


def check_overcharge(answer: Any, *, messages: int = 200, rate: float = 0.25, seed: int = 7) -> Feedback:
    """Lesson 01: dollars overcharged by the naive consumer on ``payment_stream(messages)`` at ``rate`` ack loss."""
    if (blank := _blank(answer, "a number of dollars")) is not None:
        return blank
    stream = payment_stream(messages)
    result = simulate(NaiveHandler(), stream, faults=FaultPlan(ack_loss_rate=rate, seed=seed))
    overcharge = result.total_charged - result.expected_total
    if answer == overcharge:
        return _right(f"${overcharge} more than the customers owe, from nothing but lost acks.")
    if answer == result.total_charged:
        return _hint("That is everything charged. The question asks how much more than the customers owe.")
    return _hint(f"Not ${answer}. Run the naive consumer on payment_stream({messages}) with "
                 f"FaultPlan(ack_loss_rate={rate}, seed={seed}) and compare total_charged with expected_total.")


def check_inbox_insert(sql: Any) -> Feedback:
    """Lesson 02: an INSERT with one ``?`` for the message ID that writes 1 row the first time, 0 the second."""
    if (blank := _blank(sql, "an INSERT statement (a string) with ? where the message ID goes")) is not None:
        return blank
    if not isinstance(sql, str) or sql.count("?") != 1:
        return _hint("Give the statement as a string with exactly one ? for the message ID.")
    db = duckdb.connect(":memory:")
    db.execute("CREATE TABLE processed_messages (message_id VARCHAR PRIMARY KEY)")
    written = []
    for _ in range(2):
        try:
            rows = db.execute(sql, ["m-7f3"]).fetchall()
        except duckdb.ConstraintException:
            return _hint("The second insert raised a duplicate-key error. That works, but it aborts the transaction; "
                         "ask the database to do nothing on a conflict instead.")
        except duckdb.Error as error:
            return _hint(f"DuckDB could not run it: {error}")
        written.append(len(rows) if "RETURNING" in sql.upper() else int(rows[0][0]))
    if written == [1, 0]:
        return _right("1 row the first time, 0 rows for the duplicate. The handler branches on that count.")
    return _hint(f"It wrote {written[0]} row(s), then {written[1]}. Insert into processed_messages.")


def check_crash_point(handler_name: Any, fault: Any, outcome: str) -> Feedback:
    """Lesson 02: name a handler and a fault (as the crash matrix spells them) that end in ``outcome``."""
    for value, what in ((handler_name, "a handler's name"), (fault, "a fault such as 'crash before commit'")):
        if (blank := _blank(value, what)) is not None:
            return blank
    try:
        handler = handler_named(handler_name)
    except KeyError as error:
        return _hint(str(error.args[0]))
    matrix = crash_matrix([handler])
    row = matrix[matrix["fault"] == fault]
    if row.empty:
        return _hint(f"{handler_name!r} has no fault called {fault!r}; its faults are {list(matrix['fault'])}.")
    found = row["outcome"].iloc[0]
    if found == outcome:
        return _right(f"{fault} leaves the {handler_name} consumer with '{outcome}'.")
    return _hint(f"With {fault}, the {handler_name} consumer ends with '{found}', not '{outcome}'. "
                 "Think about what is already saved at that moment, and what the redelivery will find.")


def check_race_loser(answer: Any) -> Feedback:
    """Lesson 03: on DuckDB, with A holding its transaction open while B runs, who fails and where (``"A at commit"``)."""
    if (blank := _blank(answer, 'a string such as "B at record id" or "nobody"')) is not None:
        return blank
    outcome = race(DuckDBPayments())
    if str(answer).strip() == outcome.failed:
        return _right(f"{outcome.failed}: DuckDB lets both insert, and whoever commits second fails.")
    if str(answer).strip().startswith("B"):
        return _hint("B never had to wait, and it committed while A was still holding its transaction open. "
                     "Who then tries to commit second?")
    return _hint("Under DuckDB's optimistic concurrency nobody waits; the clash is found when a transaction commits. "
                 'Answer in the form "A at begin", "B at commit" or "nobody".')


def check_interleaving_count(answer: Any) -> Feedback:
    """Lesson 03: how many distinct interleavings of two work-first consumers charge twice."""
    if (blank := _blank(answer, "a whole number")) is not None:
        return blank
    table = interleavings(WorkFirstHandler())
    twice = int((table["outcome"] == "charged twice").sum())
    if answer == twice:
        return _right(f"{twice} of {len(table)} interleavings charge twice: the check outside the transaction lets both pass.")
    if answer == len(table):
        return _hint("That counts every interleaving. Some are safe: which ones, and why?")
    return _hint(f"Not {answer}. Count the rows of interleavings(WorkFirstHandler()) whose outcome is 'charged twice'.")



def check_key_function(charge_key: Any) -> Feedback:
    """Lesson 04: a function from a message ID to the idempotency key of that message's charge call."""
    if (blank := _blank(charge_key, "a function such as def charge_key(message_id): ...")) is not None:
        return blank
    if not callable(charge_key):
        return _hint("Give a function that takes a message ID and returns a key (a string).")
    first, again, other = charge_key("m-7f3"), charge_key("m-7f3"), charge_key("m-9c2")
    if not isinstance(first, str) or not first:
        return _hint(f"The key should be a non-empty string; got {first!r}.")
    if first != again:
        return _hint("Two calls for m-7f3 gave two different keys, as a fresh UUID per attempt would. A retry must send "
                     "the same key as the first attempt, or the provider sees a new request and charges again.")
    if first == other:
        return _hint("m-7f3 and m-9c2 got the same key, so the second payment would be answered with the first one's "
                     "stored result and never charged. Build the key from the message ID.")
    if first == "m-7f3":
        return _hint("That is the bare message ID. It works for one call, but a handler that makes two calls (a charge "
                     "and a fee, say) would give both the same key. Name the call in the key too.")
    provider = PaymentProvider()
    for _ in range(3):  # the first delivery's answer was lost; two redeliveries call again with their key
        provider.charge(charge_key("m-7f3"), order_id=1042, amount=40)
    return _right(f"'{first}' is the same on every retry and unique to this message and call: "
                  f"{len(provider.charges)} charge for three calls.")


def check_http_statuses(answer: Any) -> Feedback:
    """Lesson 08: the status the IETF draft suggests for each refusal, checked against the running server."""
    if (blank := _blank(answer, 'a dict {"missing key": ..., "still in progress": ..., "different payload": ...}')) is not None:
        return blank
    api = ChargesApi(work_seconds=0.5)
    with serve(api) as server:
        client = Client(server.url)
        charge = {"order_id": 1042, "amount": 40}
        measured = {"missing key": client.post_charge(charge)[0].status}
        slow = threading.Thread(target=client.post_charge, args=(charge, "k"))
        slow.start()
        time.sleep(0.1)
        measured["still in progress"] = client.post_charge(charge, key="k")[0].status
        slow.join()
        measured["different payload"] = client.post_charge({"order_id": 1042, "amount": 80}, key="k")[0].status
    if not isinstance(answer, dict) or set(answer) != set(measured):
        return _hint(f"Answer with a dict with exactly these keys: {sorted(measured)}.")
    wrong = [case for case in measured if answer[case] != measured[case]]
    if not wrong:
        return _right("400, 409 and 422, as the server answered just now.")
    return _hint(f"Not right yet for: {', '.join(wrong)}. Provoke each case against the server and read the status.")



def check_id_strategies(answer: Any) -> Feedback:
    """Lesson 05: which strategy catches every duplicate, which only redeliveries, which drops real payments."""
    cases = ("catches every duplicate", "catches redeliveries only", "drops real payments")
    if (blank := _blank(answer, f"a dict with the keys {list(cases)}")) is not None:
        return blank
    if not isinstance(answer, dict) or set(answer) != set(cases):
        return _hint(f"Answer with a dict with exactly these keys: {list(cases)}; values among {list(STRATEGIES)}.")
    measured = compare_strategies(twin_facts(30, twins=2), share=0.3)
    table = measured.groupby("strategy").sum(numeric_only=True)
    misses_new_copies = measured[~measured["source of duplicates"].isin(["redelivery", "all at once"])]
    truth = {
        "catches every duplicate": table[(table["duplicates missed"] == 0) & (table["real messages dropped"] == 0)].index[0],
        "catches redeliveries only": misses_new_copies.groupby("strategy")["duplicates caught"].sum().idxmin(),
        "drops real payments": table["real messages dropped"].idxmax(),
    }
    wrong = [case for case in cases if answer[case] != truth[case]]
    if not wrong:
        return _right("producer IDs catch everything, broker IDs only redeliveries, and a hash of the bytes "
                      "drops real payments that look alike.")
    return _hint(f"Look again at: {', '.join(wrong)}. Read the table row by row: which strategy has duplicates missed, "
                 "which has real messages dropped?")


def check_store_window(setup: Any, fault: Any) -> Feedback:
    """Lesson 06: a (store, crash point) where a cache outside the transaction charges twice."""
    for value, what in ((setup, "a store's label from the matrix"), (fault, "a fault such as 'crash before commit'")):
        if (blank := _blank(value, what)) is not None:
            return blank
    setups = places_to_remember(MemoryCache())
    if setup not in setups:
        return _hint(f"No store labelled {setup!r}; the labels are {list(setups)}.")
    table = store_matrix({setup: setups[setup]})
    row = table[table["fault"] == fault]
    if row.empty:
        return _hint(f"{setup!r} has no fault {fault!r}; its faults are {list(table['fault'])}.")
    if row["outcome"].iloc[0] == "charged twice":
        return _right(f"{setup}, {fault}: the charge is committed but the ID never claimed, so the redelivery charges again.")
    return _hint(f"{setup}, {fault} ends in '{row['outcome'].iloc[0]}'. Which order saves the work before the ID, "
                 "and where can a crash fall between the two?")


__all__ = ["Feedback", "check_crash_point", "check_http_statuses", "check_inbox_insert", "check_interleaving_count",
           "check_id_strategies", "check_key_function", "check_overcharge", "check_race_loser", "check_running_example",
           "check_store_window", "check_triple_charge"]
