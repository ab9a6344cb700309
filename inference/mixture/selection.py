"""Choosing the number of mixture components (Xu (1995), sec. 5.1).

The YING-YANG criteria score a k-component fit of the program by the limit of
the alternation it was fitted with (``inference.mixture.em.CRITERIA`` below):

* ``"J"`` -- J(k) = log k + (d/2) log E_MSE (eq. 24) of k-means (NN-VQ);
* ``"L_map"`` -- the hard-cut free energy (eq. 20) of hard-cut EM (MAP-VQ), whose
  -sum alpha log alpha term is the paper's penalty on k;
* ``"L_stocha"`` -- minus the mean log-likelihood (eq. 14-16) of EM (SVQ). It has
  no penalty left once the weights are fitted, so it keeps falling with k
  (``examples/yingyang_selection.py`` measures how often it still picks the
  truth);

and, as classical references on the EM fits, ``"bic"`` = 2 N L_stocha + p log N
and ``"aic"`` = 2 N L_stocha + 2 p with p free parameters
(:func:`num_parameters`), and ``"loo"``: minus the PSIS-LOO expected log
predictive density that arviz computes from NUTS draws of the program with y
summed out (``inference.mixture.baselines.mixture_loo``; small data only).
Every value is "lower is better".

:func:`inference.model_selection` is the one entry point of model selection, and
these are among its mixture criteria (``model="mixture"``, ``criteria=("J", "L_map",
"L_stocha", "yy_bic", "yy_aic", "yy_loo")``: BIC, AIC and PSIS-LOO on these fits take
the prefix ``yy_``, since model_selection's ``"bic"``, ``"aic"`` and ``"loo"`` are per
example, higher is better, from fits of their own). :func:`compare_criteria` and
:func:`select_num_components` are thin wrappers of it that keep this module's result,
:class:`SelectionResult`, one per criterion. The computation
(:func:`inference.mixture.scorer.yingyang_selection`) fits each mode once per
candidate k and restart and scores all requested criteria from the same fits. Fits run
without pruning (the candidate k is the point), and a fit in which a component
collapsed onto a point or a subspace (likelihood unbounded, held up only by
``reg_covar``) is skipped when choosing the best restart; a candidate whose every
restart collapsed is excluded from the choice, reported in ``degenerate`` and warned
about.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 4.3 (eq. 20-22), 5.1 (eq. 24).
Schwarz (1978) for BIC, Akaike (1974) for AIC, Vehtari, Gelman and Gabry (2017) for PSIS-LOO.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ppl_models import mixture
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import MissingKeyError, check_data, check_positive_int, check_rng_key

__all__ = ["SelectionResult", "CRITERIA", "MODEL_SELECTION_NAMES", "num_parameters",
           "compare_criteria", "select_num_components"]

#: The fit every criterion scores: a mode of :func:`inference.mixture.em.fit_mixture`,
#: or ``"mcmc"`` (NUTS on the program, for ``"loo"``).
CRITERIA = {"J": "nearest", "L_map": "map", "L_stocha": "stochastic", "bic": "stochastic",
            "aic": "stochastic", "loo": "mcmc"}


class SelectionResult(NamedTuple):
    """One criterion over the candidate numbers of components.

    Attributes
    ----------
    criterion : str
    candidates : tuple of int
    values : tuple of float
        The criterion of every candidate k at its best restart (lower is better;
        ``inf`` for a degenerate candidate).
    choice : int
        The candidate with the least value.
    fits : tuple
        The best restart of every candidate (``MixtureResult``; for ``"loo"`` the
        ``(elpd_loo, se, pareto_k_max)`` of arviz).
    degenerate : tuple of int
        Candidates excluded because every restart collapsed.
    arviz_compare : dict of arrays, optional
        For ``"loo"``: the columns of ``arviz.compare`` over the candidates' PSIS-LOO
        (rank, elpd_loo, p_loo, elpd_diff, weight, se, dse, warning), one entry per
        candidate in the order of ``candidates``; :meth:`compare_table` gives it as
        arviz's DataFrame. None for the other criteria.
    """

    criterion: str
    candidates: tuple
    values: tuple
    choice: int
    fits: tuple
    degenerate: tuple = ()
    arviz_compare: dict | None = None

    def compare_table(self):
        """``arviz.compare``'s table of the candidates (``"loo"`` only), ranked, as a
        pandas DataFrame indexed by ``"k=<candidate>"``."""
        if self.arviz_compare is None:
            raise ValueError(f"criterion {self.criterion!r} has no arviz.compare table "
                             "(only 'loo' does)")
        import pandas as pd

        frame = pd.DataFrame({name: np.asarray(column) for name, column in
                              self.arviz_compare.items()},
                             index=[f"k={k}" for k in self.candidates])
        frame["warning"] = frame["warning"].astype(bool)
        frame["rank"] = frame["rank"].astype(int)
        return frame.sort_values("rank")

    def table(self) -> str:
        """The values as a two-column text table with the choice marked."""
        lines = [f"{'k':>4s}  {self.criterion:>14s}"]
        for k, value in zip(self.candidates, self.values, strict=True):
            mark = "  <- choice" if k == self.choice else ""
            mark += "  (degenerate)" if k in self.degenerate else ""
            lines.append(f"{k:4d}  {value:14.5f}{mark}")
        return "\n".join(lines)


def num_parameters(num_components: int, dim: int, covariance: str) -> int:
    """Free parameters of a k-component mixture: k - 1 weights, k means, k covariances."""
    if covariance not in mixture.COVARIANCES:
        raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got {covariance!r}")
    per_component = {"full": dim * (dim + 1) // 2, "diag": dim, "spherical": 1}[covariance]
    return (num_components - 1) + num_components * (dim + per_component)


def _check_candidates(candidates):
    try:
        candidates = tuple(candidates)
    except TypeError:
        raise TypeError(f"candidates must be a sequence of positive integers; got "
                        f"{candidates!r}") from None
    if not candidates:
        raise ValueError("candidates must hold at least one number of components")
    candidates = tuple(check_positive_int(k, "candidates") for k in candidates)
    if len(set(candidates)) != len(candidates):
        raise ValueError(f"candidates must not repeat a number; got {candidates}")
    return candidates


#: compare_criteria's criterion -> its name in :func:`inference.model_selection` (whose
#: "bic", "aic" and "loo" are other numbers: per example, higher is better).
MODEL_SELECTION_NAMES = {"J": "J", "L_map": "L_map", "L_stocha": "L_stocha", "bic": "yy_bic",
                         "aic": "yy_aic", "loo": "yy_loo"}


def compare_criteria(x, candidates, *, criteria=("J", "L_map", "L_stocha", "bic", "aic"),
                     covariance: str = "full", rng_key, num_restarts: int = 3,
                     loo_options=None, **fit_kwargs) -> dict:
    """Several criteria over the candidate k, sharing the fits of each mode.

    A wrapper of :func:`inference.model_selection`, the one entry point of model
    selection: ``compare_criteria(x, ks, criteria=("J", "bic"), rng_key=key)`` is
    ``model_selection(x, ks, model="mixture", criteria=("J", "yy_bic"), rng_key=key)``
    (``"bic"``, ``"aic"`` and ``"loo"`` are model_selection's ``"yy_bic"``,
    ``"yy_aic"`` and ``"yy_loo"``: :data:`MODEL_SELECTION_NAMES`), its result given as
    one :class:`SelectionResult` per criterion, with the same values, choices and fits
    for the same ``rng_key``. Use model_selection to put these criteria in one table
    with the others (VB bound, cross-validation, PSIS-LOO, evidence, ...).

    Parameters
    ----------
    x : array (num_examples, d)
    candidates : sequence of int
        Numbers of components to try (distinct, each at most the number of
        distinct examples).
    criteria : sequence of str
        Keys of :data:`CRITERIA`.
    covariance : {"full", "diag", "spherical"}
        Family of the EM and hard-cut EM fits (k-means is always spherical).
    rng_key : jax.random key
        Split per candidate and restart; the same keys serve every mode.
    num_restarts : int
        k-means++ restarts per candidate and mode; the best restart by each
        criterion counts.
    loo_options : dict, optional
        Passed to ``inference.mixture.baselines.mixture_loo`` (``num_warmup``,
        ``num_samples``, ...) for ``"loo"``.
    **fit_kwargs
        Passed to :func:`inference.mixture.em.fit_mixture` (``max_iterations``,
        ``reg_covar``, ...); ``progress_bar`` shows model_selection's bar over the fits.

    Returns
    -------
    dict
        ``{criterion: SelectionResult}``.

    Warns
    -----
    NumericalWarning
        A candidate whose every restart collapsed (excluded from the choice).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 600, 3, 2, separation=8.0)  # k = 3
    >>> results = compare_criteria(data.x, [2, 3, 4], criteria=("J", "bic", "L_stocha"),
    ...                            rng_key=jax.random.key(1))
    >>> {name: result.choice for name, result in results.items()}  # the likelihood overfits
    {'J': 3, 'bic': 3, 'L_stocha': 4}
    >>> results["bic"].fits[1].num_components  # the best fit of every candidate is kept
    3
    """
    from inference.app.selection import model_selection

    if isinstance(criteria, str):
        raise TypeError(f"criteria must be a sequence of names among {sorted(CRITERIA)}, not "
                        f"one string; got {criteria!r} (write ({criteria!r},))")
    criteria = tuple(criteria)
    unknown = [c for c in criteria if c not in CRITERIA]
    if unknown or not criteria:
        raise ValueError(f"criteria must be among {sorted(CRITERIA)}; got {list(criteria)!r}")
    candidates = _check_candidates(candidates)
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if rng_key is None:
        raise MissingKeyError("rng_key is required (a jax.random key)")
    check_rng_key(rng_key)
    if "prune" in fit_kwargs:
        raise TypeError("compare_criteria fits every candidate without pruning; do not pass "
                        "prune")
    x = check_data(x, "x")
    num = x.shape[0]
    if max(candidates) > num:
        raise ValueError(f"candidates must be at most the {num} examples (rows) of x; got "
                         f"{candidates}")
    if num == 1:  # what every fit says of one row (model_selection's checks need two)
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    fit_kwargs = dict(fit_kwargs)
    progress_bar = bool(fit_kwargs.pop("progress_bar", False))
    taken = sorted(set(fit_kwargs) & _MODEL_SELECTION_ARGUMENTS)
    if taken:  # model_selection would take them as its own; fit_mixture has no such options
        raise TypeError(f"compare_criteria passes **fit_kwargs to fit_mixture, which takes "
                        f"no {taken}")
    names = dict.fromkeys(MODEL_SELECTION_NAMES[c] for c in criteria)
    with warnings.catch_warnings():  # said below, as compare_criteria has always said it
        warnings.filterwarnings("ignore", r"model_selection: for k in \[", NumericalWarning)
        result = model_selection(
            x, candidates, model="mixture", criteria=tuple(names), covariance=covariance,
            rng_key=rng_key, num_restarts=num_restarts, num_folds=2,
            progress_bar=progress_bar,
            options={"loo_options": {"progress_bar": False, **dict(loo_options or {})}},
            **fit_kwargs)
    results = {}
    for mode in dict.fromkeys(CRITERIA[c] for c in criteria):  # the order of the fits
        for c in (c for c in criteria if CRITERIA[c] == mode):
            detail = result.details[MODEL_SELECTION_NAMES[c]]
            degenerate = detail.degenerate
            if degenerate:
                warnings.warn(f"compare_criteria: for k in {list(degenerate)} every restart of "
                              f"mode {mode!r} collapsed a component; excluded from {c!r}",
                              NumericalWarning, stacklevel=2)
            if len(degenerate) == len(candidates):
                raise ValueError(f"every candidate collapsed under {c!r}: the candidates "
                                 f"{candidates} are too many components for {num} examples")
            results[c] = _as_selection_result(c, result, detail)
    return {c: results[c] for c in criteria}


#: model_selection's own keyword arguments that are not fit_mixture's.
_MODEL_SELECTION_ARGUMENTS = frozenset({
    "candidates", "model", "criteria", "over_complete", "mask", "num_folds", "loo_max_size",
    "num_warmup", "num_samples", "evidence_options", "evidence_max_size", "vb_options",
    "options", "model_args", "model_kwargs"})


def _as_selection_result(criterion, result, detail) -> SelectionResult:
    """model_selection's result of one YING-YANG criterion as compare_criteria's."""
    name = MODEL_SELECTION_NAMES[criterion]
    return SelectionResult(criterion, tuple(result.candidates), tuple(result.values[name]),
                           result.choice[name], detail.fits, detail.degenerate,
                           detail.arviz_compare)


def select_num_components(x, candidates, *, criterion: str = "J", covariance: str = "full",
                          rng_key, num_restarts: int = 3, **kwargs) -> SelectionResult:
    """Choose the number of components by one criterion (see :func:`compare_criteria`).

    A wrapper of :func:`inference.model_selection`, the one entry point of model
    selection (through :func:`compare_criteria`): the same as
    ``compare_criteria(x, candidates, criteria=(criterion,), ...)[criterion]``, which
    is model_selection's YING-YANG criterion of that name (``"yy_bic"``, ``"yy_aic"``,
    ``"yy_loo"`` for ``"bic"``, ``"aic"``, ``"loo"``) as a :class:`SelectionResult`.

    Parameters
    ----------
    x : array (num_examples, d)
    candidates : sequence of int
    criterion : {"J", "L_map", "L_stocha", "bic", "aic", "loo"}
        J (eq. 24) scores k-means, L_map hard-cut EM, L_stocha / BIC / AIC EM,
        LOO NUTS draws of the program.
    covariance, rng_key, num_restarts, **kwargs
        As for :func:`compare_criteria`.

    Returns
    -------
    SelectionResult
        ``choice`` is the selected k; ``table()`` prints the values.

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 600, 3, 2, separation=8.0)
    >>> select_num_components(data.x, range(2, 5), rng_key=jax.random.key(1)).choice
    3
    """
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {sorted(CRITERIA)}; got {criterion!r}")
    return compare_criteria(x, candidates, criteria=(criterion,), covariance=covariance,
                            rng_key=rng_key, num_restarts=num_restarts, **kwargs)[criterion]
