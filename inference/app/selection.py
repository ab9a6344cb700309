"""Model selection for every family: VB bound, CV, BIC, AIC, PSIS-LOO, WAIC, evidence.

The "current directions" of the MCVQ slides (Ross and Zemel (2002): VB MCVQ, model
selection) ask to choose the size of a model by the variational lower bound on the
evidence and to compare it with the training likelihood (which does not penalise
complexity) and with cross-validation (expensive). :func:`model_selection` does this
for every family whose plug-in declares a :class:`ppl_models.registry.Selection`:
mixture k, MCVQ (K, J), GVQ number of features n, clipped-Gaussian hidden units P and
PPCA components q. It scores a list of candidates (or, for the VB families, one
over-complete VB model that prunes itself) under these criteria; every value is *per
example, in nats, higher is better*, and each family lists the criteria it supports:

* ``"vb"`` -- the VB lower bound L(Q) / N (``fit_vb_mcvq`` / ``fit_vb_mixture``)
  started at the candidate size (best of ``num_restarts`` runs; Corduneanu &
  Bishop 2001). With type-II ML weights a larger start contains every smaller
  model (a pruned VQ, state or component has weight 0 and KL 0), and a run
  prunes what the bound does not support, so the *choice* is the smallest
  candidate that contains the structure surviving in the run with the highest
  bound (its surviving size is reported per candidate, ``vb_sizes``);
* ``"cv"`` -- ``num_folds``-fold cross-validated held-out log-likelihood per
  example (every example held out once; SE over the fold means), fitting the
  family's fast fit on the other folds (MCVQ's predictive: exact when every
  candidate has J^K K <= 4096, else its variational bound; ``notes`` says which);
* ``"train"`` -- the same score on the training data of a full-data fit (it
  grows with the size of the model: no penalty for complexity);
* ``"bic"`` -- (train total log-likelihood - (p / 2) log N) / N (Schwarz 1978) and
  ``"aic"`` -- (train total log-likelihood - p) / N (Akaike 1974), p the family's
  count of free parameters;
* ``"loo"`` and ``"waic"`` -- PSIS-LOO elpd / N (Vehtari et al. 2017) and WAIC's
  elpd / N (Watanabe 2010), both from arviz (``az.loo``, ``az.waic``) on the same
  NUTS draws of the program and their pointwise log-likelihood; run only where the
  model is small enough (``loo_max_size``), otherwise skipped with the reason in
  ``skipped``. ``result.arviz_compare`` is ``arviz.compare`` over the candidates'
  PSIS-LOO;
* ``"evidence"`` -- the reference: log p(x | candidate) / N, the log marginal
  likelihood of the candidate's Bayesian program (its priors, discrete sites summed
  out by enumeration) by adaptive tempered SMC
  (:func:`inference.program.evidence.log_evidence`), with the standard error of
  independent repeats; only where the family's program allows it
  (``evidence_max_size``);
* ``"laplace"`` (PPCA) -- Minka's Laplace approximation of the evidence for the
  dimensionality of PCA (NIPS 2000), and ``"pca_mle"`` (PPCA) -- scikit-learn's
  ``PCA(n_components="mle")``, which implements the same criterion.

Choices. ``"train"``, ``"bic"``, ``"aic"``, ``"evidence"`` and ``"laplace"`` take the
largest value, ``"cv"``, ``"loo"`` and ``"waic"`` the smallest candidate within one
standard error of the best (the SE of the per-example paired difference, as arviz's
``dse``; the one-SE rule), ``"vb"`` the smallest candidate containing what survives
in the best-bound run; ties within ``TIE_TOLERANCE`` go to the smallest candidate
(by K, then J), since a larger model whose extra VQ, state or component stays unused
scores the same.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: VB MCVQ and model selection.
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection for
mixture distributions", AISTATS. Schwarz, G. (1978), "Estimating the dimension of a
model", Annals of Statistics 6. Akaike, H. (1974), "A new look at the statistical
model identification", IEEE Transactions on Automatic Control 19. Watanabe, S. (2010),
"Asymptotic equivalence of Bayes cross validation and widely applicable information
criterion in singular learning theory", JMLR 11. Vehtari, A., Gelman, A. and Gabry,
J. (2017), "Practical Bayesian model evaluation using leave-one-out cross-validation
and WAIC", Statistics and Computing 27. Minka, T. P. (2001), "Automatic choice of
dimensionality for PCA", Advances in Neural Information Processing Systems 13.
"""

from __future__ import annotations

import math
import time
import warnings

import jax
import numpy as np

from inference.app.families import load_families
from inference.app.selection_checks import chains_reason, evidence_gap_reason, pareto_reason
from inference.app.selection_result import ModelSelectionResult, PrunedModel, candidate_name
from inference.app.selection_rules import argmax, folds, one_se_choice
from ppl_models.validation import MissingKeyError, check_positive_int, check_rng_key

__all__ = ["CRITERIA", "MODELS", "PrunedModel", "ModelSelectionResult", "model_selection",
           "selectable_families"]

#: Every criterion, in table order (each family supports a subset).
CRITERIA = ("vb", "cv", "train", "bic", "aic", "loo", "waic", "evidence", "laplace",
            "pca_mle")
#: The families selectable when this module was imported (see :func:`selectable_families`).
MODELS = ()
#: Default largest N D J^K (MCVQ) or N k d (mixture) for "loo" / "waic": one log-density
#: evaluation of NUTS then holds at most this many numbers (2 MiB in float32),
#: which keeps a chain of ~1000 iterations within minutes on 2 CPU cores.
LOO_MAX_SIZE = 1 << 19
#: Default largest problem for the reference evidence (each family says what it
#: measures: e.g. N k d for the mixture, N d 2^n for GVQ).
EVIDENCE_MAX_SIZE = 1 << 18
#: Default settings of the reference evidence (``log_evidence``).
EVIDENCE_OPTIONS = {"num_particles": 1000, "num_repeats": 4}
#: The criteria (and the over-complete run) that draw keys split from rng_key, in order.
_KEYED = ("vb", "cv", "train", "bic", "loo", "over")


def selectable_families() -> dict:
    """Family name -> its :class:`ppl_models.registry.Selection`, for every registered
    family that declares one."""
    return {name: fam.selection for name, fam in load_families().items()
            if fam.selection is not None}


def _check_criteria(criteria, spec, model):
    if isinstance(criteria, str):
        criteria = (criteria,)
    criteria = tuple(criteria)
    unknown = [c for c in criteria if c not in spec.criteria]
    if unknown or not criteria or len(set(criteria)) != len(criteria):
        raise ValueError(f"criteria must be distinct names among {spec.criteria} (those of "
                         f"model={model!r}); got {list(criteria)!r}")
    return tuple(c for c in CRITERIA if c in criteria)


def _check_over_complete(over_complete, model, num):
    if over_complete is None:
        return None
    if model == "mcvq":
        if not isinstance(over_complete, tuple | list) or len(over_complete) != 2:
            raise TypeError("over_complete for model='mcvq' must be a (K_max, J_max) pair; got "
                            f"{over_complete!r}")
        return (check_positive_int(over_complete[0], "over_complete K_max"),
                check_positive_int(over_complete[1], "over_complete J_max"))
    if model != "mixture":
        raise ValueError(f"over_complete applies to the VB families 'mixture' and 'mcvq'; got "
                         f"model={model!r}")
    return check_positive_int(over_complete, "over_complete", maximum=num,
                              why=" (the number of examples, rows of x)")


class _Progress:
    """A tqdm bar over the (criterion, candidate, fold) units of work, or nothing."""

    def __init__(self, show, total):
        self.bar = None
        if show and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="model selection", unit="fit")

    def step(self, what):
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def model_selection(x, candidates=None, *, model=None, criteria=None,
                    over_complete=None, mask=None, covariance: str | None = None, rng_key,
                    num_folds: int = 5, num_restarts: int = 3,
                    loo_max_size: int = LOO_MAX_SIZE, num_warmup: int = 500,
                    num_samples: int = 500, evidence_options=None,
                    evidence_max_size: int = EVIDENCE_MAX_SIZE, progress_bar: bool = False,
                    vb_options=None, options=None, model_args=(), model_kwargs=None,
                    **fit_options) -> ModelSelectionResult:
    """Score a family's candidate sizes, or the user's programs, by VB, CV, BIC, AIC, LOO,
    WAIC and the evidence.

    Three forms, one entry point:

    * ``model_selection(x, [2, 3, 4], model="mixture")`` -- a family's sizes;
    * ``model_selection(x, [program_a, program_b])`` -- the user's NumPyro programs,
      each called ``program(x, *model_args, **model_kwargs)``
      (:mod:`inference.app.program_selection` says what a program must look like and
      how each criterion is computed for it);
    * ``model_selection(x, [2, 3, 4], model=program)`` -- one program of a size, called
      ``program(x, candidate, *model_args, **model_kwargs)`` for every candidate.

    Parameters
    ----------
    x : array (N, D)
        Data (MCVQ: entries where ``mask`` is False may hold anything).
    candidates : sequence, optional
        The candidate sizes: (K, J) pairs for ``model="mcvq"`` (default K = 1..4
        times J = 2..4), integers for the other families (their defaults: mixture k =
        1..6, GVQ n, clipped P and PPCA q from small to the data's limit). With
        ``over_complete`` and no candidates, only the over-complete model is run.
        Or NumPyro programs (callables), named by their ``__name__`` (repeats get
        ``#2``, ``#3``).
    model : str or callable, optional
        The family: ``"mixture"``, ``"mcvq"``, ``"gvq"``, ``"clipped"``, ``"ppca"``
        (every family whose plug-in declares a selection; :func:`selectable_families`);
        default ``"mcvq"`` for sizes. Or a program taking the candidate size as its
        second argument. Leave it out when the candidates are programs.
    criteria : sequence of str, optional
        Among the family's criteria (module docstring); default the family's
        ``default_criteria`` (MCVQ, mixture: ``"vb", "cv", "train", "bic", "loo"``).
        For programs: among ``"cv", "train", "bic", "aic", "loo", "waic",
        "evidence"``; default :data:`PROGRAM_DEFAULT_CRITERIA` (``"cv", "bic",
        "aic"``) and, when every candidate has priors (sample sites),
        :data:`PROGRAM_BAYES_CRITERIA` too (``"loo", "waic", "evidence"``).
    over_complete : (K_max, J_max) or int, optional
        MCVQ and mixture: also run VB from this large model (best of
        ``num_restarts`` runs) and report what survives as ``choice["vb (pruned)"]``.
    mask : bool array (N, D), optional
        MCVQ only: True where x is observed.
    covariance : {"full", "diag", "spherical"}, optional
        Mixture only (default ``"full"``; VB needs ``"full"`` or ``"diag"``).
    rng_key : jax.random key
        Split into the folds, the fits of every criterion and candidate, the chains
        and the SMC runs; the result is a deterministic function of it.
    num_folds : int
        2 .. N folds for ``"cv"``.
    num_restarts : int
        Starts per fit (best by the family's objective) and VB runs per candidate.
    loo_max_size : int
        ``"loo"`` and ``"waic"`` run only where the family's size measure (N D J^K
        for MCVQ, N k d for the mixture) is at most this.
    num_warmup, num_samples : int
        NUTS iterations for ``"loo"`` and ``"waic"`` (one chain).
    evidence_options : dict, optional
        Passed to :func:`inference.program.evidence.log_evidence` (default
        ``EVIDENCE_OPTIONS``: 1000 particles, 4 repeats).
    evidence_max_size : int
        ``"evidence"`` runs only where the family's size measure is at most this.
    progress_bar : bool
        A tqdm bar over the fits (and NUTS's own bars).
    vb_options : dict, optional
        Passed to ``fit_vb_mcvq`` / ``fit_vb_mixture``.
    options : dict, optional
        Further options of the family's scorer (its ``Selection.options``).
    model_args, model_kwargs : tuple, dict
        Programs only: further arguments of every program (not split into folds: only
        x is; per-example inputs belong in x).
    **fit_options
        Passed to the family's fit (``fit_mcvq``, ``fit_mixture``, ``fit_gvq``, ...;
        for programs :func:`inference.fit_em`: ``max_iterations``, ``tol``, ...).

    Returns
    -------
    ModelSelectionResult
        A candidate whose value is degenerate or unreliable (a collapsed fit, chains
        that did not mix, Pareto k > 0.7, an evidence decided within its error) is
        excluded from that criterion's choice and listed in ``excluded``; a criterion
        without a trustworthy choice says why in ``no_choice``
        (:mod:`inference.app.selection_checks`).

    Raises
    ------
    ValueError
        Unknown model or criterion (for the family), empty or repeated candidates,
        sizes outside the family's limits, num_folds outside 2 .. N, bad data or
        mask, ``mask`` or ``covariance`` with the wrong model, ``"vb"`` with a
        spherical mixture. For programs, naming the candidate: one that fails to
        trace, candidates observing data of different shapes, a Bayesian criterion
        asked of a program without priors, a per-example continuous latent site where
        the likelihood is maximised.
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
    from inference.app.program_selection import is_program_list

    if callable(model) or is_program_list(candidates):
        if isinstance(model, str):
            raise ValueError(f"candidates are programs (callables): leave model out or pass "
                             f"a program; got model={model!r}")
        if over_complete is not None or mask is not None or covariance is not None \
                or options or vb_options:
            raise ValueError("over_complete, mask, covariance, options and vb_options are "
                             "family options; they do not apply to programs")
        return _program_selection(
            x, candidates, model, criteria, rng_key, num_folds, num_restarts, num_warmup,
            num_samples, evidence_options, progress_bar, model_args, model_kwargs,
            fit_options)
    if model_args != () or model_kwargs is not None:
        raise ValueError("model_args and model_kwargs apply to programs only; got them with "
                         f"model={model!r}")
    model = "mcvq" if model is None else model
    specs = selectable_families()
    if model not in specs:
        raise ValueError(f"model must be one of {tuple(specs)} or a program; got {model!r}")
    spec = specs[model]
    if rng_key is None:
        raise MissingKeyError("model_selection needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    criteria = _check_criteria(spec.default_criteria if criteria is None else criteria, spec,
                               model)
    family_options = dict(options or {})
    for name, value in (("mask", mask), ("covariance", covariance)):
        if value is None:
            continue
        if name not in spec.options:
            owner = [m for m, s in specs.items() if name in s.options]
            raise ValueError(f"{name} is for model={owner[0]!r} only; got {name} with "
                             f"model={model!r}")
        family_options[name] = value
    unknown = set(family_options) - set(spec.options)
    if unknown:
        raise ValueError(f"options {sorted(unknown)} are not options of model={model!r} "
                         f"(it takes {list(spec.options)})")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    scorer = spec.scorer(x, num_restarts=num_restarts, fit_options=fit_options,
                         vb_options=dict(vb_options or {}), **family_options)
    scorer.check_criteria(criteria)
    num = scorer.num
    over_complete = _check_over_complete(over_complete, model, num)
    if candidates is None and over_complete is not None:
        candidates = ()
    else:
        candidates = spec.candidates(candidates, num, scorer.dim)
    num_folds = check_positive_int(num_folds, "num_folds")
    if not 2 <= num_folds <= num:
        raise ValueError(f"num_folds must lie in 2 .. N = {num} (the rows of x); got "
                         f"{num_folds}")
    loo_max_size = check_positive_int(loo_max_size, "loo_max_size")
    evidence_max_size = check_positive_int(evidence_max_size, "evidence_max_size")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4; got {num_samples}")
    evidence_options = {**EVIDENCE_OPTIONS, **dict(evidence_options or {})}
    scored = bool(candidates) and bool({"cv", "train", "bic", "aic"} & set(criteria))
    if candidates:
        scorer.set_candidates(candidates)
    # The first five criteria's keys are those of earlier versions (same key, same result).
    keys = dict(zip(_KEYED, jax.random.split(rng_key, len(_KEYED)), strict=True))
    keys["evidence"] = jax.random.fold_in(rng_key, len(_KEYED))
    n_cand = len(candidates)
    units = sum({"vb": n_cand, "cv": n_cand * num_folds, "loo": n_cand, "evidence": n_cand,
                 "laplace": n_cand}.get(c, 0) for c in criteria)
    units += n_cand if {"train", "bic", "aic"} & set(criteria) else 0
    units += over_complete is not None
    bar = _Progress(progress_bar, units)
    out = _Scores(candidates)
    try:
        if candidates:
            _score(out, scorer, spec, candidates, criteria, keys, bar, num, num_folds,
                   loo_max_size, (num_warmup, num_samples, progress_bar), evidence_options,
                   evidence_max_size)
        oc = None
        if over_complete is not None:
            t0 = time.perf_counter()
            bound, size, fit = scorer.vb(over_complete, keys["over"])
            bar.step("vb (pruned)")
            oc = PrunedModel(over_complete, size, bound, fit)
            out.choice["vb (pruned)"] = size
            out.seconds["vb (pruned)"] = time.perf_counter() - t0
    finally:
        bar.close()
    notes = out.notes + list(scorer.notes(scored))
    values = {c: out.values[c] for c in CRITERIA if c in out.values}
    return ModelSelectionResult(model, candidates, values, out.choice, out.errors,
                                out.vb_sizes, oc, out.arviz_compare, out.skipped, tuple(notes),
                                out.seconds, spec.label, out.excluded, out.no_choice)


#: Default criteria for program candidates.
PROGRAM_DEFAULT_CRITERIA = ("cv", "bic", "aic")
#: Added to the defaults when every program candidate has priors.
PROGRAM_BAYES_CRITERIA = ("loo", "waic", "evidence")


def _program_selection(x, candidates, model, criteria, rng_key, num_folds, num_restarts,
                       num_warmup, num_samples, evidence_options, progress_bar, model_args,
                       model_kwargs, fit_options):
    """:func:`model_selection` between programs (the user's, or one program's sizes)."""
    import functools

    from inference.app.program_selection import (
        PROGRAM_CRITERIA,
        ProgramScorer,
        program_names,
    )

    if rng_key is None:
        raise MissingKeyError("model_selection needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    if isinstance(model_args, dict) or not isinstance(model_args, tuple | list):
        raise TypeError(f"model_args must be a tuple of the programs' further positional "
                        f"arguments; got {type(model_args).__name__}")
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise TypeError(f"model_kwargs must be a dict; got {type(model_kwargs).__name__}")
    model_args, model_kwargs = tuple(model_args), dict(model_kwargs or {})
    if model is None:
        programs = list(candidates)
        names = program_names(programs)
        candidates = names
        bound = {n: _bind(p, (), model_args, model_kwargs) for n, p in zip(names, programs,
                                                                           strict=True)}
        shown, label, family = {}, "program", "programs"
    else:
        if candidates is None:
            raise ValueError("candidates: with model=<program>, give the sizes to pass it")
        if isinstance(candidates, str | bytes) or not hasattr(candidates, "__iter__"):
            raise TypeError(f"candidates must be a sequence of sizes; got {candidates!r}")
        candidates = tuple(candidates)
        if not candidates or len(set(candidates)) != len(candidates):
            raise ValueError(f"candidates must be distinct and not empty; got {candidates!r}")
        base = model
        while isinstance(base, functools.partial):
            base = base.func
        family = getattr(base, "__name__", "program")
        bound = {c: _bind(model, (c,), model_args, model_kwargs) for c in candidates}
        shown = {c: f"{family}({candidate_name(c)})" for c in candidates}
        label = "size"
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    scorer = ProgramScorer(x, bound, rng_key=jax.random.fold_in(rng_key, 1 << 20),
                           names=shown, num_restarts=num_restarts, fit_options=fit_options)
    if criteria is None:
        criteria = PROGRAM_DEFAULT_CRITERIA
        if all(c.bayesian for c in scorer.candidates.values()):
            criteria = criteria + PROGRAM_BAYES_CRITERIA
    if isinstance(criteria, str):
        criteria = (criteria,)
    criteria = tuple(criteria)
    unknown = [c for c in criteria if c not in PROGRAM_CRITERIA]
    if unknown or not criteria or len(set(criteria)) != len(criteria):
        raise ValueError(f"criteria must be distinct names among {PROGRAM_CRITERIA} (those of "
                         f"programs); got {list(criteria)!r}")
    criteria = tuple(c for c in CRITERIA if c in criteria)
    scorer.check_criteria(criteria)
    num = scorer.num
    num_folds = check_positive_int(num_folds, "num_folds")
    if not 2 <= num_folds <= num:
        raise ValueError(f"num_folds must lie in 2 .. N = {num} (the rows of x); got "
                         f"{num_folds}")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4; got {num_samples}")
    evidence_options = {**EVIDENCE_OPTIONS, **dict(evidence_options or {})}
    keys = dict(zip(_KEYED, jax.random.split(rng_key, len(_KEYED)), strict=True))
    keys["evidence"] = jax.random.fold_in(rng_key, len(_KEYED))
    n_cand = len(candidates)
    units = sum({"cv": n_cand * num_folds, "loo": n_cand, "evidence": n_cand}.get(c, 0)
                for c in criteria)
    units += n_cand if {"train", "bic", "aic"} & set(criteria) else 0
    bar = _Progress(progress_bar, units)
    out = _Scores(candidates)
    try:
        _score(out, scorer, None, candidates, criteria, keys, bar, num, num_folds,
               LOO_MAX_SIZE, (num_warmup, num_samples, progress_bar), evidence_options,
               EVIDENCE_MAX_SIZE)
    finally:
        bar.close()
    scored = bool({"cv", "train", "bic", "aic"} & set(criteria))
    notes = out.notes + list(scorer.notes(scored))
    values = {c: out.values[c] for c in CRITERIA if c in out.values}
    return ModelSelectionResult(family, candidates, values, out.choice, out.errors,
                                out.vb_sizes, None, out.arviz_compare, out.skipped,
                                tuple(notes), out.seconds, label, out.excluded, out.no_choice)


def _bind(program, leading, model_args, model_kwargs):
    """``program(x, *leading, *model_args, **model_kwargs)`` as a program of x alone."""
    if not leading and not model_args and not model_kwargs:
        return program

    def bound(x):
        return program(x, *leading, *model_args, **model_kwargs)

    bound.__name__ = getattr(program, "__name__", "program")
    return bound


class _Scores:
    """What :func:`_score` fills in."""

    def __init__(self, candidates):
        self.values, self.choice, self.errors, self.skipped = {}, {}, {}, {}
        self.seconds, self.notes = {}, []
        self.excluded, self.no_choice = {}, {}
        self.vb_sizes = (None,) * len(candidates)
        self.arviz_compare = None


def _choose(out, criterion, candidates, scores, reasons, order, *, pointwise=False):
    """``criterion``'s choice from ``scores`` (values, or pointwise rows for the one-SE
    rule) without the candidates that ``reasons`` (index -> why) exclude; every
    exclusion recorded, and "no choice" where nothing trustworthy is left."""
    scores = np.array(scores, dtype=float)
    if reasons:
        out.excluded[criterion] = {candidate_name(candidates[i]): why
                                   for i, why in sorted(reasons.items())}
        for i in reasons:
            scores[i] = np.nan
    finite = ~np.any(np.isnan(scores), axis=1) if pointwise else np.isfinite(scores)
    chosen = (one_se_choice(candidates, scores, order) if pointwise
              else argmax(candidates, scores, order))
    if reasons and not finite.any():
        out.no_choice[criterion] = ("every candidate's value is excluded (degenerate or "
                                    "unreliable; see excluded)")
        chosen = None
    out.choice[criterion] = chosen
    return chosen


def _note_excluded_above(out, criterion, candidates, values):
    """A note where an excluded candidate scored above the choice."""
    chosen = out.choice.get(criterion)
    if chosen is None or criterion not in out.excluded:
        return
    best = values[list(candidates).index(chosen)]
    above = [candidate_name(c) for c, v in zip(candidates, values, strict=True)
             if candidate_name(c) in out.excluded[criterion] and np.isfinite(v) and v > best]
    if above:
        out.notes.append(f"{criterion}: excluded {above} scored above the choice "
                         f"{candidate_name(chosen)}")


def _score(out, scorer, spec, candidates, criteria, keys, bar, num, num_folds, loo_max_size,
           nuts, evidence_options, evidence_max_size):
    """Every criterion of every candidate, into ``out``."""
    clock = time.perf_counter
    order = scorer.order(candidates)
    if "vb" in criteria:
        t0 = clock()
        fits = []
        for i, c in enumerate(candidates):
            fits.append(scorer.vb(c, jax.random.fold_in(keys["vb"], i)))
            bar.step(f"vb {candidate_name(c)}")
        out.values["vb"] = tuple(f[0] for f in fits)
        out.vb_sizes = tuple(f[1] for f in fits)
        best = int(np.argmax(out.values["vb"]))
        out.choice["vb"] = spec.contains(candidates, out.vb_sizes[best])
        out.seconds["vb"] = clock() - t0
    if "cv" in criteria:
        t0 = clock()
        splits = folds(keys["cv"], num, num_folds)
        pointwise = np.zeros((len(candidates), num))  # held-out log-likelihood per example
        for i, c in enumerate(candidates):
            for f, (tr, te) in enumerate(splits):
                key = jax.random.fold_in(jax.random.fold_in(keys["cv"], i), f)
                pointwise[i, te] = scorer.heldout(c, tr, te, key)
                bar.step(f"cv {candidate_name(c)} fold {f + 1}")
        fold_means = np.stack([pointwise[:, te].mean(axis=1) for _, te in splits], axis=1)
        out.values["cv"] = tuple(float(v) for v in pointwise.mean(axis=1))
        out.errors["cv"] = tuple(float(v) for v in np.std(fold_means, axis=1, ddof=1)
                                 / math.sqrt(num_folds))
        reasons = {i: why for i, c in enumerate(candidates)
                   if (why := scorer.degenerate(c, "cv")) is not None}
        _choose(out, "cv", candidates, pointwise, reasons, order, pointwise=True)
        _note_excluded_above(out, "cv", candidates, out.values["cv"])
        out.seconds["cv"] = clock() - t0
    if {"train", "bic", "aic", "loo", "waic"} & set(criteria):
        t0 = clock()
        train = []
        for i, c in enumerate(candidates):
            train.append(scorer.train(c, jax.random.fold_in(keys["train"], i)))
            bar.step(f"fit {candidate_name(c)}")
        seconds = clock() - t0
        reasons = {i: why for i, c in enumerate(candidates)
                   if (why := scorer.degenerate(c, "train")) is not None}
        penalties = {"bic": math.log(num) / (2 * num), "aic": 1.0 / num}
        for c in ("train", "bic", "aic"):
            if c not in criteria:
                continue
            if c == "train":
                out.values[c] = tuple(train)
            else:
                out.values[c] = tuple(t - scorer.num_parameters(cand) * penalties[c]
                                      for t, cand in zip(train, candidates, strict=True))
            _choose(out, c, candidates, out.values[c], reasons, order)
            _note_excluded_above(out, c, candidates, out.values[c])
            out.seconds[c] = seconds
    if {"loo", "waic"} & set(criteria):
        _loo_and_waic(out, scorer, candidates, criteria, keys["loo"], bar, num, loo_max_size,
                      nuts, order)
    if "evidence" in criteria:
        _evidence(out, scorer, candidates, keys["evidence"], bar, num, evidence_options,
                  evidence_max_size, order)
    if "laplace" in criteria:
        t0 = clock()
        out.values["laplace"] = tuple(float(scorer.laplace(c)) for c in candidates)
        for c in candidates:
            bar.step(f"laplace {candidate_name(c)}")
        out.choice["laplace"] = argmax(candidates, out.values["laplace"], order)
        out.seconds["laplace"] = clock() - t0
    if "pca_mle" in criteria:
        t0 = clock()
        values, chosen = scorer.pca_mle(candidates)
        out.values["pca_mle"] = tuple(float(v) for v in values)
        out.choice["pca_mle"] = chosen
        out.seconds["pca_mle"] = clock() - t0


def _loo_and_waic(out, scorer, candidates, criteria, key, bar, num, loo_max_size, nuts,
                  order=None):
    """PSIS-LOO and WAIC from one NUTS run per candidate (arviz)."""
    import arviz as az

    num_warmup, num_samples, progress_bar = nuts
    t0 = time.perf_counter()
    elpd = {c: np.full(len(candidates), np.nan) for c in ("loo", "waic")}
    se = {c: np.full(len(candidates), np.nan) for c in ("loo", "waic")}
    pointwise = {c: np.full((len(candidates), num), np.nan) for c in ("loo", "waic")}
    data, reasons = {}, []
    excluded = {"loo": {}, "waic": {}}
    for i, c in enumerate(candidates):
        reason = scorer.loo_reason(c, loo_max_size)
        bar.step(f"nuts {candidate_name(c)}")
        if reason is not None:
            reasons.append(f"{candidate_name(c)}: {reason}")
            continue
        idata, extra = scorer.loo(c, jax.random.fold_in(key, i), num_warmup, num_samples,
                                  progress_bar)
        with warnings.catch_warnings():  # Pareto k and WAIC's variance warning: in the notes
            warnings.simplefilter("ignore")
            loo = az.loo(idata, pointwise=True)
            waic = az.waic(idata, pointwise=True)
        for name, res, field, pw in (("loo", loo, "elpd_loo", "loo_i"),
                                     ("waic", waic, "elpd_waic", "waic_i")):
            elpd[name][i] = float(res[field]) / num
            se[name][i] = float(res.se) / num
            pointwise[name][i] = np.asarray(res[pw])
        data[candidate_name(c)] = loo
        mixing = chains_reason(idata)
        tail = pareto_reason(loo)
        if mixing is not None:
            excluded["loo"][i] = excluded["waic"][i] = mixing
        if tail is not None:
            excluded["loo"][i] = tail if mixing is None else f"{mixing}; {tail}"
        pareto = float(np.max(np.asarray(loo.pareto_k)))
        out.notes.append(f"loo {candidate_name(c)}: largest Pareto k {pareto:.2f}"
                         f"{', WAIC variance warning' if waic.warning else ''}{extra}")
    seconds = time.perf_counter() - t0
    for name in ("loo", "waic"):
        if name in criteria:
            out.values[name] = tuple(float(v) for v in elpd[name])
            out.errors[name] = tuple(float(v) for v in se[name])
            _choose(out, name, candidates, pointwise[name], excluded[name], order,
                    pointwise=True)
            _note_excluded_above(out, name, candidates, out.values[name])
            out.seconds[name] = seconds
            if reasons:
                out.skipped[name] = "model too large for MCMC: " + "; ".join(reasons)
    if "loo" in criteria and len(data) >= 2:
        with warnings.catch_warnings():  # arviz's Pareto-k and pandas deprecation notes
            warnings.simplefilter("ignore")
            out.arviz_compare = az.compare(data, ic="loo")  # over the ELPDData above


def _evidence(out, scorer, candidates, key, bar, num, options, limit, order=None):
    """The reference log evidence of every candidate's program, per example."""
    t0 = time.perf_counter()
    values = np.full(len(candidates), np.nan)
    errors = np.full(len(candidates), np.nan)
    reasons, steps, excluded = [], [], {}
    for i, c in enumerate(candidates):
        reason = scorer.evidence_reason(c, limit)
        bar.step(f"evidence {candidate_name(c)}")
        if reason is not None:
            reasons.append(f"{candidate_name(c)}: {reason}")
            continue
        result = scorer.evidence(c, jax.random.fold_in(key, i), options)
        values[i] = result.log_evidence / num
        errors[i] = result.standard_error / num
        if not (result.converged and np.isfinite(values[i]) and np.isfinite(errors[i])):
            excluded[i] = ("tempered SMC did not converge (a run short of temperature 1, or "
                           "a non-finite estimate or standard error)")
        steps.append(f"{candidate_name(c)} {result.num_steps.min()}-{result.num_steps.max()}"
                     + ("" if result.converged else " (not converged)"))
    out.values["evidence"] = tuple(float(v) for v in values)
    out.errors["evidence"] = tuple(float(v) for v in errors)
    kept = values.copy()
    kept[list(excluded)] = np.nan
    gap, pair = evidence_gap_reason(kept, errors, [candidate_name(c) for c in candidates],
                                    num)
    for i in pair:
        excluded[i] = "standard error exceeds the gap it decides: " + gap
    _choose(out, "evidence", candidates, values, excluded, order)
    if gap is not None:
        out.choice["evidence"] = None
        out.no_choice["evidence"] = gap
    _note_excluded_above(out, "evidence", candidates, out.values["evidence"])
    out.seconds["evidence"] = time.perf_counter() - t0
    if reasons:
        out.skipped["evidence"] = "too large for the reference evidence: " + "; ".join(reasons)
    if steps:
        out.notes.append(f"evidence: adaptive tempered SMC ({options.get('move', 'hmc')} "
                         f"moves), {options['num_particles']} particles x "
                         f"{options['num_repeats']} repeats; tempering steps "
                         + ", ".join(steps))
