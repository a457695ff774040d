"""Lesson 12, the case study: a loan account service that must open one account per
approved application, its five typical mistakes, the designs that survive every crash
and race, the outbox on the sending side, and the design review's five questions."""
