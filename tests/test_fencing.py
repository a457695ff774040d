"""Lesson 09's fencing story on a real PostgreSQL: a compare-and-set takeover, and a late worker refused."""

from __future__ import annotations

import pytest

from idemlib.stores import postgres_unavailable

pytestmark = pytest.mark.skipif(postgres_unavailable() is not None, reason="needs PostgreSQL")


def test_two_racing_takeovers_make_one_claim_and_the_late_worker_is_refused_everywhere():
    from idemlib.long_work.fencing import race_on_postgres

    race = race_on_postgres().set_index("statement")
    assert race.loc["B (a second copy) tries to take over claim 1", "rows"] == 0  # its deadline is still ahead
    assert race.loc["C tries to take over claim 1 too, and waits for B's row lock", "rows"] == "waiting"
    assert race.loc["C's takeover, after B's commit, finds claim 2", "rows"] == 0
    for late in ("A wakes; its heartbeat for claim 1", "A calls the provider anyway, with claim 1",
                 "A marks claim 1 completed"):
        assert race.loc[late, "rows"] == 0, late
    assert race.attrs["final"] == {"record": ("completed", 2, "ch_B"), "charges at the provider": 1}


def test_a_read_then_a_plain_write_lets_both_racers_take_the_claim():
    from idemlib.long_work.fencing import read_then_set

    table = read_then_set().set_index("statement")
    assert table.loc["B writes its claim over it", "rows"] == table.loc["C writes its claim over it", "rows"] == 1
