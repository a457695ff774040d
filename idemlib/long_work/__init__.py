"""Lesson 09, long work: the in-progress record, its deadline against the broker's lease,
and the real Powertools idempotency utility run under the same faults, side by side."""
