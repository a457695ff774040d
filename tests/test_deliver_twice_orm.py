"""deliver-twice on SQLAlchemy sessions: every statement the session sends, the ORM flush and the commit are steps,
so a consumer that only adds objects and commits dies before each of them; 20 messages, repeated statements."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Integer, String, create_engine, text
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from deliver_twice import NotIdempotent, assert_idempotent, idempotency_report

MESSAGES = [{"message_id": f"m-{n:02}", "order_id": 100 + n % 5, "items": [n, n + 1]} for n in range(20)]


class Base(DeclarativeBase):
    pass


class Line(Base):
    __tablename__ = "lines"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(Integer)
    item: Mapped[int] = mapped_column(Integer)


class Processed(Base):
    __tablename__ = "processed_messages"
    message_id: Mapped[str] = mapped_column(String, primary_key=True)


def reset(session: Session) -> None:
    Base.metadata.drop_all(session.connection())
    Base.metadata.create_all(session.connection())


def lines(session: Session) -> list[tuple[int, int]]:
    """The business state, without the generated id."""
    return sorted(session.execute(text("SELECT order_id, item FROM lines")).all())  # type: ignore[arg-type]


def orm_inbox(session: Session, message: dict[str, Any]) -> None:
    """The ID and the lines in one transaction; the lines reach the database only in the ORM's flush at commit."""
    new = session.execute(insert(Processed).values(message_id=message["message_id"])
                          .on_conflict_do_nothing()).rowcount
    if new:
        session.add_all(Line(order_id=message["order_id"], item=item) for item in message["items"])
    session.commit()


def orm_naive(session: Session, message: dict[str, Any]) -> None:
    session.add_all(Line(order_id=message["order_id"], item=item) for item in message["items"])
    session.commit()


def orm_commit_twice(session: Session, message: dict[str, Any]) -> None:
    """Commits the lines, then records the ID in a second transaction: a death between the two charges again."""
    if session.get(Processed, message["message_id"]) is not None:
        return
    session.add_all(Line(order_id=message["order_id"], item=item) for item in message["items"])
    session.commit()
    session.add(Processed(message_id=message["message_id"]))
    session.commit()


def sessions(tmp_path: Any) -> Any:
    return sessionmaker(create_engine(f"sqlite:///{tmp_path / 'orm.db'}"))


def test_a_session_consumer_over_20_messages_passes_and_its_flush_is_a_crash_point(tmp_path):
    report = assert_idempotent(orm_inbox, MESSAGES, connect=sessions(tmp_path), reset=reset, state=lines)
    crashes = [row.scenario for row in report if row.scenario.startswith("crash")]
    assert crashes == ["crash before step 1 of 5: INSERT INTO processed_messages", "crash before step 2 of 5: ORM flush",
                       "crash before step 3 of 5: INSERT INTO lines", "crash before step 4 of 5: INSERT INTO lines",
                       "crash before step 5 of 5: COMMIT"], crashes
    assert report.not_played == [
        "two deliveries at once: not played for a SQLAlchemy session (the test cannot yet tell when one session waits "
        "for another's lock through the ORM); race the same statements with the driver's own connection (psycopg, "
        "or a SQLite file), which it plays"]


def test_a_naive_session_consumer_fails_and_two_commits_fail_at_the_second(tmp_path):
    with pytest.raises(NotIdempotent, match="'orm_naive' is not idempotent"):
        assert_idempotent(orm_naive, MESSAGES[:3], connect=sessions(tmp_path), reset=reset, state=lines)
    failed = [row.scenario for row in idempotency_report(orm_commit_twice, MESSAGES[:3], connect=sessions(tmp_path),
                                                          reset=reset, state=lines).failed()]
    assert any(name.startswith("crash before") and "INSERT INTO processed_messages" in name for name in failed), failed
    assert not any(name.startswith("every message") for name in failed), "alone, the lookup skips the duplicate"
