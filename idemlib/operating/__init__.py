"""Lesson 11, operating the inbox: a deliver-twice test for your own suite, the skip rate
and its alert over a simulated day, dead-letter replay, what the inbox costs per engine
(batched or not), and the inbox tables of well-known libraries."""
