"""Lesson 04's topic: a provider call no transaction covers, and where in the consumer it sits."""
