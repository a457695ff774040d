import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from idemlib.explore import RUNNING_EXAMPLE, crash_matrix, fault_sweep  # noqa: E402
from idemlib.faults import Crash, FaultPlan  # noqa: E402
from idemlib.handlers import InboxHandler, NaiveHandler, WorkFirstHandler  # noqa: E402
from idemlib.messages import payment_stream  # noqa: E402
from idemlib.pictures import plots  # noqa: E402
from idemlib.sim import simulate  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def assert_labelled(ax):
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def hatches_by_colour(ax):
    return {matplotlib.colors.to_hex(patch.get_facecolor()): patch.get_hatch() or "" for patch in ax.patches}


def test_outcomes_have_colour_blind_safe_colours_and_a_second_cue():
    assert set(plots.OUTCOME_COLOURS.values()) <= set(plots.OKABE_ITO.values())
    assert len(set(plots.OUTCOME_HATCHES.values())) == len(plots.OUTCOME_HATCHES), "each outcome its own hatching"
    assert matplotlib.rcParams["axes.prop_cycle"].by_key()["color"][0] == plots.OKABE_ITO["blue"]


def test_the_sweep_plot_has_a_line_per_handler_and_the_owed_total():
    sweep = fault_sweep([NaiveHandler(), InboxHandler()], payment_stream(20), [0.0, 0.5])
    ax = plots.plot_sweep(sweep)
    assert_labelled(ax)
    assert ax.get_ylabel() == "total charged ($)"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["naive consumer", "inbox consumer"] and "owe" in labels[2]
    lines = ax.get_lines()[:2]
    assert lines[0].get_marker() != lines[1].get_marker(), "lines differ by more than colour"


def test_the_crash_matrix_plot_colours_each_cell_by_its_outcome():
    matrix = crash_matrix([NaiveHandler(), InboxHandler()])
    ax = plots.plot_crash_matrix(matrix)
    assert_labelled(ax)
    colours = [patch.get_facecolor() for patch in ax.patches]
    assert len(colours) == len(matrix)
    red = matplotlib.colors.to_rgba(plots.OUTCOME_COLOURS["charged twice"])
    assert colours.count(red) == (matrix["outcome"] == "charged twice").sum() == 2
    twice = [patch for patch in ax.patches if patch.get_facecolor() == red]
    assert all(patch.get_hatch() == plots.OUTCOME_HATCHES["charged twice"] for patch in twice)
    assert sum("charged twice" in text.get_text() for text in ax.texts) == 2, "the outcome is written in the cell"


def test_the_legend_of_a_stacked_bar_chart_sits_beside_the_bars_not_on_them():
    counts = pd.DataFrame({"charged once": [3, 0], "charged twice": [1, 4]}, index=["inbox", "naive"])
    ax = plots.plot_outcome_counts(counts, title="t", xlabel="runs")
    assert_labelled(ax)
    ax.figure.canvas.draw()
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes_box.x1, "the legend must not cover a bar"
    assert hatches_by_colour(ax)[plots.OUTCOME_COLOURS["charged twice"].lower()] == "xx"


def test_totals_are_labelled_with_their_outcome_in_words():
    ax = plots.plot_totals(pd.Series({"no inbox": 80, "inbox": 40}), owed=40, title="t", xlabel="consumer")
    assert_labelled(ax)
    labels = [text.get_text() for text in ax.texts]
    assert labels == ["$80: charged twice", "$40: charged once"]


def test_the_timeline_has_a_row_per_actor():
    result = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40})
    ax = plots.plot_timeline(result.trace)
    assert_labelled(ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["broker", "consumer A", "consumer B"]


def test_a_charge_rolled_back_with_its_transaction_is_not_drawn_as_charged():
    # B's charge on DuckDB is undone when its commit fails; a crash before the commit undoes A's;
    # work first commits its charge on its own, so a crash after it undoes nothing.
    race = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40})
    crashed = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(crashes=[Crash("commit")]))
    own_commits = simulate(WorkFirstHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(crashes=[Crash("record id")]))
    for result, undone_by in ((race, ["consumer B"]), (crashed, ["consumer A"]), (own_commits, [])):
        undone = plots.undone_charges(result.trace)
        assert list(result.trace.loc[undone, "actor"]) == undone_by
        assert set(result.trace.loc[undone, "event"]) <= {"charged"}
    ax = plots.plot_timeline(race.trace)
    labels = ax.get_legend_handles_labels()[1]
    assert "charge rolled back" in labels and "rolled back" in [text.get_text() for text in ax.texts]


def test_the_wait_plot_shows_both_measured_times_in_milliseconds_beside_a_legend():
    races = pd.DataFrame({"engine": ["SQLite", "PostgreSQL"], "a_then": ["commits", "commits"],
                          "b_waited_at": ["begin", "record id"], "a_held_seconds": [0.30123, 0.30051],
                          "b_wait_seconds": [0.33871, 0.30037]})
    ax = plots.plot_waits(races)
    assert_labelled(ax)
    assert "338.7 ms" in [text.get_text() for text in ax.texts]
    ax.figure.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1


def test_the_retry_settings_plot_has_a_line_per_lease_on_every_panel():
    grid = pd.DataFrame({"lease (s)": [30, 30, 60, 60], "max deliveries": [5, 1, 5, 1],
                         "extra charges": [5, 0, 2, 0], "payments never made": [0, 6, 0, 6],
                         "dead-lettered, already charged": [0, 4, 0, 3]})
    extra, lost, charged = plots.plot_retry_settings(grid, title="t")
    assert list(charged.get_lines()[0].get_ydata()) == [0, 4]
    for ax in (extra, lost, charged):
        assert_labelled(ax)
        assert len(ax.get_lines()) == 2
    assert extra.get_lines()[0].get_marker() != extra.get_lines()[1].get_marker()
    assert extra.xaxis_inverted() and lost.xaxis_inverted() and charged.xaxis_inverted()
    assert list(extra.get_xticks()) == [1, 5]  # only the delivery limits that ran, no tick between them


def test_cells_that_draw_for_themselves_get_the_same_palette_and_layout_from_the_lessons_folder():
    from pathlib import Path

    rc = matplotlib.rc_params_from_file(str(Path(__file__).resolve().parent.parent / "notebooks" / "matplotlibrc"),
                                        use_default_template=False)
    assert rc["axes.prop_cycle"] == matplotlib.rcParams["axes.prop_cycle"]
    assert rc["figure.constrained_layout.use"] is True


def test_a_long_work_outcome_has_its_own_colour_hatching_and_legend_entry():
    matrix = pd.DataFrame({"handler": ["in progress"] * 2, "fault": ["no fault", "crash after commit"],
                           "total charged": [40, 40], "outcome": ["charged once", "once, after a wait"]})
    ax = plots.plot_crash_matrix(matrix)
    colour, hatch, _ = plots.LONG_WORK_OUTCOMES["once, after a wait"]
    waited = [p for p in ax.patches if p.get_facecolor() == matplotlib.colors.to_rgba(colour)]
    assert len(waited) == 1 and waited[0].get_hatch() == hatch
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "once, after a wait"
    assert any(t.get_text().startswith("crash after\n") for t in ax.texts)


def test_the_crash_matrix_legend_lists_only_the_outcomes_its_cells_show():
    matrix = pd.DataFrame({"handler": ["in progress"] * 2, "fault": ["no fault", "crash after the claim"],
                           "total charged": [40, 40], "outcome": ["charged once", "stuck, dead-lettered"]})
    ax = plots.plot_crash_matrix(matrix)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["charged once", "stuck, dead-lettered"]
