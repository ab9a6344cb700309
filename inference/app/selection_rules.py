"""The rules that turn candidates' scores into a choice, for :func:`inference.model_selection`.

The smallest candidate within a tie tolerance of the best value, the one-standard-error
rule on per-example held-out or leave-one-out log densities (T. Hastie, R. Tibshirani,
J. Friedman, "The Elements of Statistical Learning", 2nd ed., Springer 2009, sec. 7.10;
A. Vehtari, A. Gelman, J. Gabry, "Practical Bayesian model evaluation using
leave-one-out cross-validation and WAIC", Statistics and Computing 2017), the
cross-validation folds, and the smallest candidate that contains a given size.
"""

from __future__ import annotations

import math

import jax
import numpy as np

__all__ = ["TIE_TOLERANCE", "argmax", "folds", "one_se_choice", "smallest_containing"]

#: Values within this many nats per example of the best count as tied, and the
#: smallest tied candidate (by K, then J) is chosen: a larger model whose extra VQ,
#: state or component is left unused scores the same as the smaller one up to
#: float32 rounding (measured differences ~1e-6), and parsimony breaks the tie.
TIE_TOLERANCE = 1e-4


def folds(rng_key, num, num_folds):
    """(train, held-out) index arrays of every fold: a permutation split in num_folds parts."""
    order = np.asarray(jax.random.permutation(rng_key, num))
    parts = np.array_split(order, num_folds)
    return [(np.sort(np.concatenate(parts[:f] + parts[f + 1:])), np.sort(parts[f]))
            for f in range(num_folds)]


def smallest_containing(candidates, size, model):
    """The smallest candidate that contains ``size`` (by K then J), else None."""
    if model == "mcvq":
        fits = [c for c in candidates if c[0] >= size[0] and c[1] >= max(size[1])]
        return min(fits, default=None)
    return min((c for c in candidates if c >= size), default=None)


def _smallest(candidates, keep, order):
    """The smallest kept candidate: by ``order`` (one sort key per candidate) where
    given, else by the candidates themselves."""
    kept = [i for i, k in enumerate(keep) if k]
    if order is None:
        return min(candidates[i] for i in kept)
    return candidates[min(kept, key=lambda i: order[i])]


def argmax(candidates, values, order=None):
    """The smallest candidate whose value is within ``TIE_TOLERANCE`` of the largest
    (smallest by ``order``, one sort key per candidate, where given)."""
    values = np.asarray(values, float)
    finite = np.isfinite(values)
    if not finite.any():
        return None
    best = np.max(values[finite])
    return _smallest(list(candidates), finite & (values >= best - TIE_TOLERANCE), order)


def one_se_choice(candidates, pointwise, order=None):
    """The smallest candidate whose mean is within one paired SE of the best mean.

    ``pointwise`` (candidates, N) holds per-example held-out (CV) or leave-one-out
    (PSIS-LOO) log predictive densities; rows with NaN (not scored) are
    excluded ("smallest" by ``order``, one sort key per candidate, where given). The
    SE of the difference to the best candidate is computed from the
    per-example differences, sd(diff) / sqrt(N), as arviz's ``dse``: the
    one-standard-error rule (Hastie, Tibshirani and Friedman 2009, sec. 7.10;
    Vehtari et al. 2017 sec. 5 judge elpd differences against this se), so a
    larger model whose gain is within noise does not win.
    """
    scored = ~np.any(np.isnan(pointwise), axis=1)
    if not scored.any():
        return None
    means = np.where(scored, np.mean(pointwise, axis=1), -np.inf)
    best = int(np.argmax(means))
    if not np.isfinite(means[best]):
        return candidates[best]
    diff = pointwise - pointwise[best]
    se = np.std(diff, axis=1, ddof=1) / math.sqrt(pointwise.shape[1])
    ok = scored & (means >= means[best] - se - TIE_TOLERANCE)
    return _smallest(list(candidates), ok, order)
