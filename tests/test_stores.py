import pytest

from idemlib.stores import DuckDBPayments, WriteConflict


def test_record_message_says_whether_the_id_is_new(engine):
    session = engine.session()
    assert session.record_message("m-7f3") is True
    assert session.record_message("m-7f3") is False
    assert session.has_processed("m-7f3") and not session.has_processed("m-8a1")


def test_a_rollback_undoes_the_id_and_the_charge_together(engine):
    db = engine
    session = db.session()
    session.begin()
    session.record_message("m-7f3")
    session.charge(1042, 40, "m-7f3")
    session.rollback()
    assert db.total_charged() == 0 and db.processed_ids() == []


def test_outside_a_transaction_each_write_commits_on_its_own(engine):
    db = engine
    db.session().charge(1042, 40, "m-7f3")
    assert db.total_charged() == 40
    assert list(db.payments()["message_id"]) == ["m-7f3"]


def test_duckdb_lets_both_rivals_insert_and_fails_the_second_at_commit():
    """Measured on the installed DuckDB: optimistic concurrency, the loser learns at COMMIT."""
    db = DuckDBPayments()
    first, second = db.session(), db.session()
    first.begin()
    second.begin()
    assert first.record_message("m-7f3") is True
    assert second.record_message("m-7f3") is True  # it cannot see the uncommitted rival
    first.commit()
    with pytest.raises(WriteConflict, match="m-7f3"):
        second.commit()
    assert not second.in_transaction
    assert db.processed_ids() == ["m-7f3"]


def test_duckdb_sees_a_rival_that_committed_after_this_transaction_began():
    """Measured: a conflict check reads committed keys, so the late insert writes zero rows."""
    db = DuckDBPayments()
    late, early = db.session(), db.session()
    late.begin()
    early.record_message("m-7f3")
    assert late.record_message("m-7f3") is False
    late.commit()


def test_emptying_a_database_forgets_the_money_and_the_ids(engine):
    engine.session().charge(1042, 40, "m-7f3")
    engine.session().record_message("m-7f3")
    engine.empty()
    assert engine.total_charged() == 0 and engine.processed_ids() == []


def test_a_plain_duplicate_insert_inside_a_transaction_is_a_write_conflict_and_ends_it(engine):
    session = engine.session()
    session.record_message("m-7f3")
    session.begin()
    with pytest.raises(WriteConflict):
        session._run("INSERT INTO processed_messages (message_id) VALUES ('m-7f3')")
    assert not session.in_transaction
    session.begin()  # the session is usable again
    session.rollback()


def test_a_file_database_keeps_the_money_across_connections(tmp_path):
    path = str(tmp_path / "payments.duckdb")
    db = DuckDBPayments(path)
    db.session().charge(1042, 40, "m-7f3")
    del db
    assert DuckDBPayments(path).total_charged() == 40
