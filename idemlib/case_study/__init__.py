"""Lesson 12, the case study: a loan account service that must open one account per
approved application and pay each loan out once, its five typical mistakes, the designs
that survive every crash and race, a payout slower than the lease and a payout replayed
after the payment system forgot its key, the outbox on the sending side, and the design
review's five questions."""
