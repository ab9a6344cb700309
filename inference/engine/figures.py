"""Figures: one way to create and save them, so that no label overlaps or is cut off.

Every figure of the zoo (``ppl-zoo compare``'s, the examples') is made with
:func:`new_figure` (or :func:`empty_figure` for a hand-made grid) and written with
:func:`save_figure`. The figure uses matplotlib's constrained layout, which makes room
for the suptitle, the axes titles, labels and colorbars (call neither ``tight_layout``
nor ``subplots_adjust`` on it: they fight that layout); it is saved at one resolution,
:data:`DPI`, with ``bbox_inches="tight"``, so that a legend or note placed outside the
axes is kept. :func:`image_axes` strips the ticks of an image grid's axes.

matplotlib is imported inside the functions: it is an optional dependency
(``pip install -e ".[examples]"``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["DPI", "empty_figure", "image_axes", "new_figure", "save_figure"]

#: Resolution of every saved figure (dots per inch).
DPI = 110


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
               **subplots):
    """A figure with a grid of axes, laid out by matplotlib's constrained layout.

    Parameters
    ----------
    nrows, ncols : int
        Shape of the grid of axes.
    figsize : tuple of float, optional
        Width and height in inches (matplotlib's default if None).
    **subplots
        Passed to :func:`matplotlib.pyplot.subplots` (``squeeze``, ``sharex``,
        ``width_ratios``, ``gridspec_kw``, ...).

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure; write it with :func:`save_figure`.
    axes : matplotlib.axes.Axes or numpy.ndarray
        As :func:`matplotlib.pyplot.subplots` returns them.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> fig, ax = new_figure(figsize=(3, 2))
    >>> fig.get_layout_engine().__class__.__name__
    'ConstrainedLayoutEngine'
    >>> import matplotlib.pyplot as plt
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize, layout="constrained", **subplots)


def empty_figure(figsize: tuple[float, float] | None = None):
    """A figure without axes, laid out by constrained layout (add a grid spec yourself).

    Parameters
    ----------
    figsize : tuple of float, optional
        Width and height in inches.

    Returns
    -------
    matplotlib.figure.Figure
        The figure; write it with :func:`save_figure`.
    """
    import matplotlib.pyplot as plt

    return plt.figure(figsize=figsize, layout="constrained")


def image_axes(axes) -> None:
    """Remove the ticks and tick labels of every axes in ``axes`` (an image grid).

    Parameters
    ----------
    axes : matplotlib.axes.Axes or array of them
        The axes that show images; their titles and axis labels are kept.
    """
    for ax in np.ravel(axes):
        ax.set_xticks([])
        ax.set_yticks([])


def save_figure(fig, path, *, dpi: int = DPI) -> Path:
    """Write ``fig`` to ``path`` at ``dpi`` with a tight bounding box, and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        A figure, usually from :func:`new_figure`.
    path : str or pathlib.Path
        Where to write it (the suffix picks the format).
    dpi : int
        Resolution; every figure of the zoo uses :data:`DPI`.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.05)
    plt.close(fig)
    return path
