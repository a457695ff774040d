"""Every step-through of lessons 01-04 draws every frame, without running the whole lesson.

A lesson's step-through cells (the code cells that build a ``StepThrough``) run on
top of the lesson's import cell only, so each must build its own run. Lessons
02-04 get theirs from the cells below, handed to their authors with the issue that
asked for the pictures; once a lesson carries the cell, it is found there as well.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import nbformat
import pytest

from idemlib.pictures.diagram import frame_svg
from idemlib.pictures.widgets import StepThrough, player_html

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

PROPOSED = {
    "02": '''from idemlib import Crash
from idemlib.pictures.widgets import StepThrough

crash_then_duplicate = simulate(
    InboxHandler(), [RUNNING_EXAMPLE], watch_total=True,
    faults=FaultPlan(crashes=[Crash("commit", delivery=1)], lost_acks=[LostAck(delivery=2)]))
StepThrough(crash_then_duplicate, "The inbox: a crash undoes both writes, then a lost ack brings a duplicate")''',
    "03": '''from idemlib.pictures.widgets import StepThrough

race_run = simulate(InboxHandler(), [RUNNING_EXAMPLE], consumers=2, step_seconds={"charge": 40},
                    visibility_timeout=30, watch_total=True)
StepThrough(race_run, "Two consumers hold m-7f3; on DuckDB the loser fails at commit")''',
    "04": '''from idemlib.pictures.widgets import StepThrough

keyed = PaymentProvider()
answer_lost_with_key = simulate(ProviderHandler("inside", keyed=True), [RUNNING_EXAMPLE], provider=keyed,
                                faults=FaultPlan(lost_responses=[LostResponse(delivery=1)]), watch_total=True)
StepThrough(answer_lost_with_key, "The answer is lost; the retry sends the same key and gets the first result back")''',
}


def lesson(number: str) -> nbformat.NotebookNode:
    return nbformat.read(next(NOTEBOOKS.glob(f"{number}_*.ipynb")), as_version=4)


def step_through_cells(number: str) -> list[str]:
    """The lesson's own step-through cells, then the proposed one if the lesson does not carry it yet."""
    found = [c.source for c in lesson(number).cells if c.cell_type == "code" and "StepThrough(" in c.source]
    proposed = PROPOSED.get(number)
    return found + ([proposed] if proposed and proposed not in found else [])


def run_cell(source: str, namespace: dict[str, Any]) -> Any:
    """Run a cell's statements and return the value of its last expression, as the notebook would show it."""
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None


def players(number: str) -> list[StepThrough]:
    imports = next(c.source for c in lesson(number).cells if c.cell_type == "code")
    namespace: dict[str, Any] = {}
    run_cell("\n".join(line for line in imports.splitlines() if not line.startswith("%")), namespace)
    built = [run_cell(cell, namespace) for cell in step_through_cells(number)]
    assert all(isinstance(player, StepThrough) for player in built), "a step-through cell must end with the StepThrough"
    return built


@pytest.mark.parametrize("number", ["01", "02", "03", "04"])
def test_every_frame_of_every_step_through_of_the_lesson_is_drawn(number):
    built = players(number)
    assert built, f"lesson {number} has no step-through"
    for player in built:
        for scene in player.scenes:
            svg = ET.fromstring(frame_svg(scene))
            assert svg.find("{http://www.w3.org/2000/svg}desc").text.startswith(f"Event {scene.number + 1} of")
        assert player_html(player.scenes, player.title).count("<svg") == len(player.scenes)


def test_lesson_02_shows_both_writes_undone_and_then_the_duplicate_skipped():
    scenes = players("02")[-1].scenes
    undone = next(s for s in scenes if s.event == "rolled back")
    assert {(r.table, r.state) for r in undone.rows} == {("payments", "undone"), ("processed_messages", "undone")}
    skipped = scenes.index(next(s for s in scenes if s.event == "duplicate skipped"))
    assert scenes.index(undone) < skipped and scenes[-1].total == scenes[-1].owed == 40


def test_lesson_03_shows_the_loser_failing_at_commit():
    scenes = players("03")[-1].scenes
    conflict = next(s for s in scenes if s.event == "conflict")
    loser = next(c for c in conflict.consumers if c.name == conflict.actor)
    assert loser.current == "commit" and dict((s.name, s.state) for s in loser.steps)["commit"] == "failed"
    assert len(conflict.consumers) == 2 and conflict.total == 40


def test_lesson_04_shows_the_stored_key_answering_the_retry():
    scenes = players("04")[-1].scenes
    replay = [s for s in scenes if s.event == "provider answered"][-1]
    assert [(k.key, k.used) for k in replay.provider_keys or ()] == [("m-7f3:charge", "replayed")]
    assert replay.provider_charges == 1 and scenes[-1].total == 40
