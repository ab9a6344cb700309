"""Model selection for MCVQ and the Gaussian mixture: VB bound, CV, training fit, BIC, LOO.

The "current directions" of the MCVQ slides (Ross and Zemel (2002): VB MCVQ, model
selection): choose the number and size of the VQs (MCVQ) or the
number of components (mixture) by the variational lower bound on the evidence,
and compare it with the training likelihood (which does not penalise
complexity) and with cross-validation (expensive). :func:`model_selection`
scores a list of candidates, or one over-complete VB model that prunes itself,
under these criteria (every value is *per example, in nats, higher is better*):

* ``"vb"`` -- the VB lower bound L(Q) / N of ``fit_vb_mcvq`` / ``fit_vb_mixture``
  started at the candidate size (best of ``num_restarts`` runs; Corduneanu &
  Bishop 2001). With type-II ML weights a larger start contains every smaller
  model (a pruned VQ, state or component has weight 0 and KL 0), and a run
  prunes what the bound does not support, so the *choice* is the smallest
  candidate that contains the structure surviving in the run with the highest
  bound (its surviving size is reported per candidate, ``vb_sizes``);
* ``"cv"`` -- ``num_folds``-fold cross-validated held-out log-likelihood per
  example (every example held out once; SE over the fold means), fitting
  ``fit_mcvq`` / ``fit_mixture(mode="stochastic", prune=False)`` on the other folds.
  MCVQ's predictive is log p(x | mu, sigma, a = g, b = pi) with the fit's g and
  mean state usage pi, exact when every candidate has J^K K <= 4096, else its
  variational bound for every candidate (``notes`` says which;
  :mod:`inference.mcvq.selection`);
* ``"train"`` -- the same score on the training data of a full-data fit (it
  grows with the size of the model: no penalty for complexity);
* ``"bic"`` -- (train total log-likelihood - (p / 2) log N) / N (Schwarz 1978),
  p from ``inference.mcvq.selection.num_parameters`` (MCVQ: 2 D K J + K (J - 1)
  + D (K - 1)) or ``inference.mixture.selection.num_parameters`` (mixture);
* ``"loo"`` -- PSIS-LOO elpd / N from arviz on NUTS draws of the program
  (Vehtari et al. 2017): the mixture through
  ``inference.mixture.baselines.fit_mixture_mcmc`` (the path of ``mixture_loo``),
  MCVQ through NUTS on the Bayesian program's mu, tau with r fixed at the
  full-data fit's argmax g and s enumerated
  (``inference.mcvq.selection.loo_inference_data``). Run only where the
  model is small enough (``loo_max_size`` on N D J^K for MCVQ, N k d for the
  mixture, plus the hard limits of the enumeration and of ``fit_mixture_mcmc``);
  otherwise skipped with the reason in ``skipped``. The comparison table of the
  candidates where it ran is arviz's own: ``result.arviz_compare`` is
  ``arviz.compare`` over their PSIS-LOO ``ELPDData`` (rank, elpd_loo, p_loo, elpd_diff,
  weight, se, dse, warning, scale; every candidate's ``InferenceData`` comes from
  ``arviz.from_numpyro``, :mod:`inference.engine.inference_data`).

Choices. ``"train"`` and ``"bic"`` take the largest value, ``"cv"`` and ``"loo"``
the smallest candidate within one standard error of the best (the SE of the
per-example paired difference, as arviz's ``dse``; the one-SE rule), ``"vb"``
the smallest candidate containing what survives in the best-bound run; ties
within ``TIE_TOLERANCE`` go to the smallest candidate (by K, then J), since a
larger model whose extra VQ, state or component stays unused scores the same.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: VB MCVQ and model selection.
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003.
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection for
mixture distributions", AISTATS. Schwarz, G. (1978), "Estimating the dimension of a
model", Annals of Statistics 6. Vehtari, A., Gelman, A. and Gabry, J. (2017),
"Practical Bayesian model evaluation using leave-one-out cross-validation and
WAIC", Statistics and Computing 27.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import numpy as np

from inference.app.selection_rules import (
    argmax,
    folds,
    one_se_choice,
    smallest_containing,
)
from inference.mcvq import selection as mcvq_scores
from inference.mcvq.vb import check_covered
from inference.mixture.scorer import MixtureScorer
from ppl_models import mixture
from ppl_models.validation import MissingKeyError, check_data, check_positive_int, check_rng_key

__all__ = ["CRITERIA", "MODELS", "PrunedModel", "ModelSelectionResult", "model_selection"]

#: The criteria, in table order.
CRITERIA = ("vb", "cv", "train", "bic", "loo")
#: The model families.
MODELS = ("mcvq", "mixture")
#: Default largest N D J^K (MCVQ) or N k d (mixture) for "loo": one log-density
#: evaluation of NUTS then holds at most this many numbers (2 MiB in float32),
#: which keeps a chain of ~1000 iterations within minutes on 2 CPU cores.
LOO_MAX_SIZE = 1 << 19


class PrunedModel(NamedTuple):
    """The over-complete VB route: one VB model started large, pruned by its bound.

    Attributes
    ----------
    start : tuple or int
        (K_max, J_max) for MCVQ, k_max for the mixture.
    size : tuple or int
        What survived: (K, (J_1, ..., J_K)) for MCVQ, k for the mixture.
    bound : float
        L(Q) / N of the best of the runs (nats per example).
    fit : VBMCVQResult or VBMixtureResult
    """

    start: object
    size: object
    bound: float
    fit: object


class ModelSelectionResult(NamedTuple):
    """Result of :func:`model_selection`.

    Every value is a log-scale quantity per example (nats), *higher is better*.

    Attributes
    ----------
    model : str
        ``"mcvq"`` or ``"mixture"``.
    candidates : tuple
        (K, J) pairs (MCVQ) or numbers of components k (mixture).
    values : dict
        criterion -> tuple of float, one per candidate (nan where not computed).
    choice : dict
        criterion -> the chosen candidate (None when no candidate was scored);
        ``"vb (pruned)"`` -> the surviving size of the over-complete model.
    standard_errors : dict
        ``"cv"``: SE of the fold means; ``"loo"``: arviz's se / N.
    vb_sizes : tuple
        Surviving size of the best VB run of every candidate ((K, (J_1..J_K)) or
        k; None without ``"vb"``).
    over_complete : PrunedModel or None
    arviz_compare : pandas.DataFrame or None
        The PSIS-LOO comparison table: ``arviz.compare`` over the ``arviz.loo``
        ``ELPDData`` of the candidates where ``"loo"`` ran (two or more), indexed by
        candidate name (``"3"``, ``"(2, 2)"``), best first; columns rank, elpd_loo,
        p_loo, elpd_diff, weight, se, dse, warning, scale (totals over the examples,
        where ``values["loo"]`` is per example). Also :attr:`compare_table`.
    skipped : dict
        criterion -> why it was not computed (for all or some candidates).
    notes : tuple of str
        How the values were obtained (CV predictive exact or bound,
        non-converged fits, Pareto k, divergences).
    """

    model: str
    candidates: tuple
    values: dict
    choice: dict
    standard_errors: dict
    vb_sizes: tuple
    over_complete: PrunedModel | None
    arviz_compare: object
    skipped: dict
    notes: tuple

    @property
    def compare_table(self):
        """``arviz.compare``'s table of the candidates' PSIS-LOO (``arviz_compare``), or
        None when fewer than two candidates ran ``"loo"``."""
        return self.arviz_compare

    def table(self) -> str:
        """Candidates as rows, criteria as columns (nats per example, higher is better);
        ``*`` marks each column's choice, (SE) follows CV and LOO values."""
        criteria = list(self.values)
        label = _label(self.model)
        width = max([len(label)] + [len(_name(c)) for c in self.candidates]) + 2
        cells = {c: 20 if c in self.standard_errors else 12 for c in criteria}
        header = f"{label:<{width}s}" + "".join(f"{c:>{cells[c]}s}" for c in criteria)
        if any(s is not None for s in self.vb_sizes):
            header += "  vb survivors"
        lines = [header]
        for i, cand in enumerate(self.candidates):
            row = f"{_name(cand):<{width}s}"
            for c in criteria:
                value = self.values[c][i]
                text = "-" if not np.isfinite(value) else f"{value:.4f}"
                if c in self.standard_errors and np.isfinite(value):
                    text += f" ({self.standard_errors[c][i]:.3f})"
                text += "*" if self.choice.get(c) == cand else " "
                row += f"{text:>{cells[c]}s}"
            if any(s is not None for s in self.vb_sizes):
                row += f"  {_size_text(self.vb_sizes[i])}"
            lines.append(row.rstrip())
        lines.append("values: nats per example, higher is better; * = choice (cv, loo: "
                     "smallest within one paired SE of the best)")
        if self.over_complete is not None:
            oc = self.over_complete
            lines.append(f"vb (pruned) from {_name(oc.start)}: {_size_text(oc.size)}, bound "
                         f"{oc.bound:.4f}")
        lines += [f"skipped {c}: {why}" for c, why in self.skipped.items()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _label(model):
    return "(K, J)" if model == "mcvq" else "k"


def _name(candidate):
    return str(candidate) if not isinstance(candidate, tuple) else f"({candidate[0]}, " \
        f"{candidate[1]})"


def _size_text(size):
    if size is None:
        return "-"
    if isinstance(size, tuple):
        return f"{size[0]} VQs, states {list(size[1])}"
    return f"{size} components"


# --- checks ----------------------------------------------------------------------------

def _check_candidates(candidates, model, num, dim):
    if isinstance(candidates, str | bytes) or not hasattr(candidates, "__iter__"):
        raise TypeError(f"candidates must be a sequence of {'(K, J) pairs' if model == 'mcvq' else 'integers'}; got {candidates!r}")  # noqa: E501
    candidates = tuple(candidates)
    if not candidates:
        raise ValueError("candidates must hold at least one candidate model; got an empty "
                         "sequence")
    checked = []
    for cand in candidates:
        if model == "mcvq":
            if not isinstance(cand, tuple | list) or len(cand) != 2:
                raise TypeError(f"candidates for model='mcvq' must be (K, J) pairs; got {cand!r}")
            checked.append((check_positive_int(cand[0], "candidates K"),
                            check_positive_int(cand[1], "candidates J")))
        else:
            checked.append(check_positive_int(cand, "candidates", maximum=num,
                                              why=" (the number of examples, rows of x)"))
    if len(set(checked)) != len(checked):
        raise ValueError(f"candidates must not repeat; got {candidates}")
    return tuple(checked)


def _check_over_complete(over_complete, model, num):
    if over_complete is None:
        return None
    if model == "mcvq":
        if not isinstance(over_complete, tuple | list) or len(over_complete) != 2:
            raise TypeError("over_complete for model='mcvq' must be a (K_max, J_max) pair; got "
                            f"{over_complete!r}")
        return (check_positive_int(over_complete[0], "over_complete K_max"),
                check_positive_int(over_complete[1], "over_complete J_max"))
    return check_positive_int(over_complete, "over_complete", maximum=num,
                              why=" (the number of examples, rows of x)")


def _check_criteria(criteria):
    if isinstance(criteria, str):
        criteria = (criteria,)
    criteria = tuple(criteria)
    unknown = [c for c in criteria if c not in CRITERIA]
    if unknown or not criteria or len(set(criteria)) != len(criteria):
        raise ValueError(f"criteria must be distinct names among {CRITERIA}; got "
                         f"{list(criteria)!r}")
    return tuple(c for c in CRITERIA if c in criteria)


# --- the entry point ----------------------------------------------------------------------

def model_selection(x, candidates=None, *, model: str = "mcvq",
                    criteria=("vb", "cv", "train", "bic", "loo"), over_complete=None,
                    mask=None, rng_key, num_folds: int = 5, num_restarts: int = 3,
                    covariance: str | None = None, loo_max_size: int = LOO_MAX_SIZE,
                    num_warmup: int = 500, num_samples: int = 500, progress_bar: bool = False,
                    vb_options=None, **fit_options) -> ModelSelectionResult:
    """Score candidate MCVQs or mixtures by VB bound, CV, training fit, BIC and PSIS-LOO.

    Parameters
    ----------
    x : array (N, D)
        Data (MCVQ: entries where ``mask`` is False may hold anything).
    candidates : sequence, optional
        (K, J) pairs for ``model="mcvq"`` (default K = 1..4 times J = 2..4), numbers
        of components k for ``"mixture"`` (default 1..6, at most N). With
        ``over_complete`` and no candidates, only the over-complete model is run.
    model : {"mcvq", "mixture"}
    criteria : sequence of str
        Among ``"vb", "cv", "train", "bic", "loo"`` (module docstring).
    over_complete : (K_max, J_max) or int, optional
        Also run VB from this large model (best of ``num_restarts`` runs) and
        report what survives as ``choice["vb (pruned)"]``.
    mask : bool array (N, D), optional
        MCVQ only: True where x is observed.
    rng_key : jax.random key
        Split into the folds, the fits of every criterion and candidate, and the
        chains; the result is a deterministic function of it.
    num_folds : int
        2 .. N folds for ``"cv"``.
    num_restarts : int
        Starts per EM fit (``fit_mcvq(num_restarts=)``, or the best
        ``fit_mixture`` restart by likelihood among non-collapsed ones) and VB runs
        per candidate (best bound kept).
    covariance : {"full", "diag", "spherical"}, optional
        Mixture only (default ``"full"``; VB needs ``"full"`` or ``"diag"``).
    loo_max_size : int
        ``"loo"`` runs only where N D J^K (MCVQ) or N k d (mixture) is at most this.
    num_warmup, num_samples : int
        NUTS iterations for ``"loo"`` (one chain).
    progress_bar : bool
        NUTS progress bars.
    vb_options : dict, optional
        Passed to ``fit_vb_mcvq`` / ``fit_vb_mixture`` (``prune_threshold``,
        ``max_iterations``, priors, ...).
    **fit_options
        Passed to ``fit_mcvq`` / ``fit_mixture`` (``max_iterations``,
        ``max_iterations``, ``reg_covar``, ...).

    Returns
    -------
    ModelSelectionResult

    Raises
    ------
    ValueError
        Unknown model or criterion, empty or repeated candidates, K, J or k < 1,
        num_folds outside 2 .. N, bad data or mask, ``mask`` or ``covariance``
        with the wrong model, ``"vb"`` with a spherical mixture.
    TypeError
        No ``rng_key``, candidates of the wrong form.

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 600, 3, 2, separation=8.0)
    >>> result = model_selection(data.x, [2, 3, 4], model="mixture",
    ...                          criteria=("train", "bic"), rng_key=jax.random.key(1))
    >>> result.choice["bic"], result.choice["train"]
    (3, 4)
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}; got {model!r}")
    if rng_key is None:
        raise MissingKeyError("model_selection needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    criteria = _check_criteria(criteria)
    if model == "mixture":
        if mask is not None:
            raise ValueError("mask is for model='mcvq' only (the mixture has no missing data); "
                             "got a mask with model='mixture'")
        covariance = "full" if covariance is None else covariance
        if covariance not in mixture.COVARIANCES:
            raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got "
                             f"{covariance!r}")
        if "vb" in criteria and covariance == "spherical":
            raise ValueError("criterion 'vb' needs covariance 'full' or 'diag' (fit_vb_mixture); "
                             "got 'spherical'")
        x = check_data(x, "x")
        mask = None
    else:
        if covariance is not None:
            raise ValueError(f"covariance is for model='mixture' only; got {covariance!r}")
        x, mask = check_covered(x, mask)
    num, dim = x.shape
    over_complete = _check_over_complete(over_complete, model, num)
    if candidates is None:
        if over_complete is not None:
            candidates = ()
        elif model == "mcvq":
            candidates = tuple((k, j) for k in range(1, 5) for j in range(2, 5))
        else:
            candidates = tuple(range(1, min(6, num) + 1))
    else:
        candidates = _check_candidates(candidates, model, num, dim)
    num_folds = check_positive_int(num_folds, "num_folds")
    if not 2 <= num_folds <= num:
        raise ValueError(f"num_folds must lie in 2 .. N = {num} (the rows of x); got "
                         f"{num_folds}")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    loo_max_size = check_positive_int(loo_max_size, "loo_max_size")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4; got {num_samples}")
    vb_options = dict(vb_options or {})
    if model == "mcvq":
        scorer = mcvq_scores.MCVQScorer(x, mask, num_restarts, fit_options, vb_options)
    else:
        scorer = MixtureScorer(x, covariance, num_restarts, fit_options, vb_options)
    scored = bool(candidates) and bool({"cv", "train", "bic"} & set(criteria))
    if scored:
        scorer.set_candidates(candidates)
    keys = dict(zip(CRITERIA + ("over",), jax.random.split(rng_key, len(CRITERIA) + 1),
                    strict=True))
    values, choice, errors, skipped, notes = {}, {}, {}, {}, []
    vb_sizes = (None,) * len(candidates)
    arviz_compare = None
    if candidates and "vb" in criteria:
        fits = [scorer.vb(c, jax.random.fold_in(keys["vb"], i)) for i, c in enumerate(candidates)]
        values["vb"] = tuple(f[0] for f in fits)
        vb_sizes = tuple(f[1] for f in fits)
        best = int(np.argmax(values["vb"]))
        choice["vb"] = smallest_containing(candidates, vb_sizes[best], model)
    if candidates and "cv" in criteria:
        splits = folds(keys["cv"], num, num_folds)
        pointwise = np.zeros((len(candidates), num))  # held-out log-likelihood per example
        for i, c in enumerate(candidates):
            for f, (tr, te) in enumerate(splits):
                key = jax.random.fold_in(jax.random.fold_in(keys["cv"], i), f)
                pointwise[i, te] = scorer.heldout(c, tr, te, key)
        fold_means = np.stack([pointwise[:, te].mean(axis=1) for _, te in splits], axis=1)
        values["cv"] = tuple(float(v) for v in pointwise.mean(axis=1))
        errors["cv"] = tuple(float(v) for v in np.std(fold_means, axis=1, ddof=1)
                             / math.sqrt(num_folds))
        choice["cv"] = one_se_choice(candidates, pointwise)
    if candidates and {"train", "bic", "loo"} & set(criteria):
        train = [scorer.train(c, jax.random.fold_in(keys["train"], i))
                 for i, c in enumerate(candidates)]
        if "train" in criteria:
            values["train"] = tuple(train)
            choice["train"] = argmax(candidates, values["train"])
        if "bic" in criteria:
            values["bic"] = tuple(t - scorer.num_parameters(c) * math.log(num) / (2 * num)
                                  for t, c in zip(train, candidates, strict=True))
            choice["bic"] = argmax(candidates, values["bic"])
    if candidates and "loo" in criteria:
        elpd, se, data, reasons = [], [], {}, []
        pointwise_loo = np.full((len(candidates), num), np.nan)
        for i, c in enumerate(candidates):
            reason = scorer.loo_reason(c, loo_max_size)
            if reason is not None:
                reasons.append(f"{_name(c)}: {reason}")
                elpd.append(math.nan)
                se.append(math.nan)
                continue
            idata, extra = scorer.loo(c, jax.random.fold_in(keys["loo"], i), num_warmup,
                                      num_samples, progress_bar)
            loo = _psis_loo(idata)
            pointwise_loo[i] = np.asarray(loo.loo_i)
            elpd.append(float(loo.elpd_loo) / num)
            se.append(float(loo.se) / num)
            data[_name(c)] = loo
            pareto = float(np.max(np.asarray(loo.pareto_k)))
            notes.append(f"loo {_name(c)}: largest Pareto k {pareto:.2f}{extra}")
        values["loo"], errors["loo"] = tuple(elpd), tuple(se)
        choice["loo"] = one_se_choice(candidates, pointwise_loo)
        if reasons:
            skipped["loo"] = "model too large for MCMC: " + "; ".join(reasons)
        if len(data) >= 2:
            import arviz as az

            with warnings.catch_warnings():  # arviz's Pareto-k and pandas deprecation notes
                warnings.simplefilter("ignore")
                arviz_compare = az.compare(data, ic="loo")  # over the ELPDData above
    oc = None
    if over_complete is not None:
        bound, size, fit = scorer.vb(over_complete, keys["over"])
        oc = PrunedModel(over_complete, size, bound, fit)
        choice["vb (pruned)"] = size
    notes += scorer.notes(scored)
    values = {c: values[c] for c in CRITERIA if c in values}
    return ModelSelectionResult(model, candidates, values, choice, errors, vb_sizes, oc,
                                arviz_compare, skipped, tuple(notes))


def _psis_loo(idata):
    import arviz as az

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Pareto k is reported in the notes
        return az.loo(idata, pointwise=True)
