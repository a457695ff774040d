"""Lesson 12's mortgage case: each mistake really fails, each fix really holds, the review is computed."""

from __future__ import annotations

import pytest

from idemlib.case_study import account_service
from idemlib.case_study.design_review import (
    MISTAKES,
    SAFE,
    Design,
    accounts_and_payouts,
    at_once,
    five_questions,
    payout_after_key_window,
    racing,
    reproduce_mistakes,
    review,
    run,
)
from idemlib.case_study.mortgage import APPLICATION_42, AccountService, open_account_message, parse_open_account
from idemlib.case_study.outbox import ApprovalService, RelayCrashed
from idemlib.case_study.retry_day import applications, retry_policies
from idemlib.case_study.slow_payout import LoanRecordsBank, PayoutInProgress, slow_payout
from idemlib.explore import crash_matrix, fault_points, interleavings
from idemlib.faults import Crash, FaultPlan, LostAck, LostResponse
from idemlib.long_work.inprogress import run_long
from idemlib.messages import BadMessage, Message
from idemlib.sim import simulate

pytest_plugins = ["idemlib.operating.pytest_plugin"]


def test_a_lost_ack_opens_a_second_account_without_a_guard():
    outcome = run(Design("no guard", guard="none"), FaultPlan(lost_acks=[LostAck()]))
    assert (outcome.accounts, outcome.payouts) == (2, 1)


def test_each_mistake_fails_under_its_failure_and_the_inbox_holds_under_the_same():
    table = reproduce_mistakes().set_index("mistake")
    for mistake in MISTAKES:
        row = table.loc[mistake.label]
        assert max(row["accounts"], row["payouts"]) == 2, mistake.label
        assert (row["accounts, fixed"], row["payouts, fixed"]) == (1, 1), mistake.label


def test_checking_outside_the_transaction_loses_most_races():
    counts = interleavings(*racing(MISTAKES[0]), effect="accounts")["accounts"].value_counts().to_dict()
    assert counts.get(2, 0) > counts.get(1, 0) > 0


@pytest.mark.parametrize("guard, accounts", [("check outside", 2), ("memory", 2), ("none", 2), ("inbox", 1),
                                             ("unique application", 1), ("version", 1)])
def test_two_consumers_holding_the_message_at_once_open_two_accounts_unless_the_guard_is_transactional(guard, accounts):
    outcome = at_once(Design(guard, guard=guard))
    assert (outcome.accounts, outcome.payouts) == (accounts, 1)


def test_memory_catches_a_lost_ack_but_forgets_on_restart():
    assert run(MISTAKES[2], FaultPlan(lost_acks=[LostAck()])).accounts == 1
    assert run(MISTAKES[2], FaultPlan(crashes=[Crash("ack")])).accounts == 2


def test_a_key_made_up_per_attempt_is_different_every_time():
    outcome = run(MISTAKES[1], FaultPlan(lost_responses=[LostResponse()]))
    assert len(set(outcome.keys)) == len(outcome.keys) == 2 and outcome.payouts == 2


@pytest.mark.parametrize("design", SAFE, ids=lambda d: d.label)
def test_every_safe_design_opens_one_account_and_pays_once_at_every_crash_point(design):
    matrix = crash_matrix({design.label: design.parts}, APPLICATION_42, measure=accounts_and_payouts, label="design")
    assert list(matrix.columns) == ["design", "fault", "accounts", "payouts"]
    assert set(matrix["accounts"]) == {1} and set(matrix["payouts"]) == {1}
    assert len(matrix) == len(design.service().steps) + 2


@pytest.mark.parametrize("design", SAFE, ids=lambda d: d.label)
def test_every_safe_design_opens_one_account_in_every_interleaving(design):
    table = interleavings(*racing(design), effect="accounts")
    assert len(table) > 10 and set(table["accounts"]) == {1}


def test_the_five_questions_tell_the_mistakes_from_the_safe_designs():
    for design in SAFE:
        assert all(answer.startswith("yes") for answer in five_questions(design)), design.label
    # Each mistake fails the question the article ties it to (1-based, in its order).
    expected_no = {MISTAKES[0]: 3, MISTAKES[1]: 2, MISTAKES[2]: 1, MISTAKES[3]: 4, MISTAKES[4]: 5}
    for design, question in expected_no.items():
        assert five_questions(design).iloc[question - 1].startswith("NO"), (design.label, question)
    # Two deliveries at once are a way of arriving twice: the check outside fails question 1 too.
    assert "two consumers at once: 2 accounts" in five_questions(MISTAKES[0]).iloc[0]


def test_the_short_table_never_says_yes_beside_a_wrong_outcome():
    table = review(MISTAKES + SAFE)
    assert list(table.columns) == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert set(table.stack()) - {"yes"} == {cell for cell in table.stack() if cell.startswith("no: ")}
    # Every detail of a yes names no doubled count.
    for design in MISTAKES + SAFE:
        for answer in five_questions(design):
            if answer.startswith("yes"):
                assert "2 accounts" not in answer and "2 payouts" not in answer, (design.label, answer)


def test_the_service_keeps_its_own_ids_and_looks_the_payout_up_when_the_outage_outlasts_the_payment_systems_keys():
    inbox = SAFE[0]
    assert five_questions(inbox, 3).iloc[3].startswith("yes")
    # 30 h: the service still knows m-42, but the payment system (24 h) has forgotten m-42:payout.
    assert review((inbox,), outage_hours=30).iloc[0]["Q4"] == "no: 2 payouts after the late retry"
    # Its own IDs pruned after 2 h: the redelivery opens a second account, whatever the payment system keeps.
    pruned = Design("pruned", keep_hours=2, reconcile=True)
    assert review((pruned,), outage_hours=3).iloc[0]["Q4"] == "no: 2 accounts after the late redelivery"
    assert five_questions(Design("both", keep_hours=30.5, reconcile=True), 30).iloc[3].startswith("yes")


def test_a_reconciling_service_still_shows_a_key_made_up_per_attempt():
    # The lookup hides a lost answer's retry; a first call rate limited (429, before the payment system's
    # idempotency layer: nothing paid) is retried, and the new key shows.
    made_up = Design("made up", payout_key="per attempt", reconcile=True)
    assert review((made_up,)).iloc[0]["Q2"] == "no: a new key per call"
    limited = run(made_up, rate_limit_first_payout=True)
    assert limited.payouts == 1 and len(set(limited.keys)) == 2 and limited.lookups == 1
    assert "then a 429 (rate limited before the idempotency layer)" in five_questions(made_up).iloc[1]


def test_the_payout_intent_and_its_lookup_pay_once_when_the_replay_outlasts_the_payment_systems_keys():
    table = payout_after_key_window(30).reset_index(drop=True)
    inbox, reconciling = table.iloc[0], table.iloc[1]
    # The crash rolled the inbox's account back; 30 h later its key is forgotten: paid twice.
    assert (inbox["crash"], inbox["payouts"], inbox["lookups"]) == ("after the payout, before commit", 2, 0)
    # The intent was committed before the call: the redelivery finds it unconfirmed, looks up once, finds the payout.
    assert (reconciling["crash"], reconciling["payouts"], reconciling["payout calls"], reconciling["lookups"]) == (
        "after the payout, before record payout", 1, 1, 1)
    assert (table["accounts"] == 1).all()


def test_a_reconciling_service_looks_up_only_when_an_earlier_delivery_left_the_intent_unconfirmed():
    reconciling = Design("reconciling", reconcile=True)
    assert run(reconciling).lookups == 0  # the first delivery's own intent cannot have been paid
    assert run(reconciling, FaultPlan(lost_acks=[LostAck()])).lookups == 0  # the intent was recorded paid
    assert run(reconciling, FaultPlan(crashes=[Crash("pay out")])).lookups == 1  # committed, then died: unknown
    # A crash before the commit takes the intent with it: the redelivery's own intent is new, nothing to look up.
    assert run(reconciling, FaultPlan(crashes=[Crash("commit")])).lookups == 0


def test_retries_off_lose_accounts_and_careful_retries_still_duplicate():
    table = retry_policies(applications(100), FaultPlan(crash_rate=0.02, ack_loss_rate=0.05, seed=3)).set_index("policy")
    on, off, careful = (table.iloc[i] for i in range(3))
    assert on["two or more accounts"] > careful["two or more accounts"] > 0
    assert off["two or more accounts"] == 0 and off["no account"] > 0


def test_the_outbox_republishes_with_the_same_id_and_the_inbox_absorbs_it():
    approvals = ApprovalService()
    approvals.approve(42, 250_000)
    published: list[Message] = []
    with pytest.raises(RelayCrashed):
        approvals.relay(published.append, crash_after_publish=True)
    assert approvals.relay(published.append) == 1
    assert [m.message_id for m in published] == ["m-42", "m-42"]
    assert run(SAFE[0], messages=tuple(published)).once
    assert approvals.relay(published.append) == 0  # marked published at last


def test_a_crash_before_the_approval_commits_leaves_nothing_to_publish():
    approvals = ApprovalService()
    approvals.approve(43, 1_000, crash_before_commit=True)
    assert approvals.approved() == [] and approvals.relay(lambda message: None) == 0


@pytest.mark.parametrize("body", [{"application_id": 42}, {"application_id": "42", "amount": 1}, "text",
                                  {"application_id": 42, "amount": 2**31}, {"application_id": True, "amount": 1}])
def test_a_malformed_open_account_message_is_refused_with_its_field_named(body):
    with pytest.raises(BadMessage, match="m-bad"):
        parse_open_account(Message("m-bad", body))


def test_a_malformed_message_is_dead_lettered_and_the_good_one_still_opens_its_account():
    outcome = run(SAFE[0], messages=(Message("m-bad", {"application_id": 7}), APPLICATION_42))
    assert outcome.once and outcome.dead_letters == 1


@pytest.mark.parametrize("settings, message", [({"guard": "inbx"}, "guard must be one of"),
                                               ({"payout_key": "Derived"}, "payout_key must be one of"),
                                               ({"keep_hours": 0}, "keep_hours must be"),
                                               ({"keep_hours": float("nan")}, "keep_hours must be"),
                                               ({"keep_hours": "24"}, "keep_hours must be"),
                                               ({"reconcile": "yes"}, "reconcile must be")])
def test_a_design_is_refused_when_built_with_a_setting_it_cannot_run(settings, message):
    with pytest.raises(ValueError, match=message):
        Design("mine", **settings)


def test_a_design_with_an_unknown_setting_says_what_it_accepts():
    with pytest.raises(ValueError, match="guard must be one of"):
        AccountService("cache")
    with pytest.raises(ValueError, match="payout_key must be one of"):
        AccountService("inbox", "random")


def test_on_postgres_the_check_inside_the_transaction_opens_two_accounts_unless_a_unique_key_settles_it(postgres_schema):
    without = account_service.two_deliveries_at_once(postgres_schema.connect, APPLICATION_42, unique_application=False)
    assert (without.attrs["isolation"], without.attrs["accounts"]) == ("read committed", 2)
    with_key = account_service.two_deliveries_at_once(postgres_schema.connect, APPLICATION_42, unique_application=True)
    assert with_key.attrs["accounts"] == 1
    assert "UniqueViolation" in with_key["what happened"].iloc[2]
    assert with_key["what happened"].iloc[-1] == "found the account; acknowledged"


def test_on_postgres_repeatable_read_still_opens_two_accounts_and_serializable_fails_the_second(postgres_schema):
    table = account_service.stricter_levels(postgres_schema.connect, APPLICATION_42)
    assert list(table.index) == ["repeatable read", "serializable"]  # the levels the server reports it ran at
    assert table.loc["repeatable read", "accounts"] == 2
    assert table.loc["repeatable read", "A, after B committed"] == "acknowledged"
    assert table.loc["serializable", "accounts"] == 1
    assert "SerializationFailure" in table.loc["serializable", "A, after B committed"]


def test_lessons_11_deliver_twice_test_catches_the_missing_key_only_in_its_races(postgres_schema):
    report = account_service.deliver_twice(postgres_schema.connect, unique_application=False)
    failing = report[~report["same state as one delivery"]]["scenario"]
    assert len(failing) > 0 and failing.str.startswith("two at once").all()
    assert account_service.deliver_twice(postgres_schema.connect, unique_application=True)[
        "same state as one delivery"].all()


def test_a_payout_called_inside_the_open_transaction_holds_its_session_and_makes_the_twin_wait(postgres_schema):
    table = account_service.payout_placement(postgres_schema.connect)
    inside = table.loc["call inside the open transaction"]
    first = table.loc["call first, then the transaction"]
    assert inside["first session during its call"] == "idle in transaction"
    assert inside["second delivery"] == "waits for the first" and inside["payout calls (one key)"] == 1
    assert first["second delivery"] == "does not wait" and first["payout calls (one key)"] == 2
    assert (table["accounts"] == 1).all()


def test_a_payout_slower_than_the_lease_is_called_once_only_with_lesson_09s_record_and_its_deadline():
    table = slow_payout().reset_index(drop=True)
    inbox, no_key, short, sized_deadline, sized_lease = (table.iloc[i] for i in range(5))
    # Without the record, the twin finds no committed ID and sends a second payout request:
    # answered from the derived key, or a second payout without one.
    assert inbox["payout calls"] == 2 and "called the payment system too" in inbox["the deliveries after the first"]
    assert "unique key" in inbox["the deliveries after the first"]  # DuckDB refuses the twin's ID at its commit
    assert (inbox["payouts"], no_key["payouts"], no_key["accounts"]) == (1, 2, 1)
    # A deadline shorter than the payout: every redelivery takes over and calls again, until dead-lettered.
    assert short["payout calls"] == short["deliveries"] == 5 and short["dead-lettered"] == 1
    assert "backed off" in sized_deadline["the deliveries after the first"] and sized_deadline["payout calls"] == 1
    assert sized_lease["deliveries"] == 1 and sized_lease["the deliveries after the first"] == "none came"
    assert (table.drop(index=1)["payouts"] == 1).all() and (table["accounts"] == 1).all()


def test_lesson_09s_handler_opens_the_loan_account_with_its_completion_at_every_crash_point():
    handler = PayoutInProgress(60.0)
    database = LoanRecordsBank()
    for fault, plan in fault_points(handler):
        run = run_long(handler, (APPLICATION_42,), faults=plan, database=database)
        assert (run.card_charges, run.local_rows) == (1, 1), fault
        assert database.accounts()["application_id"].tolist() == [42], fault


def test_the_payout_intent_is_committed_with_the_account_before_the_call_and_confirmed_after_it():
    reconciling = Design("reconciling", reconcile=True)
    payments, bank = reconciling.payment_system(), reconciling.bank()
    # The process dies after the payout call: the account and the intent are committed, the intent unconfirmed.
    simulate(reconciling.service(payments), (APPLICATION_42,), faults=FaultPlan(crashes=[Crash("record payout")]),
             database=bank, provider=payments, max_deliveries=1)
    assert bank.intents().to_dict("records") == [{"application_id": 42, "amount": 250_000, "status": "intended"}]
    assert len(bank.accounts()) == 1 and payments.payouts == 1
    # Its redelivery, on the same database and payment system, looks the payout up and confirms it.
    simulate(reconciling.service(payments), (APPLICATION_42,), database=bank, provider=payments)
    assert bank.intents()["status"].tolist() == ["paid"] and payments.payouts == 1 and len(bank.accounts()) == 1


def test_the_version_guard_acknowledges_an_early_command_as_done():
    """Half of ordering only: a command approved at a later version, delivered first, is refused and acked, not retried."""
    early = open_account_message("m-42-v2", 42, 250_000, version=2)
    outcome = run(SAFE[2], messages=(early,))
    assert (outcome.accounts, outcome.payouts, outcome.dead_letters) == (0, 0, 0)
    # The same message at the version the application is at opens the account: the refusal was the version's.
    assert run(SAFE[2], messages=(open_account_message("m-42-v1", 42, 250_000, version=1),)).once


def test_the_runs_that_tell_the_three_safe_designs_apart():
    from idemlib.case_study.design_review import telling_apart

    table = telling_apart()
    resent, second, early = table.index
    assert list(table.loc[resent]) == ["2 accounts, 2 payouts", "1 account, 1 payout", "1 account, 1 payout"]
    assert list(table.loc[second]) == ["2 accounts, 2 payouts", "1 account, 1 payout", "2 accounts, 2 payouts"]
    assert table.loc[early].iloc[2] == "0 accounts, 0 payouts"


def test_a_payout_key_derived_from_the_approval_survives_a_copy_under_a_new_message_id():
    from idemlib.case_study.design_review import RESENT_42, SECOND_42, Design, run
    from idemlib.case_study.mortgage import APPLICATION_42

    by_message, by_approval = Design("by message"), Design("by approval", payout_key="approval")
    assert run(by_message, messages=(APPLICATION_42, RESENT_42)).payouts == 2
    assert run(by_approval, messages=(APPLICATION_42, RESENT_42)).payouts == 1  # the inbox still opens two accounts
    assert run(by_approval, messages=(APPLICATION_42, SECOND_42)).payouts == 2  # a new approval is a new payout
