import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from idemlib import plots  # noqa: E402
from idemlib.explore import RUNNING_EXAMPLE, fault_sweep, crash_matrix  # noqa: E402
from idemlib.handlers import InboxHandler, NaiveHandler  # noqa: E402
from idemlib.messages import payment_stream  # noqa: E402
from idemlib.sim import simulate  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def assert_labelled(ax):
    assert ax.get_title() and ax.get_xlabel()


def test_the_sweep_plot_has_a_line_per_handler_and_the_owed_total():
    sweep = fault_sweep([NaiveHandler(), InboxHandler()], payment_stream(20), [0.0, 0.5])
    ax = plots.plot_sweep(sweep)
    assert_labelled(ax)
    assert ax.get_ylabel() == "total charged ($)"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["naive consumer", "inbox consumer"] and "owe" in labels[2]


def test_the_crash_matrix_plot_colours_each_cell_by_its_outcome():
    matrix = crash_matrix([NaiveHandler(), InboxHandler()])
    ax = plots.plot_crash_matrix(matrix)
    assert_labelled(ax)
    colours = [patch.get_facecolor() for patch in ax.patches]
    assert len(colours) == len(matrix)
    red = matplotlib.colors.to_rgba(plots.OUTCOME_COLOURS["charged twice"])
    assert colours.count(red) == (matrix["outcome"] == "charged twice").sum() == 2


def test_the_timeline_has_a_row_per_actor():
    result = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40})
    ax = plots.plot_timeline(result.trace)
    assert_labelled(ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["broker", "consumer A", "consumer B"]
