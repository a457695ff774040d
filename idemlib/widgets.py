"""Step-through players for the notebooks.

A player walks through a run's trace one event at a time and shows three things
side by side: where the message is on the broker, what the consumer just did, and
the money the database has committed. With a kernel it is an ipywidgets slider
with a play button; without one (an HTML export, a notebook viewer) the same
output carries a static storyboard of every frame, so nothing on the page is blank.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import pandas as pd

STEP_WORDS = {
    "begin": "opens a transaction",
    "record id": "inserts the message ID into processed_messages",
    "check id": "looks the message ID up in processed_messages",
    "charge": "inserts the charge into payments",
    "commit": "commits",
}


@dataclass(frozen=True)
class Frame:
    """The state of the world right after one event of the trace."""

    time: float
    event: str
    actor: str
    sentence: str
    queue: str
    total: int


def describe(row: pd.Series) -> str:
    """One trace event as a sentence in the course's vocabulary."""
    who, mid, n, detail = row["actor"], row["message_id"], row["delivery"], row["detail"]
    sentences = {
        "published": f"{mid} is published and waits on the queue.",
        "delivered": f"The broker delivers {mid} to {who} (delivery {n}{', a redelivery' if n > 1 else ''}) and starts its lease.",
        "step": f"{who} {STEP_WORDS.get(detail, detail)}.",
        "charged": f"{who} {STEP_WORDS['charge']}.",
        "committed": f"{who} commits: what it wrote is now permanent.",
        "acked": f"{who}'s ack reaches the broker, which removes {mid} for good.",
        "ack lost": f"{who} sends the ack for {mid}, but it is lost on the way. The broker still holds the message.",
        "lease expired": f"The lease on {mid} runs out with no ack, so the broker will deliver it again.",
        "crashed": f"{who} crashes {detail}. No ack is sent.",
        "rolled back": f"The database rolls back {who}'s open transaction.",
        "duplicate skipped": f"{who} finds {mid} already in processed_messages: a duplicate, so it skips the charge.",
        "conflict": f"{who}'s write loses a race: {detail}",
        "rejected": f"{who} cannot handle {mid}: {detail}",
        "dead-lettered": f"The broker moves {mid} to the dead-letter queue after {n} deliveries.",
    }
    return sentences.get(row["event"], f"{who}: {row['event']} {detail}".strip())


def frames_of(trace: pd.DataFrame) -> list[Frame]:
    """Replay a trace into frames. The trace must come from ``simulate(..., watch_total=True)``."""
    if trace["total charged"].isna().any():
        raise ValueError("this trace has no running total; run the simulation with watch_total=True")
    places: dict[str, str] = {}
    frames = []
    for _, row in trace.iterrows():
        mid, event = row["message_id"], row["event"]
        if event in ("published", "lease expired"):
            places[mid] = "waiting on the queue"
        elif event == "delivered":
            places[mid] = f"leased to {row['actor']} (delivery {row['delivery']})"
        elif event == "acked":
            places[mid] = "removed (acked)"
        elif event == "dead-lettered":
            places[mid] = "in the dead-letter queue"
        queue = "; ".join(f"{m}: {where}" for m, where in places.items())
        frames.append(Frame(row["time"], event, row["actor"], describe(row), queue, int(row["total charged"])))
    return frames


def _frame_html(frame: Frame, number: int, count: int) -> str:
    return (
        '<div style="font-family:sans-serif;border:1px solid #ccc;border-radius:6px;padding:8px 12px;max-width:760px">'
        f'<div style="color:#666;font-size:90%">event {number} of {count} · t = {frame.time:g} s</div>'
        f'<div style="font-size:110%;margin:6px 0"><b>{html.escape(frame.sentence)}</b></div>'
        '<table style="border-collapse:collapse"><tr>'
        f'<td style="padding-right:24px;vertical-align:top"><b>Broker</b><br>{html.escape(frame.queue)}</td>'
        f'<td style="vertical-align:top"><b>Payments database</b><br>total charged: <b>${frame.total}</b></td>'
        "</tr></table></div>"
    )


class StepThrough:
    """A player over a run: drag the slider or press play to move one event at a time."""

    def __init__(self, trace: pd.DataFrame, title: str = "") -> None:
        self.title = title
        self.frames = frames_of(trace)
        self.view = widgets.HTML()
        self.slider = widgets.IntSlider(value=0, min=0, max=len(self.frames) - 1, description="event",
                                        continuous_update=True)
        self.play = widgets.Play(value=0, min=0, max=len(self.frames) - 1, interval=900, description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        self._show(0)
        heading = widgets.HTML(f"<b>{html.escape(title)}</b>") if title else widgets.HTML()
        self.widget = widgets.VBox([heading, widgets.HBox([self.play, self.slider]), self.view])

    @property
    def position(self) -> int:
        """The number of the frame on show, from 0."""
        return self.slider.value

    def step(self, by: int = 1) -> Frame:
        """Move ``by`` events (back when negative), stopping at either end; returns the frame now shown."""
        self.slider.value = max(0, min(len(self.frames) - 1, self.slider.value + by))
        return self.frames[self.slider.value]

    def _show(self, index: int) -> None:
        self.view.value = _frame_html(self.frames[index], index + 1, len(self.frames))

    def storyboard_html(self) -> str:
        """Every frame in one table: the static picture for pages with no kernel behind them."""
        rows = "".join(
            f"<tr><td>{f.time:g} s</td><td>{html.escape(f.sentence)}</td><td>{html.escape(f.queue)}</td><td>${f.total}</td></tr>"
            for f in self.frames
        )
        return (
            f"<div><b>{html.escape(self.title)}</b> (every step; run the notebook to step through it)</div>"
            '<table class="idemlib-storyboard"><thead><tr><th>time</th><th>what happens</th><th>broker</th>'
            f"<th>total charged</th></tr></thead><tbody>{rows}</tbody></table>"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        # A live front end renders the widget view; a page without a kernel falls
        # back to the storyboard in text/html instead of an empty box.
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = self.storyboard_html()
        bundle["text/plain"] = f"StepThrough({self.title!r}, {len(self.frames)} events)"
        return bundle
