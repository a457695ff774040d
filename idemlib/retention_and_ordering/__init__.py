"""Lesson 10, retention and ordering: how long to keep IDs (the retention horizon,
pruning on real PostgreSQL, TTL stores) and what ordering needs (version guards,
naturally idempotent writes, a stream's offset in place of an ID table)."""
