"""Shared fixtures: the engines, with PostgreSQL skipped locally when no server runs, but never in CI."""

from __future__ import annotations

import pytest

from idemlib.stores import DuckDBPayments, PostgresPayments, SQLitePayments, postgres_unavailable, require_servers


def need_postgres() -> None:
    """Skip with instructions when no PostgreSQL answers; fail instead where servers are required (CI)."""
    reason = postgres_unavailable()
    if reason is not None:
        if require_servers():
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
        pytest.skip(reason)


@pytest.fixture
def postgres() -> PostgresPayments:
    need_postgres()
    return PostgresPayments()


@pytest.fixture(params=["DuckDB", "SQLite", "PostgreSQL"])
def engine(request):
    """A fresh payments database on each engine in turn."""
    if request.param == "PostgreSQL":
        need_postgres()
        return PostgresPayments()
    return {"DuckDB": DuckDBPayments, "SQLite": SQLitePayments}[request.param]()


_executed: dict = {}


@pytest.fixture(scope="session")
def executed_lesson():
    """Execute a lesson once per test session, however many tests read its outputs."""
    from idemlib.publish import execute

    def run(path):
        if path not in _executed:
            _executed[path] = execute(path)
        return _executed[path]

    return run


@pytest.fixture(params=["in-process model", "real Redis"])
def cache(request):
    """A cache with Redis's SET NX EX: the in-process model, then the real server (skipped or failed as PostgreSQL is)."""
    from idemlib.stores.cache import MemoryCache, real_redis, redis_unavailable

    if request.param == "in-process model":
        return MemoryCache()
    reason = redis_unavailable()
    if reason is not None:
        if require_servers():
            pytest.fail(f"IDEMLIB_REQUIRE_SERVERS is set. {reason}")
        pytest.skip(reason)
    return real_redis()
