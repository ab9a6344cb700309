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
:func:`select_num_components` are thin wrappers that keep this module's result,
:class:`SelectionResult`, one per criterion, over the computation that model_selection
runs for these criteria, :func:`yingyang_selection` (here, below the application layer
that model_selection belongs to, so that the family's own functions need not import
it): the same key gives the same values either way. It fits each mode once per
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

import math
import warnings
from typing import NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.mixture.em import fit_mixture
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_data, check_positive_int, check_rng_key

__all__ = ["SelectionResult", "CRITERIA", "MODEL_SELECTION_NAMES", "num_parameters",
           "compare_criteria", "select_num_components", "yingyang_selection"]

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


def _value(criterion, fit, num, dim):
    """The criterion of one fit (lower is better)."""
    if criterion in ("J", "L_map", "L_stocha"):
        return getattr(fit, criterion)
    cov_type = "spherical" if fit.mode == "nearest" else fit.covariance
    penalty = num_parameters(fit.num_components, dim, cov_type)
    penalty *= math.log(num) if criterion == "bic" else 2.0
    return 2 * num * fit.L_stocha + penalty


def yingyang_selection(x, candidates, criteria, *, covariance, rng_key, num_restarts,
                       loo_options=None, fit_options=None, names=None, step=None,
                       caller="model_selection") -> dict:
    """The YING-YANG criteria of the candidates k, sharing the fits of each mode.

    The computation behind :func:`inference.model_selection`'s YING-YANG criteria (and so
    behind :func:`inference.mixture.selection.compare_criteria`): ``rng_key`` is split
    into one key per candidate, each split into ``num_restarts`` keys that serve every
    mode (``"loo"``: the candidate's key itself); each restart is one
    :func:`inference.mixture.em.fit_mixture` call without pruning, and per criterion the
    best non-collapsed restart counts. A candidate whose every restart collapsed gets the
    value ``inf``, is listed in ``degenerate`` and warned about.

    Parameters
    ----------
    x : array (N, d)
        Checked data.
    candidates : tuple of int
        Checked candidates (distinct, at most N).
    criteria : sequence of str
        Keys of :data:`inference.mixture.selection.CRITERIA` (``"J"``, ``"L_map"``,
        ``"L_stocha"``, ``"bic"``, ``"aic"``, ``"loo"``).
    covariance : {"full", "diag", "spherical"}
    rng_key : jax.random key
    num_restarts : int
    loo_options : dict, optional
        Keyword arguments of :func:`inference.mixture.baselines.mixture_loo`.
    fit_options : dict, optional
        Keyword arguments of :func:`inference.mixture.em.fit_mixture`.
    names : dict, optional
        criterion -> the name the warnings give it (default: the criterion).
    step : callable, optional
        Called with a short text after every candidate of every mode (a progress bar).
    caller : str
        The function the warnings name.

    Returns
    -------
    dict
        ``{criterion: SelectionResult}`` in the order of ``criteria``; ``choice`` is the
        candidate of least value (the first of equal ones), None where every candidate is
        degenerate.

    Warns
    -----
    NumericalWarning
        A candidate whose every restart collapsed (excluded from the choice).
    """
    fit_options = dict(fit_options or {})
    names = dict(names or {})
    num, dim = x.shape
    keys = jax.random.split(rng_key, len(candidates))
    results = {}
    for mode in dict.fromkeys(CRITERIA[c] for c in criteria):
        group = [c for c in criteria if CRITERIA[c] == mode]
        if mode == "mcmc":
            results["loo"] = _loo(x, candidates, keys, covariance, loo_options or {}, step)
            continue
        best = {c: [(math.inf, None)] * len(candidates) for c in group}
        for index, (k, key) in enumerate(zip(candidates, keys, strict=True)):
            for restart_key in jax.random.split(key, num_restarts):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    # one start per call: the restarts are this loop's
                    fit = fit_mixture(x, k, mode=mode, covariance=covariance, prune=False,
                                      rng_key=restart_key, **{"num_restarts": 1, **fit_options})
                if fit.collapsed:
                    continue
                for c in group:
                    value = _value(c, fit, num, dim)
                    if value < best[c][index][0]:
                        best[c][index] = (value, fit)
            if step is not None:
                step(f"{mode} k={k}")
        for c in group:
            values = tuple(float(v) for v, _ in best[c])
            degenerate = tuple(k for k, (_, fit) in zip(candidates, best[c], strict=True)
                               if fit is None)
            if degenerate:
                warnings.warn(f"{caller}: for k in {list(degenerate)} every restart of "
                              f"mode {mode!r} collapsed a component; excluded from "
                              f"{names.get(c, c)!r}", NumericalWarning, stacklevel=5)
            choice = (None if len(degenerate) == len(candidates)
                      else candidates[int(np.argmin(values))])
            results[c] = SelectionResult(c, candidates, values, choice,
                                         tuple(fit for _, fit in best[c]), degenerate)
    return {c: results[c] for c in criteria}


def _loo(x, candidates, keys, covariance, options, step=None):
    """``"loo"``: minus arviz's PSIS-LOO elpd of NUTS on the program, per candidate."""
    import arviz as az

    from inference.mixture.baselines import mixture_loo

    values, fits, loos = [], [], {}
    for k, key in zip(candidates, keys, strict=True):
        loo = mixture_loo(x, k, rng_key=key, covariance=covariance, **options)  # arviz ELPDData
        elpd, se, pareto_k = float(loo.elpd_loo), float(loo.se), float(np.max(loo.pareto_k))
        values.append(-elpd)
        fits.append((elpd, se, pareto_k))
        loos[f"k={k}"] = loo
        if step is not None:
            step(f"nuts k={k}")
    choice = candidates[int(np.argmin(values))]
    table = None
    if len(loos) > 1:
        frame = az.compare(loos, ic="loo").loc[list(loos)]
        table = {name: np.asarray(frame[name], dtype=np.float64) for name in _COMPARE_COLUMNS}
    return SelectionResult("loo", candidates, tuple(values), choice, tuple(fits),
                           arviz_compare=table)


#: The numeric columns of ``arviz.compare`` kept by a ``"loo"`` selection.
_COMPARE_COLUMNS = ("rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning")


#: compare_criteria's criterion -> its name in :func:`inference.model_selection` (whose
#: "bic", "aic" and "loo" are other numbers: per example, higher is better).
MODEL_SELECTION_NAMES = {"J": "J", "L_map": "L_map", "L_stocha": "L_stocha", "bic": "yy_bic",
                         "aic": "yy_aic", "loo": "yy_loo"}


def compare_criteria(x, candidates, *, criteria=("J", "L_map", "L_stocha", "bic", "aic"),
                     covariance: str = "full", rng_key, num_restarts: int = 3,
                     loo_options=None, **fit_kwargs) -> dict:
    """Several criteria over the candidate k, sharing the fits of each mode.

    A thin wrapper over the computation of :func:`inference.model_selection`'s
    YING-YANG criteria (:func:`yingyang_selection`, which both call; model_selection is
    the one entry point of model selection):
    ``compare_criteria(x, ks, criteria=("J", "bic"), rng_key=key)`` is
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
        ``reg_covar``, ...); ``progress_bar`` shows a bar over the candidates of every
        mode.

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
    if taken:  # model_selection's own arguments; fit_mixture has no such options
        raise TypeError(f"compare_criteria passes **fit_kwargs to fit_mixture, which takes "
                        f"no {taken}")
    modes = dict.fromkeys(CRITERIA[c] for c in criteria)
    with tqdm(total=len(modes) * len(candidates), desc="compare_criteria",
              disable=not progress_bar, leave=False) as bar:
        results = yingyang_selection(
            x, candidates, criteria, covariance=covariance, rng_key=rng_key,
            num_restarts=num_restarts, loo_options={"progress_bar": False, **dict(
                loo_options or {})}, fit_options=fit_kwargs, step=lambda _: bar.update(1),
            caller="compare_criteria")
    for c in criteria:
        if len(results[c].degenerate) == len(candidates):
            raise ValueError(f"every candidate collapsed under {c!r}: the candidates "
                             f"{candidates} are too many components for {num} examples")
    return results


#: model_selection's own keyword arguments that are not fit_mixture's.
_MODEL_SELECTION_ARGUMENTS = frozenset({
    "candidates", "model", "criteria", "over_complete", "mask", "num_folds", "loo_max_size",
    "num_warmup", "num_samples", "evidence_options", "evidence_max_size", "vb_options",
    "options", "model_args", "model_kwargs"})


def select_num_components(x, candidates, *, criterion: str = "J", covariance: str = "full",
                          rng_key, num_restarts: int = 3, **kwargs) -> SelectionResult:
    """Choose the number of components by one criterion (see :func:`compare_criteria`).

    A thin wrapper (through :func:`compare_criteria`) of the computation behind
    :func:`inference.model_selection`'s YING-YANG criteria: the same as
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
