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
from idemlib.brokers.sources import NOT_REDELIVERED, SOURCES, ChannelFactory, Consumer, cell, run_broker
from idemlib.facts import fact, fact_number, fact_seconds
from idemlib.messages import Message
from idemlib.servers import NATS, RABBITMQ, Server, available

RABBITMQ_MODEL = BrokerModel(
    "RabbitMQ (model)", "none", None, "consumer timeout",
    limits="no deduplication on the way in; a delivery that is not acked before the connection closes, or "
           "before the consumer timeout, is requeued with the redelivered flag",
    assumptions=("stands in for the real server when none is running",),
    lease_default="rabbitmq_consumer_timeout_default", acks_answered=False, late_acks="refused",
)
JETSTREAM_MODEL = BrokerModel(
    "NATS JetStream (model)", "deduplication ID", fact_seconds("nats_duplicate_window_default"), "ack wait",
    limits=f"Nats-Msg-Id deduplication inside the duplicate window ({fact('nats_duplicate_window_default')} by "
           "default); a message not acked within the ack wait is redelivered",
    assumptions=("stands in for the real server when none is running",),
    window_source="nats_duplicate_window_default", lease_default="nats_ack_wait_default",
    claims=("client library's own retry", "application resend inside the window", "ack lost on the way"),
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
    return f"the real server at {server.address()}, {import_module(f'idemlib.brokers.{adapter}').server_version()}"


def compare_brokers(message: Message, factories: list[ChannelFactory] | None = None) -> list[pd.DataFrame]:
    """Run the eight duplicate sources on every broker (real two, or their models, then the five models).

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


def _not_run(server: str, what: str) -> pd.DataFrame:
    return pd.DataFrame({"not run": [f"{what} needs the real {server}; start it with .ci/start-{server.lower()}"]})


def dead_letter_strategies(message: Message) -> pd.DataFrame:
    """RabbitMQ's two dead-letter strategies while the dead-letter queue is missing.

    See :func:`~idemlib.brokers.rabbitmq.dead_letter_hop`; where no server runs, says so.
    """
    if not _running(RABBITMQ):
        return _not_run("RabbitMQ", "dead-lettering with a missing dead-letter queue")
    from idemlib.brokers.rabbitmq import STRATEGIES, dead_letter_hop

    return pd.DataFrame([dead_letter_hop(message, strategy=strategy) for strategy in STRATEGIES])


def jetstream_settings() -> pd.DataFrame:
    """JetStream's defaults, read from the running server (else the documented ones), beside this lesson's settings."""
    from idemlib.brokers.jetstream import ACK_WAIT, DUPLICATE_WINDOW, MAX_DELIVER, server_defaults

    if _running(NATS):
        defaults, column = server_defaults(), "the server's default"
    else:
        defaults = {"duplicate window (s)": fact_seconds("nats_duplicate_window_default"),
                    "ack wait (s)": fact_seconds("nats_ack_wait_default"),
                    "max deliver": fact_number("nats_max_deliver_default")}
        column = "documented default (no server running)"
    ours = {"duplicate window (s)": DUPLICATE_WINDOW, "ack wait (s)": ACK_WAIT, "max deliver": MAX_DELIVER}
    # object columns, so a count stays 5 and -1 beside the seconds instead of turning into 5.0 and -1.0
    return pd.DataFrame({column: pd.Series(defaults, dtype=object),
                         "this lesson's setting": pd.Series(ours, dtype=object)})


def jetstream_double_acks(message: Message) -> pd.DataFrame:
    """A lost double ack noticed and sent again, on the real JetStream; where no server runs, says so.

    See :func:`~idemlib.brokers.jetstream.double_acks`.
    """
    if not _running(NATS):
        return _not_run("NATS", "the double ack")
    from idemlib.brokers.jetstream import double_acks

    return double_acks(message)


def real_brokers() -> pd.DataFrame:
    """What lesson 07 reads from each real server, and what its adapter adds because the server has none.

    Every cell says whose it is: the server's own, or the adapter's stand-in. The
    defaults are the documented ones (``data/facts.csv``); section 3 reads JetStream's
    from the running server.
    """
    from idemlib.brokers.jetstream import ACK_WAIT

    rows = {
        "redelivered flag": ("the server's (AMQP redelivered)",
                             "the adapter's: true when num_delivered > 1 (JetStream sends no flag)"),
        "delivery count": ("the server's (x-delivery-count header, 0 on the first delivery)",
                           "the server's (num_delivered in the ack metadata)"),
        "delivery limit by default": (f"none before 4.0; {fact('rabbitmq_qq_default_delivery_limit')} since 4.0",
                                      "unlimited (MaxDeliver -1)"),
        "dead-letter queue": ("the server's: a queue behind a dead-letter exchange, at most once by default",
                              "the adapter's: terminated messages read back from the stream (JetStream keeps "
                              "them there and only publishes an advisory)"),
        "lease, by default": (f"consumer timeout, {fact('rabbitmq_consumer_timeout_default')}",
                              f"ack wait, {fact('nats_ack_wait_default')}"),
        "lease on this machine": ("1 s, checked every 0.25 s (.ci/start-rabbitmq)",
                                  f"{ACK_WAIT:g} s (set by the adapter)"),
        "an ack is answered": ("never (AMQP 0-9-1)", "a double ack only (AckSync); a plain ack is not. The adapter "
                                                     "sends every ack as a double ack"),
        "deduplication on the way in": ("none", f"Nats-Msg-Id inside the duplicate window "
                                                f"({fact('nats_duplicate_window_default')} by default)"),
    }
    return pd.DataFrame(rows, index=["RabbitMQ", "NATS JetStream"]).T


def plot_source_grid(results: list[pd.DataFrame], ax: Axes | None = None) -> Axes:
    """One cell per (duplicate source, broker): removed by the broker, not redelivered (a lost ack answered), or
    reaching the consumer and caught by the inbox.

    Colour, hatching and the words in each cell carry the outcome; a thick outline marks
    the sources the broker's own feature claims to remove, so no feature is judged on the
    rest. Column labels say whether the broker ran on a real server or as a model.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    from idemlib.pictures.plots import OKABE_ITO

    runs = pd.concat(results, ignore_index=True)
    brokers = list(dict.fromkeys(runs["broker"]))
    ax = ax if ax is not None else plt.subplots(figsize=(1.55 * len(brokers) + 2.6, 0.62 * len(SOURCES) + 1.9))[1]
    caught_here, reaches = "removed by the broker", "reaches the consumer; the inbox keeps one charge"
    answered = "not redelivered: the ack was answered"
    styles = {caught_here: (OKABE_ITO["blue"], "//"), answered: (OKABE_ITO["sky blue"], ".."),
              reaches: (OKABE_ITO["vermillion"], "xx")}
    for _, run in runs.iterrows():
        x, y = brokers.index(run["broker"]), len(SOURCES) - 1 - SOURCES.index(run["source"])
        reached = run["charges without inbox"] > 1
        caught = run["charges with inbox"] == 1
        not_redelivered = cell(run["source"], run["charges without inbox"]) == NOT_REDELIVERED
        kind = reaches if reached else answered if not_redelivered else caught_here
        colour, hatch = styles[kind]
        ax.add_patch(Rectangle((x + 0.03, y + 0.05), 0.94, 0.9, facecolor=colour, hatch=hatch, edgecolor="white",
                               linewidth=0, alpha=0.85))
        if run["claimed"]:
            ax.add_patch(Rectangle((x + 0.03, y + 0.05), 0.94, 0.9, fill=False, edgecolor="black", linewidth=2.2))
        words = ("reaches\n" + ("inbox: 1 charge" if caught else f"inbox: {run['charges with inbox']} charges")
                 if reached else "ack answered:\nnot redelivered" if kind == answered else "removed by\nthe broker")
        ax.text(x + 0.5, y + 0.5, words, ha="center", va="center", fontsize=7,
                bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.85, "linewidth": 0})
    ax.set_xlim(0, len(brokers))
    ax.set_ylim(0, len(SOURCES))
    labels = [name.replace(" (real)", "\n(real server)") if "(real)" in name else f"{name}\n(model)"
              for name in brokers]
    ax.set_xticks([i + 0.5 for i in range(len(brokers))], [textwrap.fill(label, 14) for label in labels], fontsize=7.5)
    ax.xaxis.tick_top()
    ax.set_yticks([len(SOURCES) - 1 - i + 0.5 for i in range(len(SOURCES))], list(SOURCES), fontsize=8)
    ax.set_title("Where each broker's deduplication stops, and the inbox behind it", pad=14)
    handles = [Patch(facecolor=c, hatch=h, edgecolor="white", label=label) for label, (c, h) in styles.items()]
    handles.append(Patch(facecolor="white", edgecolor="black", linewidth=2.2,
                         label="a source the broker's feature claims to remove"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=8, frameon=False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.tick_params(length=0)
    return ax
