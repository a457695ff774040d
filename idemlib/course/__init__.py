"""The course's own machinery: the lessons' list and navigation, the site, student copies,
grading, the glossary and the exercise checks.

It sits on top: it may import anything in idemlib, and nothing in idemlib imports it.
"""
