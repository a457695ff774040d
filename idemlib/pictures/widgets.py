"""Step-through players for the notebooks.

A player walks through a run one event at a time and draws each moment (see
:mod:`idemlib.pictures.diagram`): the broker's queue, the consumers and their steps, the
database's rows, the provider's keys and the money, with the event in one
sentence under the picture. With a kernel it is an ipywidgets slider with a play
button; without one (the course's site, an HTML export) the same output carries a
self-contained player, inline SVG frames and a few lines of script, which without
script is a storyboard of every frame, so nothing on the page is blank.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import pandas as pd

from idemlib.pictures.diagram import frame_svg
from idemlib.pictures.scenes import Scene, describe, scenes_of
from idemlib.sim import RunResult

__all__ = ["StepThrough", "describe", "player_html"]

PAGE_FRAMES = 150
"""At most this many frames go into a page's player, so a long run does not make a page of megabytes."""
PLAYER_SCRIPT = """
(function () {
  var root = document.currentScript.parentNode;
  var frames = root.querySelectorAll("figure.idemlib-step");
  var controls = root.querySelector(".idemlib-controls"), counter = root.querySelector(".idemlib-counter");
  var play = root.querySelector("[data-go=play]"), at = 0, timer = null;
  function show(index) {
    at = Math.max(0, Math.min(frames.length - 1, index));
    frames.forEach(function (frame, k) { frame.hidden = k !== at; });
    counter.textContent = "event " + (at + 1) + " of " + frames.length;
  }
  function stop() { clearInterval(timer); timer = null; play.textContent = "\u25B6 play"; }
  root.querySelector("[data-go=previous]").onclick = function () { stop(); show(at - 1); };
  root.querySelector("[data-go=next]").onclick = function () { stop(); show(at + 1); };
  play.onclick = function () {
    if (timer) { stop(); return; }
    if (at === frames.length - 1) { show(0); }
    play.textContent = "\u275A\u275A pause";
    timer = setInterval(function () { if (at === frames.length - 1) { stop(); } else { show(at + 1); } }, 1200);
  };
  root.querySelector(".idemlib-storyboard-note").hidden = true;
  controls.hidden = false;
  show(0);
})();
"""
"""Turns the storyboard into a player: one frame at a time, previous / play / next. Without it, every frame shows."""


def _frame_html(svg: str, scene: Scene) -> str:
    return (f'<div class="idemlib-view">{svg}<p style="font-family:sans-serif;font-size:110%;margin:4px 0 0;max-width:900px">'
            f"<b>{html.escape(scene.sentence)}</b></p></div>")


def player_html(scenes: Sequence[Scene], title: str = "") -> str:
    """A self-contained player for a page with no kernel: every frame as inline SVG, and a few lines of script.

    Without script (or where a page strips it) the frames stay a storyboard, one under
    the other, each with its caption; with script, previous / play / next step through them.
    """
    label = "st-" + hashlib.sha1(f"{title}|{[s.sentence for s in scenes]}".encode()).hexdigest()[:8]
    shown = scenes[:PAGE_FRAMES]
    figures = "".join(
        f'<figure class="idemlib-step" data-index="{scene.number}" style="margin:0 0 16px">{frame_svg(scene, label=label)}'
        f'<figcaption style="font-family:sans-serif;max-width:900px"><b>{scene.number + 1}.</b> {html.escape(scene.sentence)}'
        "</figcaption></figure>"
        for scene in shown)
    cut = (f"<p>The run has {len(scenes)} events; this page shows the first {len(shown)}. "
           "Run the notebook to step through all of them.</p>" if len(scenes) > len(shown) else "")
    return (
        # A box that scrolls sideways on a narrow screen: focusable and named, so a keyboard can scroll it too.
        f'<div class="idemlib-player" data-frames="{len(shown)}" tabindex="0" role="region" '
        f'aria-label="{html.escape(title or "Step-through", quote=True)}: one picture per step">'
        f"<div><b>{html.escape(title)}</b></div>"
        '<div class="idemlib-controls" hidden style="margin:6px 0;font-family:sans-serif">'
        '<button type="button" data-go="previous">&#9664; previous</button> '
        '<button type="button" data-go="play">&#9654; play</button> '
        '<button type="button" data-go="next">next &#9654;</button> <span class="idemlib-counter"></span></div>'
        '<p class="idemlib-storyboard-note">Every step of the run, one under the other '
        "(run the notebook, or allow scripts, to play it).</p>"
        f"{figures}{cut}<script>{PLAYER_SCRIPT}</script></div>"
    )


class StepThrough:
    """A player over a run: drag the slider or press play to watch it one event at a time.

    Give it the run (``simulate(..., watch_total=True)``) so each payment row has its
    order and amount and the provider's keys are named, or just the run's trace.
    """

    def __init__(self, run: RunResult | pd.DataFrame, title: str = "", *, steps: Sequence[str] | None = None,
                 lease_seconds: float | None = None) -> None:
        self.title = title
        if isinstance(run, pd.DataFrame):
            self.scenes = scenes_of(run, steps=steps, lease_seconds=lease_seconds)
        else:
            self.scenes = scenes_of(run.trace, run.messages, run.provider, steps=steps, lease_seconds=lease_seconds)
        self.view = widgets.HTML()
        # Counted from 1, as the picture's "event 3 of 14" is.
        count = len(self.scenes)
        self.slider = widgets.IntSlider(value=1, min=1, max=count, description="event", continuous_update=True)
        self.play = widgets.Play(value=1, min=1, max=count, interval=1200, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.slider.observe(lambda change: self._show(change["new"] - 1), names="value")
        self._show(0)
        heading = widgets.HTML(f"<b>{html.escape(title)}</b>") if title else widgets.HTML()
        self.widget = widgets.VBox([heading, widgets.HBox([self.play, self.slider]), self.view])

    @property
    def position(self) -> int:
        """The number of the frame on show, from 0."""
        return self.slider.value - 1

    def step(self, by: int = 1) -> Scene:
        """Move ``by`` events (back when negative), stopping at either end; returns the scene now shown."""
        self.slider.value = max(1, min(len(self.scenes), self.slider.value + by))
        return self.scenes[self.position]

    def _show(self, index: int) -> None:
        self.view.value = _frame_html(frame_svg(self.scenes[index], label="live"), self.scenes[index])

    def storyboard_html(self) -> str:
        """The page's player: every frame inline, stepped through by a few lines of script, a storyboard without it."""
        return player_html(self.scenes, self.title)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        # A live front end renders the widget view; a page without a kernel shows
        # the self-contained player in text/html instead of an empty box.
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = self.storyboard_html()
        bundle["text/plain"] = f"StepThrough({self.title!r}, {len(self.scenes)} events)"
        return bundle
