"""A tqdm progress bar that jitted loops advance from the inside.

Used by the NumPyro baselines whose SVI steps and NUTS iterations run inside
one ``lax.scan`` / ``fori_loop``: :func:`progress` opens the bar and yields the
tick spacing, :func:`tick` (called in the loop body with the iteration index)
advances it through ``jax.debug.callback`` every ``every`` iterations. With
``show=False`` the spacing is 0 and :func:`tick` adds nothing to the loop.
"""

from __future__ import annotations

import contextlib

import jax
from tqdm.auto import tqdm

__all__ = ["advance_bar", "progress", "tick"]

_BAR: dict = {"bar": None}


def advance_bar(count):
    """Advance the open bar by ``count`` (from the host, or from a ``jax.debug.callback``)."""
    if _BAR["bar"] is not None:
        _BAR["bar"].update(int(count))


@contextlib.contextmanager
def progress(total, desc, show, *, loop_length=None):
    """Open a bar of ``total`` iterations; yield the tick spacing (0 without a bar).

    The spacing is 1% of ``loop_length`` (the length of the loop that calls
    :func:`tick`; default ``total``), at least 1.
    """
    loop_length = total if loop_length is None else loop_length
    bar = tqdm(total=total, desc=desc, leave=False, disable=not show)
    _BAR["bar"] = bar if show else None
    try:
        yield max(1, loop_length // 100) if show else 0
    finally:
        _BAR["bar"] = None
        bar.close()


def tick(i, every):
    """Advance the bar by ``every`` from inside a jitted loop (``every=0``: no bar)."""
    if every:
        jax.lax.cond((i + 1) % every == 0, lambda: jax.debug.callback(advance_bar, every),
                     lambda: None)
