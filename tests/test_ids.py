"""Choosing the ID: what each strategy catches and misses, measured through the real inbox."""

import pytest

from idemlib.ids import STRATEGIES, Copy, assign_id, compare_strategies, make_copies, twin_facts

FACTS = twin_facts(40, twins=3)


@pytest.fixture(scope="module")
def table():
    return compare_strategies(FACTS, share=0.25).set_index(["source of duplicates", "strategy"])


def test_the_producers_id_catches_every_kind_of_duplicate_and_drops_nothing(table):
    producer = table.xs("producer", level="strategy")
    assert (producer["duplicates missed"] == 0).all() and (producer["real messages dropped"] == 0).all()
    assert (producer["duplicates caught"] > 0).all()


@pytest.mark.parametrize("source", ["producer retry", "relay republish", "replay"])
def test_a_broker_id_misses_every_new_copy_of_a_fact(table, source):
    row = table.loc[(source, "broker")]
    assert row["duplicates caught"] == 0 and row["duplicates missed"] > 0


def test_a_broker_id_still_catches_redeliveries(table):
    row = table.loc[("redelivery", "broker")]
    assert row["duplicates caught"] > 0 and row["duplicates missed"] == 0


def test_a_content_hash_collapses_two_real_payments_with_the_same_bytes(table):
    hashed = table.xs("content hash", level="strategy")
    assert (hashed["real messages dropped"] == 3).all()
    assert (hashed["duplicates missed"] == 0).all()


def test_ids_by_strategy():
    body = {"order_id": 1, "amount": 40}
    original, retry = Copy(7, "original", 0, body), Copy(7, "producer retry", 1, body)
    assert assign_id(original, "producer") == assign_id(retry, "producer") == "evt-0007"
    assert assign_id(original, "broker") != assign_id(retry, "broker")
    assert assign_id(original, "content hash") == assign_id(Copy(8, "original", 5, dict(body)), "content hash")
    with pytest.raises(ValueError, match="producer"):
        assign_id(original, "uuid4")
    assert set(STRATEGIES) == {"producer", "broker", "content hash"}


def test_copies_are_drawn_from_a_seed():
    assert make_copies(FACTS, {"replay": 0.5}) == make_copies(FACTS, {"replay": 0.5})
    assert len(make_copies(FACTS, {})) == len(FACTS)


def test_every_strategy_meets_the_very_same_lost_acks(table):
    # Lost acks are drawn per copy on the queue, so the deliveries do not depend on how copies are named.
    deliveries = table["deliveries"].unstack("strategy")
    assert (deliveries.nunique(axis=1) == 1).all()


def test_a_function_of_the_record_is_a_strategy_and_the_request_id_is_the_producers_id():
    from idemlib.ids import judge, record
    copies = make_copies(FACTS, {"producer retry": 0.3, "relay republish": 0.3, "replay": 0.3})
    by_request = judge(lambda r: r["request_id"], copies, FACTS, ack_loss_rate=0.2)
    assert by_request == judge("producer", copies, FACTS, ack_loss_rate=0.2)
    assert judge(lambda r: f"{r['request_id']}#{r['attempt']}", copies, FACTS)["duplicates missed"] > 0
    retried = [record(c) for c in copies if c.source == "producer retry"]
    assert retried and all(r["attempt"] == 2 for r in retried)


def test_a_replay_comes_back_changed_so_the_whole_message_hash_misses_it_and_the_request_id_does_not():
    from idemlib.ids import judge, record, whole_message_hash
    copies = make_copies(FACTS, {"replay": 0.3})
    replays = [c for c in copies if c.source == "replay"]
    originals = {c.fact: c for c in copies if c.source == "original"}
    assert replays and all(record(c)["x_death"] == 1 and record(originals[c.fact])["x_death"] == 0 for c in replays)
    assert judge(whole_message_hash, copies, FACTS)["duplicates missed"] == len(replays)
    assert judge(lambda r: r["request_id"], copies, FACTS)["duplicates missed"] == 0


def test_duckdb_gives_the_counts_sqlite_gives():
    """The lesson runs the copies on SQLite for speed; the inbox's answer is the engine's, not the speed's."""
    from idemlib.ids import judge
    from idemlib.stores import DuckDBPayments, SQLitePayments
    copies = make_copies(FACTS, {"producer retry": 0.3, "replay": 0.3})
    for strategy in STRATEGIES:
        assert (judge(strategy, copies, FACTS, ack_loss_rate=0.2, database=DuckDBPayments)
                == judge(strategy, copies, FACTS, ack_loss_rate=0.2, database=SQLitePayments))
