"""The deliver-twice helper: it catches consumers that duplicates hurt, passes the inbox, and says which message."""

from __future__ import annotations

import pytest

from idemlib import IdFirstHandler, InboxHandler, NaiveHandler, payment_stream
from idemlib.explore import RUNNING_EXAMPLE
from idemlib.handlers import BusinessRowHandler, WorkFirstHandler
from idemlib.operating.testing import NotIdempotent, assert_idempotent, idempotency_report, scenarios


def test_the_inbox_passes_every_scenario_on_every_engine(engine):
    report = assert_idempotent(InboxHandler(), payment_stream(4), database=lambda: engine.__class__())
    assert (report["changed by the duplicate"] == 0).all()
    assert len(report) == 3 + len(InboxHandler.steps)


def test_the_naive_handler_fails_and_the_message_names_the_message_and_the_doubled_charge():
    with pytest.raises(NotIdempotent) as caught:
        assert_idempotent(NaiveHandler(), [RUNNING_EXAMPLE])
    text = str(caught.value)
    assert "m-7f3 (charge order 1042 $40): charged 2 times, $80; one delivery charges 1 time, $40" in text
    assert "every message delivered twice, in order" in text
    assert "crash before commit" not in text, "a crash before the commit rolls back: that scenario passes"


def test_a_lost_charge_fails_too():
    with pytest.raises(NotIdempotent, match=r"charged 0 times, \$0; one delivery charges 1 time, \$40"):
        assert_idempotent(IdFirstHandler(), [RUNNING_EXAMPLE])


def test_work_first_is_caught_only_by_the_crash_between_its_writes():
    report = idempotency_report(WorkFirstHandler(), payment_stream(3))
    failing = report[report["changed by the duplicate"] > 0]["scenario"].tolist()
    assert failing == ["crash before record id on every first delivery"]


def test_the_business_row_passes_when_each_message_charges_its_own_order():
    assert_idempotent(BusinessRowHandler(), payment_stream(5))


def test_the_shuffle_is_seeded_and_keeps_both_copies_of_every_message():
    messages = payment_stream(6)
    first = scenarios(InboxHandler(), messages, seed=3)
    again = scenarios(InboxHandler(), messages, seed=3)
    name = "every message delivered twice, shuffled (seed 3)"
    assert first[name][0] == again[name][0]
    assert sorted(m.label for m in first[name][0]) == sorted(m.label for m in messages for _ in range(2))


def test_no_messages_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="at least one message"):
        assert_idempotent(InboxHandler(), [])


def test_a_handler_that_charges_nothing_is_refused_rather_than_passed():
    class AcksOnly(NaiveHandler):
        name = "acks only"

        def apply_charge(self, ctx, charge):  # noqa: ANN001
            """Writes nothing: every scenario would compare no payments with no payments."""

    with pytest.raises(ValueError, match="committed no payment"):
        assert_idempotent(AcksOnly(), payment_stream(2))
