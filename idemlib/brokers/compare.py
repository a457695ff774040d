"""Every broker of lesson 07 side by side: the two real servers (or their models) and the five models.

Where a server is not running, :func:`rabbitmq` and :func:`jetstream` say which one and how to start
it (``idemlib.servers.available``) and puts a model with the same rules in its column,
so the lesson still runs; with ``IDEMLIB_REQUIRE_SERVERS=1`` a missing server is an error.
"""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from importlib import import_module

import pandas as pd
from matplotlib.axes import Axes

from idemlib.brokers.models import MODELS, BrokerModel, ModelChannel
from idemlib.brokers.sources import ChannelFactory, Consumer, run_broker
from idemlib.facts import fact, fact_seconds
from idemlib.messages import Message
from idemlib.servers import NATS, RABBITMQ, Server, available

RABBITMQ_MODEL = BrokerModel(
    "RabbitMQ (model)", "none", None, "consumer timeout",
    limits="no deduplication on the way in; a delivery that is not acked before the connection closes, or "
           "before the consumer timeout, is requeued with the redelivered flag",
    assumptions=("stands in for the real server when none is running",),
)
JETSTREAM_MODEL = BrokerModel(
    "NATS JetStream (model)", "deduplication ID", fact_seconds("nats_duplicate_window_default"), "ack wait",
    limits=f"Nats-Msg-Id deduplication inside the duplicate window ({fact('nats_duplicate_window_default')} by "
           "default); a message not acked within the ack wait is redelivered",
    assumptions=("stands in for the real server when none is running",),
    window_source="nats_duplicate_window_default",
)


@cache
def _running(server: Server) -> bool:
    # Asked once per session, so a missing server is reported once, not in every cell.
    return available(server)


def rabbitmq(*, delivery_limit: int = 5) -> ChannelFactory:
    """A fresh RabbitMQ quorum queue per run: the real server where it answers, its model where not."""
    if _running(RABBITMQ):
        from idemlib.brokers.rabbitmq import RabbitChannel

        return partial(RabbitChannel, delivery_limit=delivery_limit)
    return partial(ModelChannel, RABBITMQ_MODEL, max_deliveries=delivery_limit + 1)


def jetstream() -> ChannelFactory:
    """A fresh JetStream stream and consumer per run: the real server where it answers, its model where not."""
    if _running(NATS):
        from idemlib.brokers.jetstream import JetStreamChannel

        return JetStreamChannel
    return JETSTREAM_MODEL.open


def which(factory: ChannelFactory) -> str:
    """Whether ``factory`` opens channels on a real server (where, and which version) or on a model, in words."""
    name = getattr(getattr(factory, "func", factory), "__name__", "")
    real = {"RabbitChannel": (RABBITMQ, "rabbitmq"), "JetStreamChannel": (NATS, "jetstream")}.get(name)
    if real is None:
        return "its model (no server running)"
    server, adapter = real
    # The version is the condition every measurement in the lesson is stated under.
    return f"the real server at {server.url()}, {import_module(f'idemlib.brokers.{adapter}').server_version()}"


def compare_brokers(message: Message, factories: list[ChannelFactory] | None = None) -> list[pd.DataFrame]:
    """Run the six duplicate sources on every broker (real two, or their models, then the five models).

    The real brokers spend most of their time waiting out windows and leases, so each
    runs in its own thread, with its own consumer and databases, while the models run
    in a third; the results come back in column order, the same every time.
    """
    if factories is None:
        groups = [[rabbitmq()], [jetstream()], [model.open for model in MODELS]]
    else:
        groups = [factories]

    def run_group(group: list[ChannelFactory]) -> list[pd.DataFrame]:
        consumer = Consumer()  # one pair of databases per thread; each run starts from empty
        return [run_broker(factory, message, consumer) for factory in group]

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        return [table for tables in pool.map(run_group, groups) for table in tables]


def plot_duplicates_reaching(counts: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Bars per broker: how many of the six duplicate sources charged twice, without the inbox and with it.

    ``counts`` is :func:`~idemlib.brokers.sources.duplicates_reaching`'s table. The
    two series differ in colour, hatching and the number written on each bar.
    """
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.subplots(figsize=(9, 4.2))[1]
    positions = range(len(counts))
    styles = {"without the inbox": ("#d55e00", "//"), "with the inbox": ("#0072b2", "")}
    for offset, (column, (colour, hatch)) in zip((-0.2, 0.2), styles.items()):
        bars = ax.bar([p + offset for p in positions], counts[column], width=0.4, color=colour, hatch=hatch,
                      edgecolor="white", label=f"{column}: sources that charged twice")
        ax.bar_label(bars, labels=[str(int(v)) for v in counts[column]], padding=2)
    ax.set_xticks(list(positions), [textwrap.fill(name, 13) for name in counts.index], fontsize=8)
    ax.set_ylim(0, 6.8)
    ax.set_ylabel("duplicate sources (of 6) that charged twice")
    ax.set_title("Every broker lets duplicates through to the consumer; the inbox stops all of them")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return ax
