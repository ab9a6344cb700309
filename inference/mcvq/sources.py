"""Sources of MCVQ rows with masks for the streamed fit (:mod:`inference.mcvq.stream`):
(x, mask) pairs, a mask source cut like x, or arrays with every entry observed."""

from __future__ import annotations

import itertools

import numpy as np

from inference.engine.streaming import BatchSource, batches, is_stream

__all__ = ["MaskedSource", "Packed", "chain_one", "is_masked_stream", "pair_part"]


def is_masked_stream(x) -> bool:
    """Whether ``x`` is a stream for :func:`fit_mcvq_stream`: :func:`is_stream`, or a list
    or tuple of ``(x_batch, mask_batch)`` pairs."""
    if is_stream(x):
        return True
    return (isinstance(x, list | tuple) and len(x) > 0 and isinstance(x[0], tuple | list)
            and len(x[0]) == 2 and np.ndim(x[0][0]) == 2)


class MaskedSource:
    """(x, mask) batches of an MCVQ source, checked; iterate for one pass.

    Forms: ``mask`` None and items arrays (all observed); ``mask`` None and items
    ``(x, mask)`` pairs; ``mask`` a second source of the same form as ``source``
    (an array or memmap of x's shape, or batches matching x's row for row).
    """

    def __init__(self, source, mask, batch_size):
        self.batch_size = batch_size
        probe = batches(source, batch_size)
        # Arrays are cut by BatchSource; other sources are read item by item (pairs or
        # arrays) and cut per pass in _pairs.
        self.x_source = probe if probe.kind == "array" else BatchSource(source, None)
        self.x_source.name = "source"
        self.mask_source = None if mask is None else batches(mask, batch_size)
        if self.mask_source is not None:
            self.mask_source.name = "mask"
            if probe.kind != "array":
                self.x_source = probe
        self.reusable = self.x_source.reusable and (
            self.mask_source is None or self.mask_source.reusable)

    def _pairs(self):
        """Checked x and mask sources for one pass, read in lockstep (mask None: all
        observed)."""
        if self.mask_source is not None or self.x_source.kind == "array":
            return self.x_source, self.mask_source
        items = iter(self.x_source._raw())  # the items as given: arrays or (x, mask) pairs
        head = next(items, None)
        if head is None:
            return BatchSource(iter(()), name="source"), None  # raises "source is empty"
        stream = chain_one(head, items)
        if not (isinstance(head, tuple | list) and len(head) == 2 and np.ndim(head[0]) == 2):
            return BatchSource(stream, self.batch_size, name="source"), None
        left, right = itertools.tee(stream)
        xs = BatchSource((pair_part(pair, i, 0) for i, pair in enumerate(left)),
                         self.batch_size, name="source")
        masks = BatchSource((pair_part(pair, i, 1) for i, pair in enumerate(right)),
                            self.batch_size, name="mask")
        return xs, masks

    def __iter__(self):
        """(x with 0 at missing entries as float64-or-native array, bool mask) per batch."""
        xs, masks = self._pairs()
        if masks is None:
            for index, x in enumerate(xs):
                yield index, x, None
            return
        xs.check_finite = False
        mask_iter = iter(masks)
        for index, x in enumerate(xs):
            mask = next(mask_iter, None)
            if mask is None:
                raise ValueError(f"mask ended before source: no mask for source batch {index}")
            if mask.shape != x.shape:
                raise ValueError(f"mask batch {index} has shape {mask.shape}; expected the "
                                 f"shape of source batch {index}, {x.shape}")
            if mask.dtype != bool:
                if not np.all((mask == 0) | (mask == 1)):
                    raise TypeError(f"mask batch {index} must be bool (True = observed); got "
                                    f"dtype {mask.dtype} with values other than 0 / 1")
                mask = mask.astype(bool)
            bad = int(np.sum(~np.isfinite(x) & mask))
            if bad:
                raise ValueError(f"source batch {index} has {bad} NaN or infinite value(s) "
                                 "where mask is True (observed); mark them False in mask")
            yield index, np.where(mask, x, 0), mask
        if next(mask_iter, None) is not None:
            raise ValueError("mask has more batches than source")


def chain_one(head, rest):
    """``head`` followed by the items of ``rest`` (one iterator)."""
    yield head
    yield from rest


def pair_part(pair, index, part):
    """Part ``part`` (0: x, 1: mask) of item ``index`` of a source of (x, mask) pairs."""
    if not (isinstance(pair, tuple | list) and len(pair) == 2):
        raise TypeError(f"source batch {index} must be an (x, mask) pair like batch 0; got "
                        f"{type(pair).__name__}")
    return pair[part]


class Packed:
    """Re-iterable (rows, 2 D) arrays [x with 0 at missing, mask as 0 / 1] for ``_Pass``:
    a padded row is all zeros, i.e. unobserved, and adds nothing to any sum."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        for _, x, mask in self.source:
            obs = np.ones(x.shape, bool) if mask is None else mask
            yield np.concatenate([np.where(obs, x, 0), obs], axis=1)
