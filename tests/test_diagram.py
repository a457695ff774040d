"""The step-through's picture: each frame's SVG says what the trace says, for every kind of run the course makes."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from idemlib import RUNNING_EXAMPLE, Crash, FaultPlan, InboxHandler, LostAck, Message, NaiveHandler, simulate
from idemlib.faults import LostResponse
from idemlib.handlers import Context, Handler, ProviderHandler, Steps
from idemlib.messages import parse_charge, payment_stream
from idemlib.pictures.diagram import OKABE_ITO, TINT, alt_text, frame_svg
from idemlib.pictures.scenes import scenes_of, steps_of
from idemlib.provider import PaymentProvider

SVG = "{http://www.w3.org/2000/svg}"


def parse(scene) -> ET.Element:
    return ET.fromstring(frame_svg(scene))


def messages(svg: ET.Element) -> dict[str, str]:
    return {g.get("data-id"): g.get("data-state") for g in svg.iter(f"{SVG}g") if g.get("class") == "message"}


def rows(svg: ET.Element, table: str) -> list[tuple[str, str, bool]]:
    return [(g.get("data-id"), g.get("data-state"), g.get("data-new") == "true")
            for g in svg.iter(f"{SVG}g") if g.get("class") == "idemlib-row" and g.get("data-table") == table]


def current_steps(svg: ET.Element) -> dict[str, tuple[str, str]]:
    """For each consumer drawn, its highlighted step and that step's state."""
    found = {}
    for consumer in (g for g in svg.iter(f"{SVG}g") if g.get("class") == "consumer"):
        for step in consumer.iter(f"{SVG}g"):
            if step.get("data-current") == "true":
                found[consumer.get("data-name")] = (step.get("data-step"), step.get("data-state"))
    return found


def total(svg: ET.Element) -> tuple[int, int | None]:
    money = next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "total")
    owed = money.get("data-owed")
    return int(money.get("data-total")), int(owed) if owed is not None else None


def words(svg: ET.Element) -> str:
    return " ".join(t.text or "" for t in svg.iter(f"{SVG}text"))


def with_event(trace: pd.DataFrame, after: int, event: str, detail: str = "") -> pd.DataFrame:
    """The trace with one more event by the same actor right after row ``after``, as a newer simulator records."""
    added = trace.iloc[after].copy()
    added["event"], added["detail"] = event, detail
    joined = pd.concat([trace.iloc[: after + 1], added.to_frame().T, trace.iloc[after + 1:]], ignore_index=True)
    return joined.astype(trace.dtypes.to_dict())


def scene_at(scenes, event, nth=0):
    return [s for s in scenes if s.event == event][nth]


@pytest.fixture(scope="module")
def lost_ack():
    run = simulate(NaiveHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)
    return scenes_of(run.trace, run.messages)


def test_a_lost_ack_is_drawn_as_a_crossed_arrow_while_the_broker_still_holds_the_message(lost_ack):
    svg = parse(scene_at(lost_ack, "ack lost"))
    assert messages(svg) == {"m-7f3": "leased"}
    arrow = next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "arrow")
    assert arrow.get("data-kind") == "ack lost" and "✕ ack lost" in words(svg)
    assert any(line.get("stroke-dasharray") for line in arrow.iter(f"{SVG}line"))  # a second cue besides colour
    assert current_steps(svg) == {"consumer A": ("ack", "done")}
    assert rows(svg, "payments") == [("m-7f3", "committed", False)]
    assert total(svg) == (40, 40)


def test_the_lease_counts_down_and_runs_out(lost_ack):
    delivered = parse(lost_ack[1])
    assert "leased to consumer A," in words(delivered) and "30 s left" in words(delivered)
    assert "28 s left" in words(parse(lost_ack[3]))
    assert messages(parse(scene_at(lost_ack, "lease expired"))) == {"m-7f3": "waiting"}


def test_the_redelivery_charges_again_and_the_last_frame_shows_the_overcharge(lost_ack):
    svg = parse(lost_ack[-1])
    assert messages(svg) == {"m-7f3": "acked"}
    assert rows(svg, "payments") == [("m-7f3", "committed", False), ("m-7f3", "committed", False)]
    assert total(svg) == (80, 40) and "$40 too much" in words(svg)
    second_commit = parse(scene_at(lost_ack, "committed", 1))
    assert current_steps(second_commit) == {"consumer A": ("commit", "done")}
    assert rows(second_commit, "payments")[-1] == ("m-7f3", "committed", True)


def test_a_crash_rolls_both_writes_back_and_a_duplicate_is_skipped():
    plan = FaultPlan(crashes=[Crash("commit", delivery=1)], lost_acks=[LostAck(delivery=2)])
    run = simulate(InboxHandler(), [RUNNING_EXAMPLE], faults=plan, watch_total=True)
    scenes = scenes_of(run.trace, run.messages)
    charged = parse(scene_at(scenes, "charged"))
    assert rows(charged, "payments") == [("m-7f3", "pending", True)]
    assert rows(charged, "processed_messages") == [("m-7f3", "pending", False)]
    crashed = parse(scene_at(scenes, "crashed"))
    assert current_steps(crashed) == {"consumer A": ("commit", "crashed")}
    undone = parse(scene_at(scenes, "rolled back"))
    assert rows(undone, "payments") == [("m-7f3", "undone", True)]
    assert rows(undone, "processed_messages") == [("m-7f3", "undone", True)]
    assert "✕ rolled back" in words(undone) and total(undone) == (0, 40)
    assert rows(parse(scenes[scenes.index(scene_at(scenes, "rolled back")) + 1]), "payments") == []
    skipped = parse(scene_at(scenes, "duplicate skipped"))
    states = {g.get("data-step"): g.get("data-state") for g in skipped.iter(f"{SVG}g") if g.get("class") == "step"}
    assert states == {"begin": "done", "record id": "todo", "charge": "skipped", "commit": "todo", "ack": "todo"}
    assert current_steps(skipped) == {"consumer A": ("record id", "todo")}
    assert "✕ duplicate key: skip" in words(skipped) and rows(skipped, "payments") == [("m-7f3", "committed", False)]
    last = parse(scenes[-1])
    assert rows(last, "payments") == [("m-7f3", "committed", False)] and total(last) == (40, 40)
    assert "✓ charged once" in words(last)


def test_two_consumers_race_and_the_loser_is_undone_at_commit_on_duckdb():
    run = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40}, visibility_timeout=30,
                   watch_total=True)
    scenes = scenes_of(run.trace, run.messages)
    handover = parse(scene_at(scenes, "delivered", 1))
    assert messages(handover) == {"m-7f3": "leased"} and "leased to consumer B," in words(handover)
    assert "working on; its lease ran out" in words(handover)  # consumer A, still on m-7f3
    conflict = parse(scene_at(scenes, "conflict"))
    assert current_steps(conflict) == {"consumer A": ("ack", "done"), "consumer B": ("commit", "failed")}
    assert rows(conflict, "processed_messages") == [("m-7f3", "committed", False), ("m-7f3", "undone", True)]
    assert total(conflict) == (40, 40)
    # A simulator that also records the rollback after a failed step keeps the undone rows in that frame too.
    trace = with_event(run.trace, int(run.trace.index[run.trace["event"] == "conflict"][0]), "rolled back")
    rolled = parse(scene_at(scenes_of(trace, run.messages), "rolled back"))
    assert rows(rolled, "payments") == [("m-7f3", "committed", False), ("m-7f3", "undone", False)]


def test_the_provider_keeps_the_key_and_replays_the_first_result():
    run = simulate(ProviderHandler("inside", keyed=True), [RUNNING_EXAMPLE], provider=PaymentProvider(),
                   faults=FaultPlan(lost_responses=[LostResponse()]), watch_total=True)
    scenes = scenes_of(run.trace, run.messages, run.provider)
    keys = [{g.get("data-key"): g.get("data-used") for g in parse(s).iter(f"{SVG}g") if g.get("class") == "key"}
            for s in scenes if s.event == "provider answered"]
    assert keys == [{"m-7f3:charge": "new"}, {"m-7f3:charge": "replayed"}]
    replay = parse(scene_at(scenes, "provider answered", 1))
    assert current_steps(replay) == {"consumer A": ("call provider", "todo")}
    assert "charges made: 1 (card charged $40)" in words(replay) and "↺ replayed, no new charge" in words(replay)
    lost = parse(scene_at(scenes, "response lost"))
    assert current_steps(lost) == {"consumer A": ("call provider", "failed")}
    assert messages(lost) == {"m-7f3": "waiting"}  # given back at once, not after the lease
    assert "27 s left" in words(replay)  # no lease ran out: the broker noted its length on the trace


def test_a_message_that_always_fails_is_dead_lettered():
    bad = Message("m-bad", {"order_id": 7})
    run = simulate(InboxHandler(), [bad, RUNNING_EXAMPLE], max_deliveries=2, watch_total=True)
    scenes = scenes_of(run.trace, run.messages)
    svg = parse(scenes[-1])
    assert messages(svg)["m-bad"] == "dead-lettered" and "dead-lettered," in words(svg) and "after 2 deliveries" in words(svg)
    assert "rejected" in words(parse(scene_at(scenes, "rejected")))


def test_an_event_the_diagram_has_no_words_for_keeps_its_own_words(lost_ack):
    # An event of the trace's vocabulary that no scene describes (one outside it is refused: test_engine.py).
    run = simulate(InboxHandler(), [RUNNING_EXAMPLE], watch_total=True)
    scenes = scenes_of(with_event(run.trace, 3, "stopped at its timeout", "m-7f3 ran past its time limit"), run.messages)
    shown = scene_at(scenes, "stopped at its timeout")
    assert shown.sentence == "consumer A: stopped at its timeout m-7f3 ran past its time limit"
    assert "stopped at its timeout" in words(parse(shown))


class SettleHandler(Handler):
    """A handler whose steps the diagram has no words for: it charges and commits in one step called ``settle``."""

    steps = ("settle", "ack")

    def run(self, ctx: Context) -> Steps:
        charge = parse_charge(ctx.delivery.message)
        yield "settle"
        ctx.db.begin()
        ctx.db.charge(charge.order_id, charge.amount, ctx.message_id)
        ctx.db.commit()
        yield "ack"
        ctx.ack()


def test_a_payment_made_under_a_step_of_another_name_is_still_drawn_from_the_total():
    run = simulate(SettleHandler(), [RUNNING_EXAMPLE], faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)
    for scenes in (scenes_of(run.trace, run.messages), scenes_of(run.trace)):
        settled = parse(scene_at(scenes, "step"))
        assert current_steps(settled) == {"consumer A": ("settle", "done")}
        assert rows(settled, "payments") == [("m-7f3", "committed", True)]
        assert "1042 · $40 · m-7f3" in words(settled) or "? · $40 · m-7f3" in words(settled)
        assert rows(parse(scenes[-1]), "payments") == [("m-7f3", "committed", False)] * 2
        assert total(parse(scenes[-1]))[0] == 80


def test_a_busy_run_draws_every_frame_and_folds_the_long_queue():
    plan = FaultPlan(ack_loss_rate=0.3, crash_rate=0.1, seed=5)
    run = simulate(InboxHandler(), payment_stream(12), faults=plan, consumers=3, max_deliveries=20, watch_total=True)
    scenes = scenes_of(run.trace, run.messages)
    drawn = [parse(s) for s in scenes]
    assert "more" in words(drawn[12]) and len(messages(drawn[12])) <= 7
    assert total(drawn[-1]) == (run.total_charged, run.expected_total)
    assert len({c.get("data-name") for c in drawn[-1].iter(f"{SVG}g") if c.get("class") == "consumer"}) == 3


def test_every_frame_has_a_text_alternative_with_the_event_and_the_state(lost_ack):
    for scene in lost_ack:
        svg = parse(scene)
        assert svg.get("role") == "img"
        assert svg.find(f"{SVG}title").text == scene.sentence
        description = svg.find(f"{SVG}desc").text
        assert description == alt_text(scene) and scene.sentence in description
        assert "Queue: m-7f3" in description and "total charged $" in description
    assert "payments: 1042 · $40 · m-7f3, committed" in alt_text(lost_ack[-1])


def test_the_picture_uses_only_the_okabe_ito_palette_and_greys(lost_ack):
    colours = {value.upper() for s in lost_ack for element in parse(s).iter()
               for name, value in element.attrib.items() if name in ("fill", "stroke") and value.startswith("#")}
    assert set(TINT) <= set(OKABE_ITO) | {"#555555"}  # every tint is of a palette colour
    allowed = {c.upper() for c in (*OKABE_ITO, *TINT.values())} | {"#000000", "#555555", "#FFFFFF"}
    assert colours <= allowed, colours - allowed


def test_the_steps_come_from_the_trace_in_the_handlers_order():
    run = simulate(ProviderHandler("inside", keyed=True), [RUNNING_EXAMPLE], provider=PaymentProvider(),
                   faults=FaultPlan(lost_acks=[LostAck()]), watch_total=True)
    assert steps_of(run.trace) == ProviderHandler("inside").steps


def test_a_trace_it_cannot_replay_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="watch_total=True"):
        scenes_of(simulate(NaiveHandler(), [RUNNING_EXAMPLE]).trace)
    with pytest.raises(ValueError, match="no events"):
        scenes_of(simulate(NaiveHandler(), [RUNNING_EXAMPLE], watch_total=True).trace.iloc[:0])
