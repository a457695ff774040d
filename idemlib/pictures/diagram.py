"""One frame of a run drawn as SVG: the broker, the consumers, the database, the provider and the money.

The picture follows the course's card: the queue on the left with every message
and its state, the consumers in the middle with their steps (the current one
highlighted), the payments database on the right with its two tables, the provider
under it when the run has one, the ack travelling back (or lost on the way), and
the total charged against what is owed. It is plain SVG written in Python: no
script, no font or file from the network, so it shows in JupyterLab, in an HTML
export and in a browser with scripting off.

Colours are the Okabe-Ito palette, and colour is never the only cue: every state
also has a glyph and words, uncommitted rows a dashed border, rolled-back rows a
line through them, and a lost ack a dashed arrow with a cross.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.sax.saxutils import escape, quoteattr

from idemlib.pictures.scenes import ConsumerView, QueueEntry, Row, Scene

WIDTH = 960
FONT = "font-family:'DejaVu Sans',Verdana,Arial,sans-serif"
INK, MUTED, PAPER = "#000000", "#555555", "#ffffff"
# Okabe-Ito, chosen to stay apart for the common kinds of colour blindness.
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = OKABE_ITO
TINT = {ORANGE: "#FBECCC", SKY: "#DDF0FB", GREEN: "#CCECE3", YELLOW: "#FCF9D9", VERMILLION: "#F7DFCC",
        PURPLE: "#F5E4EE", BLUE: "#CCE3F0", MUTED: "#EEEEEE"}
"""Each colour mixed with white, for fills that keep black text readable."""

QUEUE_STATES = {  # state: (colour, glyph, words); the words carry the meaning without colour
    "waiting": (BLUE, "◷", "waiting"),
    "leased": (ORANGE, "▶", "leased"),
    "acked": (GREEN, "✓", "acked: removed"),
    "dead-lettered": (VERMILLION, "⚠", "dead-lettered"),
}
STEP_MARKS = {"todo": ("○", MUTED), "done": ("✓", GREEN), "skipped": ("–", MUTED), "crashed": ("✕", VERMILLION),
              "failed": ("✕", VERMILLION)}
TROUBLE = ("crashed", "gives the message back", "lost", "ran out")
"""Words in a consumer's status that mark something gone wrong, drawn in vermillion (the words say it too)."""
MAX_QUEUE, MAX_ROWS = 7, 6
QUEUE_W, CONSUMER_X, CONSUMER_W, DB_X, DB_W = 200, 300, 290, 618, 332


def _text(x: float, y: float, words: str, *, size: int = 15, weight: str = "normal", fill: str = INK,
          anchor: str = "start", strike: bool = False, italic: bool = False) -> str:
    decoration = ' text-decoration="line-through"' if strike else ""
    style = ' font-style="italic"' if italic else ""
    return (f'<text x="{x:g}" y="{y:g}" font-size="{size}" font-weight="{weight}" fill="{fill}" '
            f'text-anchor="{anchor}"{decoration}{style}>{escape(words)}</text>')


def _box(x: float, y: float, w: float, h: float, *, stroke: str = INK, fill: str = PAPER, width: float = 1.5,
         dash: str = "", rx: int = 6, cls: str = "") -> str:
    dashes = f' stroke-dasharray="{dash}"' if dash else ""
    klass = f' class="{cls}"' if cls else ""
    return (f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{rx}" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{width:g}"{dashes}{klass}/>')


def _short(words: str, limit: int) -> str:
    return words if len(words) <= limit else words[: limit - 1] + "…"


def queue_words(entry: QueueEntry) -> str:
    """A message's state on the broker in words, e.g. ``leased to consumer A, 26 s left``."""
    if entry.state == "leased":
        left = f", {entry.lease_left:g} s left" if entry.lease_left is not None else ""
        return f"leased to {entry.holder}{left}"
    if entry.state == "dead-lettered":
        return f"dead-lettered, after {entry.deliveries} deliveries"
    if entry.state == "waiting" and entry.deliveries:
        return f"waiting again, {entry.deliveries} {'delivery' if entry.deliveries == 1 else 'deliveries'} so far"
    return QUEUE_STATES.get(entry.state, (MUTED, "?", entry.state))[2]


def _queue(scene: Scene, x: float, y: float, w: float) -> tuple[list[str], float]:
    entries = list(scene.queue)
    shown = [e for e in entries if e.state != "acked" or e.message_id == scene.message_id]
    shown = (shown if len(shown) <= MAX_QUEUE else
             [e for e in shown if e.message_id == scene.message_id][:1] + [e for e in shown if e.message_id != scene.message_id])
    hidden = len(entries) - len(shown[:MAX_QUEUE])
    parts = [_text(x, y + 18, "message broker", size=17, weight="bold"), _text(x, y + 38, "queue: payments", fill=MUTED)]
    top = y + 50
    for entry in shown[:MAX_QUEUE]:
        colour, glyph, _ = QUEUE_STATES.get(entry.state, (MUTED, "?", entry.state))
        current = entry.message_id == scene.message_id
        parts.append(f'<g class="message" data-id={quoteattr(entry.message_id)} data-state={quoteattr(entry.state)}>')
        words = queue_words(entry)
        lines = _short(words, 60).replace(", ", ",\n", 1).split("\n") if entry.state != "acked" else [words]
        height = 34 + 18 * len(lines)
        parts.append(_box(x, top, w, height, stroke=colour, fill=TINT[colour], width=3 if current else 1.5,
                          dash="5 4" if entry.state in ("acked", "dead-lettered") else ""))
        parts.append(_text(x + 10, top + 21, f"{glyph} {entry.message_id}", size=16, weight="bold"))
        for number, line in enumerate(lines):
            parts.append(_text(x + 10, top + 41 + 18 * number, _short(line.strip(), 30), size=13))
        parts.append("</g>")
        top += height + 8
    if hidden:
        parts.append(_text(x, top + 14, f"+ {hidden} more ({sum(e.state == 'acked' for e in entries)} acked)", fill=MUTED))
        top += 22
    if not entries:
        parts.append(_text(x, top + 16, "(empty)", fill=MUTED))
        top += 22
    return parts, top


def _consumer(view: ConsumerView, scene: Scene, x: float, y: float, w: float) -> tuple[list[str], float]:
    acting = view.name == scene.actor
    height = 66 + 25 * len(view.steps)
    parts = [f'<g class="consumer" data-name={quoteattr(view.name)}>',
             _box(x, y, w, height, stroke=BLUE if acting else MUTED, width=3 if acting else 1.5),
             _text(x + 12, y + 22, view.name, size=17, weight="bold"),
             _text(x + 12, y + 42, f"holds {view.message_id} · delivery {view.delivery}" if view.message_id else "idle",
                   size=13, fill=MUTED),
             _text(x + 12, y + 60, _short(view.status, 38), size=13,
                   fill=VERMILLION if any(word in view.status for word in TROUBLE) else INK,
                   weight="bold" if view.status != "working" else "normal")]
    top = y + 70
    for step in view.steps:
        glyph, colour = STEP_MARKS.get(step.state, ("?", MUTED))
        current = step.name == view.current
        parts.append(f'<g class="step" data-step={quoteattr(step.name)} data-state={quoteattr(step.state)}'
                     + (' data-current="true">' if current else ">"))
        if current:
            parts.append(_box(x + 8, top - 2, w - 16, 24, stroke=BLUE, fill=TINT[YELLOW], width=2.5, rx=4))
            parts.append(_text(x + 14, top + 15, "▶", size=14, fill=BLUE))
        parts.append(_text(x + 34, top + 15, glyph, size=15, fill=colour, weight="bold"))
        parts.append(_text(x + 54, top + 15, step.name + (f"  ({step.state})" if step.state not in ("todo", "done") else ""),
                           size=14, weight="bold" if current else "normal", fill=MUTED if step.state == "skipped" else INK,
                           strike=step.state == "skipped"))
        parts.append("</g>")
        top += 25
    parts.append("</g>")
    return parts, y + height


def row_words(row: Row) -> str:
    """What a written row holds: ``1042 · $40 · m-7f3`` in payments, the message ID in processed_messages."""
    if row.table != "payments":
        return row.message_id
    order = row.order_id if row.order_id is not None else "?"
    return f"{order} · ${row.amount if row.amount is not None else '?'} · {row.message_id}"


def row_state(row: Row) -> str:
    """Whether a row is uncommitted (and whose), committed or rolled back, with a glyph."""
    writer = row.writer.removeprefix("consumer ")
    return {"pending": f"… uncommitted ({writer})", "undone": "✕ rolled back", "committed": "✓ committed"}.get(
        row.state, row.state)


def _table(name: str, key: str, rows: list[Row], x: float, y: float, w: float,
           duplicate: str | None = None) -> tuple[list[str], float]:
    parts = [_text(x, y + 16, f"{name}  ", size=15, weight="bold"), _text(x + w, y + 16, key, size=12, fill=MUTED, anchor="end")]
    top = y + 24
    hidden = max(0, len(rows) - MAX_ROWS)
    if hidden:
        parts.append(_text(x + 6, top + 14, f"+ {hidden} earlier rows", size=12, fill=MUTED))
        top += 20
    for row in rows[hidden:]:
        found = row.message_id == duplicate and row.state == "committed"
        colour = VERMILLION if row.state == "undone" or found else ORANGE if row.state == "pending" else GREEN
        parts.append(f'<g class="idemlib-row" data-table={quoteattr(row.table)} data-id={quoteattr(row.message_id)} '
                     f'data-state={quoteattr(row.state)}' + (' data-new="true">' if row.new else ">"))
        parts.append(_box(x, top, w, 26, stroke=colour, fill=TINT[YELLOW] if row.new else PAPER,
                          width=2.5 if row.new or found else 1.2, dash="6 3" if row.state == "pending" else "", rx=3))
        parts.append(_text(x + 8, top + 18, _short(row_words(row), 22), size=13, weight="bold" if row.new else "normal"))
        if row.state == "undone":
            parts.append(f'<line x1="{x + 4:g}" y1="{top + 13:g}" x2="{x + w / 2:g}" y2="{top + 13:g}" '
                         f'stroke="{VERMILLION}" stroke-width="2.5"/>')
        tag = "✕ duplicate key: skip" if found else row_state(row) + (" · NEW" if row.new and row.state != "undone" else "")
        parts.append(_text(x + w - 6, top + 18, tag, size=12, weight="bold" if row.new or found else "normal", anchor="end"))
        parts.append("</g>")
        top += 30
    if not rows:
        parts.append(_text(x + 6, top + 16, "(no rows)", size=13, fill=MUTED))
        top += 24
    return parts, top


def _database(scene: Scene, x: float, y: float, w: float) -> tuple[list[str], float]:
    parts = [_text(x + 12, y + 22, "payments database", size=17, weight="bold")]
    payments, bottom = _table("payments", "order · amount · message ID", [r for r in scene.rows if r.table == "payments"],
                              x + 12, y + 32, w - 24)
    processed, bottom = _table("processed_messages", "UNIQUE",
                               [r for r in scene.rows if r.table == "processed_messages"], x + 12, bottom + 6, w - 24,
                               scene.message_id if scene.event == "duplicate skipped" else None)
    return [_box(x, y, w, bottom + 10 - y, stroke=INK), *parts, *payments, *processed], bottom + 10


def _provider(scene: Scene, x: float, y: float, w: float) -> tuple[list[str], float]:
    keys = scene.provider_keys or ()
    parts = [_text(x + 12, y + 22, "payment provider", size=17, weight="bold"),
             _text(x + 12, y + 42, f"charges made: {scene.provider_charges} (card charged ${scene.card_charged})", size=14)]
    top = y + 50
    for key in keys[-MAX_ROWS:]:
        tag = {"new": "NEW: first result stored", "replayed": "↺ replayed, no new charge"}.get(key.used, "")
        parts.append(f'<g class="key" data-key={quoteattr(key.key)} data-used={quoteattr(key.used)}>')
        parts.append(_box(x + 12, top, w - 24, 40 if tag else 26, stroke=PURPLE, fill=TINT[PURPLE] if tag else PAPER,
                          width=2.5 if tag else 1.2, rx=3))
        parts.append(_text(x + 20, top + 18, f"key {key.key} → {key.charge_id}", size=13))
        if tag:
            parts.append(_text(x + 20, top + 34, tag, size=12, weight="bold"))
        parts.append("</g>")
        top += 46 if tag else 30
    if not keys:
        parts.append(_text(x + 12, top + 16, "no idempotency keys stored", size=13, fill=MUTED))
        top += 24
    return [_box(x, y, w, top + 8 - y, stroke=PURPLE), *parts], top + 8


def money_verdict(scene: Scene) -> str:
    """Whether the total charged matches what is owed, so far or in the end."""
    if scene.owed is None:
        return ""
    if scene.total > scene.owed:
        return f"✕ ${scene.total - scene.owed} too much"
    if scene.total == scene.owed:
        return "✓ charged once"
    return f"✕ ${scene.owed - scene.total} never charged" if scene.last else f"… ${scene.owed - scene.total} to come"


def money_words(scene: Scene) -> str:
    """The total charged against what is owed, with the verdict, in words."""
    owed = f" of ${scene.owed} owed" if scene.owed is not None else ""
    verdict = money_verdict(scene)
    return f"total charged ${scene.total}{owed}{': ' + verdict if verdict else ''}"


def _money(scene: Scene, x: float, y: float, w: float) -> tuple[list[str], float]:
    verdict = money_verdict(scene)
    colour = VERMILLION if verdict.startswith("✕") else GREEN if verdict.startswith("✓") else MUTED
    owed = f"  ·  owed ${scene.owed}" if scene.owed is not None else ""
    height = 62 if verdict else 40
    owed_attribute = f' data-owed="{scene.owed}"' if scene.owed is not None else ""
    return ([f'<g class="total" data-total="{scene.total:d}"{owed_attribute}>',
             _box(x, y, w, height, stroke=colour, fill=TINT[colour], width=2.5),
             _text(x + 12, y + 26, f"total charged ${scene.total}{owed}", size=18, weight="bold"),
             _text(x + 12, y + 50, verdict, size=15, weight="bold") if verdict else "", "</g>"], y + height)


def _arrow(scene: Scene, x1: float, x2: float, y: float) -> list[str]:
    """The delivery going out, or the ack coming back (dashed and crossed when it is lost)."""
    if scene.event == "delivered":
        start, end, colour, label, dash = x1, x2, BLUE, "deliver", ""
    elif scene.ack == "acked":
        start, end, colour, label, dash = x2, x1, GREEN, "✓ ack", ""
    elif scene.ack == "ack lost":
        start, end, colour, label, dash = x2, (x1 + x2) / 2, VERMILLION, "✕ ack lost", "6 4"
    else:
        return []
    head = 10 if end > start else -10
    parts = [f'<g class="arrow" data-kind={quoteattr(scene.ack or "delivery")}>',
             f'<line x1="{start:g}" y1="{y:g}" x2="{end - head:g}" y2="{y:g}" stroke="{colour}" stroke-width="3.5"'
              + (f" stroke-dasharray={quoteattr(dash)}/>" if dash else "/>"),
             _text((x1 + x2) / 2, y - 10, label, size=13, weight="bold", fill=INK, anchor="middle")]
    if scene.ack == "ack lost":
        parts.append(_text(end, y + 6, "✕", size=22, weight="bold", fill=VERMILLION, anchor="middle"))
    else:
        parts.append(f'<path d="M{end:g},{y:g} l{-head:g},-7 l0,14 z" fill="{colour}"/>')
    return [*parts, "</g>"]


def alt_text(scene: Scene) -> str:
    """The frame in words, for screen readers and for pages that cannot show the picture."""
    queue = "; ".join(f"{e.message_id} {queue_words(e)}" for e in scene.queue) or "empty"
    consumers = "; ".join(
        f"{c.name} {'holds ' + c.message_id + f' (delivery {c.delivery})' if c.message_id else 'is idle'}"
        f"{', on step ' + c.current if c.current else ''}"
        f"{', ' + c.status if c.status not in ('working', 'idle') else ''}" for c in scene.consumers)
    rows = "; ".join(f"{r.table}: {row_words(r)}, {row_state(r).lstrip('✓✕… ')}" for r in scene.rows) or "no rows"
    keys = "" if scene.provider_keys is None else (
        f" Provider: {scene.provider_charges} charges made, ${scene.card_charged} taken from the card; keys "
        + (", ".join(f"{k.key} ({k.charge_id}{', ' + k.used if k.used != 'stored' else ''})" for k in scene.provider_keys)
           or "none") + ".")
    return (f"Event {scene.number + 1} of {scene.count}, t = {scene.time:g} s: {scene.sentence} Queue: {queue}. "
            f"{consumers + '. ' if consumers else ''}Database: {rows}.{keys} {money_words(scene)}.")


def frame_svg(scene: Scene, *, label: str = "frame") -> str:
    """Draw ``scene`` as a standalone SVG element; ``label`` makes its title's id unique on a page."""
    ident = f"{label}-{scene.number}"
    parts: list[str] = []
    queue, queue_bottom = _queue(scene, 12, 10, QUEUE_W)
    parts += queue
    top, consumer_y = 10.0, {}
    for view in scene.consumers:
        drawn, bottom = _consumer(view, scene, CONSUMER_X, top, CONSUMER_W)
        consumer_y[view.name] = top + 95  # below the heading, where the gap is clear
        parts += drawn
        top = bottom + 12
    if not scene.consumers:
        parts.append(_text(CONSUMER_X, 40, "no consumer has taken a message yet", size=14, fill=MUTED))
        top = 60
    parts += _arrow(scene, QUEUE_W + 16, CONSUMER_X - 4, consumer_y.get(scene.actor, 40))
    database, right = _database(scene, DB_X, 10, DB_W)
    parts += database
    if scene.provider_keys is not None:
        provider, right = _provider(scene, DB_X, right + 12, DB_W)
        parts += provider
    money, right = _money(scene, DB_X, right + 12, DB_W)
    parts += money
    height = max(queue_bottom, top, right) + 30
    parts.append(_text(12, height - 10, f"event {scene.number + 1} of {scene.count} · t = {scene.time:g} s · {scene.event}",
                       size=13, fill=MUTED))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:g}" '
            # Drawn at its own size: on a narrow screen its box scrolls sideways rather than shrinking its text.
            f'width="{WIDTH}" height="{height:g}" style="{FONT}" role="img" aria-labelledby="{ident}-t {ident}-d" '
            f'class="idemlib-frame" data-event={quoteattr(scene.event)}>'
            f'<title id="{ident}-t">{escape(scene.sentence)}</title><desc id="{ident}-d">{escape(alt_text(scene))}</desc>'
            f'<rect width="{WIDTH}" height="{height:g}" fill="{PAPER}"/>{"".join(parts)}</svg>')


def frames_svg(scenes: Iterable[Scene], label: str = "frame") -> list[str]:
    """Every scene of a run drawn, in order."""
    return [frame_svg(scene, label=label) for scene in scenes]
