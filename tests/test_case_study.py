"""Lesson 12's mortgage case: each mistake really fails, each fix really holds, the review is computed."""

from __future__ import annotations

import pytest

from idemlib.case_study.design_review import (MISTAKES, SAFE, Design, applications, at_once, crash_matrix, five_questions,
                                   race, reproduce_mistakes, retry_policies, run)
from idemlib.faults import Crash, FaultPlan, LostAck, LostResponse
from idemlib.messages import BadMessage, Message
from idemlib.case_study.mortgage import APPLICATION_42, AccountService, parse_open_account
from idemlib.case_study.outbox import ApprovalService, RelayCrashed


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
    counts = race(MISTAKES[0])["accounts"].value_counts().to_dict()
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
    matrix = crash_matrix(design)
    assert set(matrix["accounts"]) == {1} and set(matrix["payouts"]) == {1}
    assert len(matrix) == len(design.service().steps) + 2


@pytest.mark.parametrize("design", SAFE, ids=lambda d: d.label)
def test_every_safe_design_opens_one_account_in_every_interleaving(design):
    table = race(design)
    assert len(table) > 10 and set(table["accounts"]) == {1}


def test_the_five_questions_tell_the_mistakes_from_the_safe_designs():
    for design in SAFE:
        assert all(answer.startswith("yes") for answer in five_questions(design)), design.label
    # Each mistake fails the question the seed ties it to (1-based, in the seed's order).
    expected_no = {MISTAKES[0]: 3, MISTAKES[1]: 2, MISTAKES[2]: 1, MISTAKES[3]: 4, MISTAKES[4]: 5}
    for design, question in expected_no.items():
        assert five_questions(design).iloc[question - 1].startswith("NO"), (design.label, question)
    # Two deliveries at once are a way of arriving twice: the check outside fails question 1 too.
    assert "two consumers at once: 2 accounts" in five_questions(MISTAKES[0]).iloc[0]


def test_keys_must_outlive_the_longest_outage_not_just_the_usual_one():
    inbox = SAFE[0]
    assert five_questions(inbox, 3).iloc[3].startswith("yes")
    assert five_questions(inbox, 30).iloc[3] == "NO: keys kept 24 h, retry 30 h later: 1 account, 2 payouts"
    assert five_questions(Design("longer", key_hours=30.5), 30).iloc[3].startswith("yes")


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
                                               ({"key_hours": 0}, "key_hours must be"),
                                               ({"key_hours": float("nan")}, "key_hours must be"),
                                               ({"key_hours": "24"}, "key_hours must be")])
def test_a_design_is_refused_when_built_with_a_setting_it_cannot_run(settings, message):
    with pytest.raises(ValueError, match=message):
        Design("mine", **settings)


def test_a_design_with_an_unknown_setting_says_what_it_accepts():
    with pytest.raises(ValueError, match="guard must be one of"):
        AccountService("cache")
    with pytest.raises(ValueError, match="payout_key must be one of"):
        AccountService("inbox", "random")
