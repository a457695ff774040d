"""What a run of the deliver-twice test found: one row per scenario, the families not played, the failure's text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class NotIdempotent(AssertionError):
    """A duplicate changed the business state: the text names the scenario, the message and the difference."""


@dataclass(frozen=True)
class Scenario:
    """One way of making duplicates, played from the starting state: what it did and whether the state held."""

    scenario: str
    deliveries: int
    same: bool
    """Whether the state equals one delivery's and every message ended acknowledged."""
    differs: str
    """What differs, naming the messages; empty when ``same``."""
    fix: str = ""
    """What usually fixes a consumer failing this scenario."""


class Report(list[Scenario]):
    """The scenarios played, one :class:`Scenario` each, in the order played, and the families it could not play."""

    not_played: list[str]
    """One line per family of scenarios this database or consumer could not be given, and why."""

    def __init__(self, rows: Sequence[Scenario] = (), not_played: Sequence[str] = ()) -> None:
        super().__init__(rows)
        self.not_played = list(not_played)

    @property
    def passed(self) -> bool:
        return all(row.same for row in self)

    def failed(self) -> list[Scenario]:
        return [row for row in self if not row.same]

    def __str__(self) -> str:
        return "\n".join([f"{'ok  ' if row.same else 'FAIL'} {row.scenario} ({row.deliveries} deliveries)"
                          + ("" if row.same else f": {row.differs}") for row in self]
                         + [f"not played: {line}" for line in self.not_played])


def difference(once: Any, got: Any) -> str:
    """What a run left that one delivery did not (extra rows) and the reverse (missing), table by table."""
    if isinstance(once, dict) and isinstance(got, dict):
        parts = [f"table {name}: {difference(once.get(name, []), got.get(name, []))}"
                 for name in sorted(set(once) | set(got)) if once.get(name) != got.get(name)]
        return "; ".join(parts)
    if isinstance(once, (list, tuple)) and isinstance(got, (list, tuple)):
        try:
            extra, missing = Counter(got) - Counter(once), Counter(once) - Counter(got)
        except TypeError:  # rows that cannot be hashed: show both
            pass
        else:
            parts = [f"{verb} {sorted(rows.elements(), key=repr)}" for verb, rows in (("extra", extra), ("missing", missing))
                     if rows]
            return "; ".join(parts) or f"the same rows in another order: {got!r}"
    return f"one delivery leaves {once!r}, this run {got!r}"


def not_idempotent_text(handle: Any, report: Sequence[Scenario]) -> str:
    """The failure's text: each failing scenario, what differs (naming the messages) and what usually fixes it."""
    failed = [row for row in report if not row.same]
    lines, fixes = [], set()
    for row in failed:  # each fix once, after the first scenario it fixes
        lines.append(f"- {row.scenario}: {row.differs}" + ("" if row.fix in fixes else f"\n  fix: {row.fix}"))
        fixes.add(row.fix)
    lines += [f"(not played: {line})" for line in getattr(report, "not_played", [])]
    return (f"{getattr(handle, '__name__', handle)!r} is not idempotent in {len(failed)} of {len(report)} "
            "scenarios:\n" + "\n".join(lines))
