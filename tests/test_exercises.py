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


def test_a_named_option_is_matched_whole_in_any_case_and_an_unknown_one_lists_the_valid_ones():
    options = ("before commit", "after commit")
    assert ex.one_of(" after commit ", options) == "after commit"
    assert ex.one_of("After  Commit", options) == "after commit"  # the printed name, typed in another case
    refused = ex.one_of("After the commit", options)
    assert isinstance(refused, ex.Feedback) and not refused
    assert "'before commit', 'after commit'" in refused.message
    assert isinstance(ex.one_of(2, options), ex.Feedback)
    # the hint quotes the exercise's keys as printed (str.capitalize would lowercase them)
    assert "'DuckDB, B commits'" in ex.one_of("B", options, "the loser of 'DuckDB, B commits'").message


def test_a_check_that_cannot_judge_says_so_and_is_neither_right_nor_wrong():
    verdict = ex.not_judged("PostgreSQL is not running; start it with make lab")
    assert not verdict and verdict.verdict == "not judged"
    assert repr(verdict).startswith("Not judged") and "✗" not in repr(verdict)
