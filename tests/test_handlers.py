"""The crash matrix: every handler, one fault at every point, redelivered until acked."""

import pytest

from idemlib.explore import RUNNING_EXAMPLE, crash_matrix, fault_points
from idemlib.handlers import HANDLERS, InboxHandler, handler_named


@pytest.fixture(scope="module")
def matrix():
    return crash_matrix().set_index(["handler", "fault"])["outcome"]


def test_every_handler_has_a_row_for_every_step_plus_no_fault_and_a_lost_ack(matrix):
    for handler in HANDLERS:
        faults = list(matrix.loc[handler.name].index)
        assert faults == [name for name, _ in fault_points(handler)]
        assert len(faults) == len(handler.steps) + 2


def test_the_inbox_charges_once_whatever_single_fault_strikes(matrix):
    assert set(matrix.loc["inbox"]) == {"charged once"}


def test_the_naive_consumer_charges_twice_when_a_committed_delivery_is_not_acked(matrix):
    assert matrix.loc[("naive", "ack lost")] == "charged twice"
    assert matrix.loc[("naive", "crash before ack")] == "charged twice"
    assert matrix.loc[("naive", "crash before commit")] == "charged once"


def test_saving_the_id_first_loses_the_charge_on_a_crash_in_between(matrix):
    assert matrix.loc[("ID first", "crash before charge")] == "charge lost"
    assert (matrix.loc["ID first"] != "charged twice").all()


def test_saving_the_work_first_repeats_the_charge_on_a_crash_in_between(matrix):
    assert matrix.loc[("work first", "crash before record id")] == "charged twice"
    assert (matrix.loc["work first"] != "charge lost").all()


def test_acking_first_is_at_most_once(matrix):
    after_ack = [f"crash before {step}" for step in handler_named("ack first").steps[1:]]
    assert all(matrix.loc[("ack first", fault)] == "charge lost" for fault in after_ack)
    assert (matrix.loc["ack first"] != "charged twice").all()


def test_a_crash_matrix_on_another_message_uses_its_amount():
    other = RUNNING_EXAMPLE.charge("m-8a1", 7, 15)
    table = crash_matrix([InboxHandler()], other)
    assert set(table["total charged"]) == {15}


def test_an_unknown_handler_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="inbox"):
        handler_named("exactly once")
