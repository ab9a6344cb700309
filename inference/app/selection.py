"""Model selection for every family: VB bound, CV, BIC, AIC, PSIS-LOO, WAIC, evidence.

The "current directions" of the MCVQ slides (Ross and Zemel (2002): VB MCVQ, model
selection) ask to choose the size of a model by the variational lower bound on the
evidence and to compare it with the training likelihood (which does not penalise
complexity) and with cross-validation (expensive). :func:`model_selection` does this
for every family whose plug-in declares a :class:`ppl_models.registry.Selection`:
mixture k, MCVQ (K, J), GVQ number of features n, clipped-Gaussian hidden units P and
PPCA components q. It scores a list of candidates (or, for the VB families, one
over-complete VB model that prunes itself) under these criteria; every value is *per
example, in nats, higher is better* (but for the mixture's YING-YANG criteria, ``"J"``,
``"L_map"``, ``"L_stocha"``, ``"yy_bic"``, ``"yy_aic"``, ``"yy_loo"``: lower is better),
and each family lists the criteria it supports:

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
  ``PCA(n_components="mle")``, which implements the same criterion;
* ``"J"``, ``"L_map"``, ``"L_stocha"``, ``"yy_bic"``, ``"yy_aic"``, ``"yy_loo"``
  (mixture) -- the YING-YANG criteria of Xu (1995): J(k) of k-means (eq. 24), the
  hard-cut free energy of hard-cut EM (eq. 20), minus EM's mean log-likelihood, and
  on the same EM fits 2 N L_stocha + p log N, 2 N L_stocha + 2 p, and minus the
  PSIS-LOO elpd of NUTS (total). *Each keeps its own scale and lower is better*
  (``ModelSelectionResult.direction``); they are computed as
  :mod:`inference.mixture.selection` describes (one fit per mode, candidate and
  restart, ``rng_key`` split per candidate as there), and ``result.details`` keeps
  each one's :class:`inference.mixture.selection.SelectionResult` with its fits. The
  ``yy_`` prefix tells them from ``"bic"``, ``"aic"`` and ``"loo"`` above.
  :func:`inference.mixture.selection.compare_criteria` and
  :func:`~inference.mixture.selection.select_num_components` are wrappers of this
  function that return those results.

Choices. ``"train"``, ``"bic"``, ``"aic"``, ``"evidence"`` and ``"laplace"`` take the
largest value, ``"cv"``, ``"loo"`` and ``"waic"`` the smallest candidate within one
standard error of the best (the SE of the per-example paired difference, as arviz's
``dse``; the one-SE rule), ``"vb"`` the smallest candidate containing what survives
in the best-bound run; ties within ``TIE_TOLERANCE`` go to the smallest candidate
(by K, then J), since a larger model whose extra VQ, state or component stays unused
scores the same. The YING-YANG criteria take the least value (the first of equal
ones), as Xu (1995) and ``compare_criteria`` do, without the candidates whose every
restart collapsed a component (``excluded``).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: VB MCVQ and model selection.
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995.
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

import time

import jax

from inference.app.families import load_families
from inference.app.program_selection import (
    PROGRAM_BAYES_CRITERIA,
    PROGRAM_DEFAULT_CRITERIA,
    is_program_list,
    select_programs,
)
from inference.app.selection_result import ModelSelectionResult, PrunedModel
from inference.app.selection_scoring import (
    CRITERIA,
    EVIDENCE_MAX_SIZE,
    EVIDENCE_OPTIONS,
    KEYED,
    LOO_MAX_SIZE,
    LOWER_IS_BETTER,
    YINGYANG_FITS,
    Progress,
    Scores,
    score_candidates,
)
from ppl_models.validation import MissingKeyError, check_positive_int, check_rng_key

__all__ = ["CRITERIA", "MODELS", "PrunedModel", "ModelSelectionResult", "model_selection",
           "selectable_families", "LOO_MAX_SIZE", "EVIDENCE_MAX_SIZE", "EVIDENCE_OPTIONS",
           "PROGRAM_DEFAULT_CRITERIA", "PROGRAM_BAYES_CRITERIA"]

#: The families selectable when this module was imported (see :func:`selectable_families`).
MODELS = ()


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

    The one entry point of model selection (the mixture's ``compare_criteria`` and
    ``select_num_components`` are wrappers of it, for its YING-YANG criteria). Three
    forms:

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
        The mixture also takes the YING-YANG criteria ``"J"``, ``"L_map"``,
        ``"L_stocha"``, ``"yy_bic"``, ``"yy_aic"``, ``"yy_loo"`` (lower is better).
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
        NUTS iterations for ``"loo"`` and ``"waic"`` (one chain), and ``"yy_loo"``.
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
        Further options of the family's scorer (its ``Selection.options``; the
        mixture's ``"loo_options"``: keyword arguments of
        :func:`inference.mixture.baselines.mixture_loo` for ``"yy_loo"``).
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
    if callable(model) or is_program_list(candidates):
        if isinstance(model, str):
            raise ValueError(f"candidates are programs (callables): leave model out or pass "
                             f"a program; got model={model!r}")
        if over_complete is not None or mask is not None or covariance is not None \
                or options or vb_options:
            raise ValueError("over_complete, mask, covariance, options and vb_options are "
                             "family options; they do not apply to programs")
        return select_programs(
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
    keys = dict(zip(KEYED, jax.random.split(rng_key, len(KEYED)), strict=True))
    keys["evidence"] = jax.random.fold_in(rng_key, len(KEYED))
    keys["yingyang"] = rng_key  # as compare_criteria splits it (same key, same result)
    n_cand = len(candidates)
    units = sum({"vb": n_cand, "cv": n_cand * num_folds, "loo": n_cand, "evidence": n_cand,
                 "laplace": n_cand}.get(c, 0) for c in criteria)
    units += n_cand if {"train", "bic", "aic"} & set(criteria) else 0
    units += n_cand * len({YINGYANG_FITS[c] for c in criteria if c in LOWER_IS_BETTER})
    units += over_complete is not None
    bar = Progress(progress_bar, units)
    out = Scores(candidates)
    try:
        if candidates:
            score_candidates(out, scorer, spec, candidates, criteria, keys, bar, num, num_folds,
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
                                out.seconds, spec.label, out.excluded, out.no_choice,
                                out.details)
