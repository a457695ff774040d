"""Words for a figure, for a reader who cannot see it: what it shows, read from the figure itself.

A figure's title states its finding ("m-7f3 charged twice"); its axes say what is plotted
against what, and its legend names the lines or bars. :func:`describe` puts these together.
Loaded as an IPython extension (the site's runs of the lessons start their kernels with it), it
makes every PNG a figure is shown as carry them as its ``alt`` metadata, which the course's site
turns into the image's alt text.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

__all__ = ["attach_to_figures", "describe"]


def _words(text: str) -> str:
    """Matplotlib's mathtext dollar (``$\\$$``) and line breaks as a reader says them."""
    return " ".join(text.replace("$\\$$", "$").replace("\\$", "$").split())


def _axes_words(axes: Any) -> str:
    parts = []
    if title := _words(axes.get_title()):
        parts.append(title)
    x, y = _words(axes.get_xlabel()), _words(axes.get_ylabel())
    if x and y:
        parts.append(f"{y} against {x}")
    elif x or y:
        parts.append(x or y)
    legend = axes.get_legend()
    if legend is not None:
        labels = [_words(text.get_text()) for text in legend.get_texts() if text.get_text()]
        if labels:
            parts.append("key: " + ", ".join(labels))
    return "; ".join(parts)


def describe(figure: Figure) -> str:
    """The figure in words: its title (the finding), then for each plot what it plots and its key."""
    suptitle = figure.get_suptitle()
    panels = [words for axes in figure.axes if axes.get_visible() and (words := _axes_words(axes))]
    sentences = [_words(suptitle)] if suptitle else []
    sentences += panels
    return ". ".join(sentence.rstrip(".") for sentence in sentences) + "." if sentences else "A figure."


def attach_to_figures(shell: Any | None = None) -> bool:
    """Make the notebook's PNG of every figure carry :func:`describe`'s words as its ``alt`` metadata.

    Wraps the PNG formatter that ``%matplotlib inline`` installs; returns whether there was one
    to wrap (outside IPython, or before the inline backend is set up, there is none). Safe to call again.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["image/png"]
    try:
        draw = formatter.lookup_by_type(Figure)
    except KeyError:
        return False
    if getattr(draw, "adds_alt_text", False):
        return True

    def with_alt_text(figure: Figure) -> Any:
        data = draw(figure)
        if isinstance(data, tuple):  # already (data, metadata)
            data, metadata = data
            return data, {**metadata, "alt": describe(figure)}
        return (data, {"alt": describe(figure)}) if data else data

    with_alt_text.adds_alt_text = True  # type: ignore[attr-defined]
    formatter.for_type(Figure, with_alt_text)
    return True


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext idemlib.pictures.alt_text`` (or a kernel started with it): every figure's PNG carries its words,
    whichever cell draws it, also one that draws with matplotlib before importing the course's plots."""
    attach_to_figures(shell)
    shell.events.register("pre_run_cell", lambda *_: attach_to_figures(shell))
