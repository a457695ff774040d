"""Lesson 09, long work: the broker's lease kept by a live consumer, the in-progress record and its deadline as
the safety net for a crash, and the real Powertools idempotency utility run under the same faults, side by side."""
