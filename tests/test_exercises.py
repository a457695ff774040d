"""What every check's verdict looks like to a learner; each check's own answers are in tests/test_exercises_NN.py."""

from idemlib.course import exercises as ex


def test_a_verdict_reads_as_correct_or_not_yet_in_text_and_in_html():
    right, wrong = ex.right("well done."), ex.hint("look again.")
    assert right and repr(right).startswith("✓ Correct") and "<b" in right._repr_html_()
    assert not wrong and repr(wrong).startswith("✗ Not yet")


def test_a_blank_answer_is_not_answered_yet_and_an_answer_is_not():
    assert "Not answered yet" in ex.blank(..., "a number").message
    assert ex.blank(0, "a number") is None


def test_html_escapes_what_the_learner_typed():
    assert "<script>" not in ex.hint("Not '<script>'.")._repr_html_()
