import xml.etree.ElementTree as ET

import pytest

from idemlib.explore import RUNNING_EXAMPLE
from idemlib.faults import FaultPlan, LostAck
from idemlib.handlers import NaiveHandler
from idemlib.messages import payment_stream
from idemlib.pictures.widgets import PAGE_FRAMES, StepThrough, player_html
from idemlib.sim import simulate

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def run():
    return simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)


def shown_svg(player: StepThrough) -> ET.Element:
    markup = player.view.value
    return ET.fromstring(markup[markup.index("<svg"): markup.index("</svg>") + len("</svg>")])


def test_the_player_shows_the_picture_of_the_event_with_its_sentence_under_it(run):
    player = StepThrough(run, "naive consumer")
    assert player.view.value.index("</svg>") < player.view.value.rindex("is published and waits on the queue")
    scene = player.step(4)
    assert player.position == 4 and scene.event == "committed"
    svg = shown_svg(player)
    assert svg.get("data-event") == "committed"
    assert next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "total").get("data-total") == "40"
    assert "commits: what it wrote is now permanent" in player.view.value


def test_the_slider_drives_the_picture_and_stops_at_either_end(run):
    player = StepThrough(run, "naive consumer")
    player.slider.value = 7  # the slider counts from 1, as the picture does
    assert shown_svg(player).get("data-event") == "lease expired"
    player.step(-100)
    assert player.position == 0 and shown_svg(player).get("data-event") == "published"
    player.step(1000)
    assert player.position == len(player.scenes) - 1 and player.slider.value == player.play.max == len(player.scenes)
    assert "$40 too much" in player.view.value


def test_a_trace_alone_is_enough_and_says_what_is_owed_from_the_commits(run):
    from_trace, from_run = StepThrough(run.trace).scenes, StepThrough(run).scenes
    assert [(s.total, s.owed, s.sentence) for s in from_trace] == [(s.total, s.owed, s.sentence) for s in from_run]
    assert [r.amount for r in from_trace[-1].rows] == [40, 40]


def test_without_a_kernel_the_output_carries_the_player_with_every_frame(run):
    player = StepThrough(run, "naive consumer")
    bundle = player._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    page = bundle["text/html"]
    assert page.count('<figure class="idemlib-step"') == page.count("<svg") == len(player.scenes)
    assert "ack for m-7f3, but it is lost" in page and "<script>" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing loaded from the network


def test_the_page_stays_small_for_a_long_run():
    long_run = simulate(NaiveHandler(), payment_stream(60), watch_total=True)
    player = StepThrough(long_run)
    assert len(player.scenes) > PAGE_FRAMES
    page = player_html(player.scenes, "long")
    assert page.count("<svg") == PAGE_FRAMES and f"has {len(player.scenes)} events" in page


def test_a_trace_without_a_running_total_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="watch_total=True"):
        StepThrough(simulate(NaiveHandler(), [RUNNING_EXAMPLE]))
