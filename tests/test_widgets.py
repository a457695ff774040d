from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import FaultPlan, LostAck
from idemlib.handlers import NaiveHandler
from idemlib.sim import simulate
from idemlib.widgets import StepThrough, frames_of

import pytest


@pytest.fixture
def run():
    return simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)


def test_the_frames_follow_the_money_and_the_message(run):
    frames = frames_of(run.trace)
    assert [f.total for f in frames][-1] == 80
    lost = next(f for f in frames if f.event == "ack lost")
    assert lost.total == 40 and "leased to consumer A (delivery 1)" in lost.queue
    assert frames[-1].queue == "m-7f3: removed (acked)"


def test_stepping_moves_the_view_without_a_front_end(run):
    player = StepThrough(run.trace, "naive consumer")
    assert "published" in player.view.value
    frame = player.step(4)
    assert player.position == 4 and frame.event == "committed"
    assert "commits" in player.view.value and "$40" in player.view.value
    player.step(-100)
    assert player.position == 0
    player.step(1000)
    assert "$80" in player.view.value


def test_without_a_kernel_the_output_carries_a_storyboard_of_every_frame(run):
    player = StepThrough(run.trace, "naive consumer")
    bundle = player._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/html"].count("<tr>") == len(player.frames) + 1
    assert "ack for m-7f3, but it is lost" in bundle["text/html"]


def test_a_trace_without_a_running_total_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="watch_total=True"):
        frames_of(simulate(NaiveHandler(), [RUNNING_EXAMPLE]).trace)
