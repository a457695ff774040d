"""What to watch in production: the share of deliveries the inbox skips, and an alert on it.

An inbox that works skips duplicates quietly. Counting them turns that silence
into a signal: on a normal day a few messages come back (a lost ack here, a
redeploy there); a sudden rise usually means a handler that has become slower
than its lease (visibility timeout, lock), or acks that no longer reach the
broker. Everything here is computed from a run's trace, the way a dashboard
computes it from the consumer's logs and the broker's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

CONSUMER_ACKS = ("acked", "ack lost")


def _window(times: pd.Series, window_seconds: float) -> pd.Series:
    return (times // window_seconds * window_seconds).astype(int)


def skip_rate(trace: pd.DataFrame, window_seconds: float = 900, *, until: float | None = None) -> pd.DataFrame:
    """Per window of ``window_seconds``: deliveries handled, duplicates skipped, and their ratio.

    A delivery counts as *handled* when the consumer sends its ack (whether or not
    the ack arrives: the consumer cannot tell). The index is the window's start,
    in seconds; windows with nothing handled have a rate of 0. ``until`` sets the
    end of the last window (the end of the day), so quiet hours still show.
    """
    if window_seconds <= 0:
        raise ValueError(f"window_seconds must be positive, got {window_seconds}")
    end = until if until is not None else float(trace["time"].max()) if len(trace) else 0.0
    windows = pd.RangeIndex(0, int(end) + 1, int(window_seconds)) if end else pd.RangeIndex(0, 1)
    consumer = trace[trace["actor"] != "broker"]
    handled = consumer[consumer["event"].isin(CONSUMER_ACKS)]
    skipped = consumer[consumer["event"] == "duplicate skipped"]
    frame = pd.DataFrame({
        "handled": handled.groupby(_window(handled["time"], window_seconds)).size(),
        "skipped": skipped.groupby(_window(skipped["time"], window_seconds)).size(),
    }).reindex(windows, fill_value=0).fillna(0).astype(int)
    frame["skip rate"] = (frame["skipped"] / frame["handled"].where(frame["handled"] > 0)).fillna(0.0)
    frame.index.name = "window start (s)"
    return frame


@dataclass(frozen=True)
class SkipRateAlert:
    """Fire when the skip rate is at least ``threshold`` for ``windows`` windows in a row.

    A window with fewer than ``min_handled`` deliveries handled never counts, so a
    quiet night with one redelivery out of two messages does not page anyone.
    """

    threshold: float = 0.15
    windows: int = 2
    min_handled: int = 5

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1 or self.windows < 1 or self.min_handled < 1:
            raise ValueError("threshold must be in (0, 1], windows and min_handled at least 1")

    def fires_at(self, rates: pd.DataFrame, window_seconds: float) -> float | None:
        """The moment (end of the window that completes the run of high ones) the alert fires, or None."""
        high = (rates["skip rate"] >= self.threshold) & (rates["handled"] >= self.min_handled)
        run = 0
        for start, is_high in high.items():
            run = run + 1 if is_high else 0
            if run == self.windows:
                return float(start) + window_seconds
        return None


def quiet_hour(handled: int = 5, skipped: tuple[int, ...] = (0, 1, 1, 0), window_seconds: float = 900,
               start: float = 3 * 3600) -> pd.DataFrame:
    """A quiet stretch of night as :func:`skip_rate` tables it: ``handled`` deliveries in each window, ``skipped``
    of them duplicates (one stray lost ack in a window is one skip). Starts at ``start`` (03:00)."""
    rows = [(start + number * window_seconds, handled, skips, skips / handled) for number, skips in enumerate(skipped)]
    return pd.DataFrame(rows, columns=["window start (s)", "handled", "skipped", "skip rate"]).set_index(
        "window start (s)")


def delivery_signals(trace: pd.DataFrame, lease_seconds: float, since: float = 0.0) -> pd.Series:
    """The signals that tell a slow handler from a lost-ack storm, from ``since`` on.

    - *handling time*: the median seconds from a delivery to its consumer's ack,
      against the lease: a slow handler is over it, a lost-ack storm is not;
    - *lease expiries while still working*: of the leases that ran out, the share
      whose consumer had not yet sent its ack. A slow handler is still working when
      its lease expires; in a storm the ack was sent and lost, long before;
    - the broker's delivery count: the share of deliveries that were a third or
      later one.
    """
    trace = trace[trace["time"] >= since]
    keys = ["message_id", "delivery"]
    delivered = trace[trace["event"] == "delivered"].groupby(keys)["time"].min()
    acked = trace[trace["event"].isin(CONSUMER_ACKS) & (trace["actor"] != "broker")].groupby(keys)["time"].min()
    handling = (acked - delivered.reindex(acked.index)).dropna()
    expired = trace[trace["event"] == "lease expired"].set_index(keys)["time"]
    ack_sent = acked.reindex(expired.index)
    still_working = (ack_sent.isna() | (ack_sent > expired)).mean() if len(expired) else 0.0
    counts = trace[trace["event"] == "delivered"]["delivery"]
    return pd.Series({
        "median handling time (s)": float(handling.median()) if len(handling) else 0.0,
        "lease (s)": float(lease_seconds),
        "lease expiries": int(len(expired)),
        "share of expiries while still working": float(still_working),
        "share of deliveries that were a 3rd or later": float((counts >= 3).mean()) if len(counts) else 0.0,
    }, dtype=object)  # a count stays a count (430, not 430.0) beside the seconds and shares


def compare_signals(traces: dict[str, pd.DataFrame], lease_seconds: float, since: float = 0.0) -> pd.DataFrame:
    """:func:`delivery_signals` for several runs side by side, with a last row naming each likely cause."""
    columns = {name: delivery_signals(trace, lease_seconds, since) for name, trace in traces.items()}
    table = pd.DataFrame(columns).astype(object)
    table.loc["diagnosis"] = [diagnose(signals) for signals in columns.values()]
    return table


def diagnose(signals: pd.Series) -> str:
    """Name the likely cause of a rise in skips from :func:`delivery_signals`."""
    if signals["lease expiries"] == 0:
        return "no lease ran out: the duplicates came from the producer (a retried publish, a relay, a replay)"
    if signals["median handling time (s)"] > signals["lease (s)"] or signals["share of expiries while still working"] > 0.5:
        return "the handler is slower than its lease: leases run out while it still works; lengthen the lease or speed it up"
    return "acks are being lost: handling is quick, but leases run out after the ack was sent; look at the consumer-broker link"


def handling_alert(trace: pd.DataFrame, lease_seconds: float, window_seconds: float = 900, share: float = 0.5,
                   min_handled: int = 5) -> float | None:
    """A leading signal: the end of the first window whose 99th-percentile handling time (a delivery to its
    consumer's ack) passes ``share`` of the lease, counting only windows with ``min_handled`` acks; None if none.

    It fires while handling is still inside the lease, before any lease runs out and any duplicate arrives.
    """
    keys = ["message_id", "delivery"]
    delivered = trace[trace["event"] == "delivered"].groupby(keys)["time"].min()
    acked = trace[trace["event"].isin(CONSUMER_ACKS) & (trace["actor"] != "broker")].groupby(keys)["time"].min()
    handling = (acked - delivered.reindex(acked.index)).dropna()
    windows = _window(acked.reindex(handling.index), window_seconds)
    per_window = handling.groupby(windows.values).agg(["count", lambda seconds: seconds.quantile(0.99)])
    per_window.columns = ["handled", "p99"]
    late = per_window[(per_window["handled"] >= min_handled) & (per_window["p99"] > share * lease_seconds)]
    return float(late.index.min()) + window_seconds if len(late) else None
