"""Model selection between the user's own NumPyro programs: :class:`ProgramScorer`.

``inference.model_selection(x, candidates=[program_a, program_b, ...])`` compares
programs, not the sizes of a family. Every candidate is a NumPyro program called as
``program(x, *model_args, **model_kwargs)`` (the same extra arguments for all), whose
observed sites are the data x, examples along axis 0 (the outermost plate), and whose
hidden states are discrete ``Bernoulli`` / ``Categorical`` sites inside that plate
(summed out by enumeration everywhere). Its parameters are either

* ``numpyro.param`` sites -- a likelihood-only program: the criteria that maximise the
  likelihood (``"train"``, ``"bic"``, ``"aic"``, ``"cv"``) apply; or
* continuous ``numpyro.sample`` sites with priors, outside the example plate -- a
  Bayesian program: every criterion applies. For the maximum-likelihood criteria each
  such site is turned into a ``numpyro.param`` site of the same name, constrained to
  its prior's support and started at a draw from the prior; its prior term is left
  out (the maximised quantity is the likelihood, as BIC and AIC need). For
  ``"loo"``, ``"waic"`` and ``"evidence"`` the program is used as written.

A Bayesian criterion asked of a likelihood-only program raises ``ValueError`` naming the
candidate (the evidence and the posterior need priors; add them as sample sites). A
continuous latent site *inside* the example plate (a per-example continuous latent,
as in factor analysis) cannot be maximised over by EM and raises for the
maximum-likelihood criteria.

How each criterion is computed for a program:

* maximum likelihood: :func:`inference.fit_em` with the soft (exact) E-step, the best of
  ``num_restarts`` restarts; a program without discrete sites is fitted by its M-step
  alone (L-BFGS on the log-likelihood: the MAP of the parameter sites, which carry no
  prior);
* p (BIC, AIC): the total size of the unconstrained parameter sites (a simplex of k
  weights counts k - 1, a d x d Cholesky factor d (d + 1) / 2);
* held-out log-likelihood (``"cv"``): per held-out example, log p(x_n | fitted
  parameters) with the discrete sites summed out, by
  :func:`inference.engine.inference_data.pointwise_log_likelihood`;
* ``"loo"`` / ``"waic"``: one NUTS chain (:func:`inference.engine.mcmc.run_nuts`) of the
  program with its discrete sites enumerated, its pointwise log-likelihood, arviz;
* ``"evidence"``: :func:`inference.program.evidence.log_evidence` of the program.

Candidates are named by their function's ``__name__`` (``"<lambda>"`` and repeats get a
suffix ``#2``, ``#3``); ties go to the candidate with fewer parameters, then to the one
listed first.

References
----------
A. P. Dempster, N. M. Laird and D. B. Rubin, "Maximum likelihood from incomplete data via
the EM algorithm", Journal of the Royal Statistical Society B 39(1), 1977. G. Schwarz,
"Estimating the dimension of a model", Annals of Statistics 6, 1978. H. Akaike, "A new
look at the statistical model identification", IEEE Transactions on Automatic Control
19, 1974.
"""

from __future__ import annotations

import functools
import warnings

import jax
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.primitives import Messenger

from inference.app.selection_checks import params_reason
from inference.app.selection_result import ModelSelectionResult, candidate_name
from inference.app.selection_scoring import (
    CRITERIA,
    EVIDENCE_MAX_SIZE,
    EVIDENCE_OPTIONS,
    KEYED,
    LOO_MAX_SIZE,
    Progress,
    Scores,
    score_candidates,
)
from inference.engine.selection import Scorer
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive_int, check_rng_key

__all__ = ["ProgramScorer", "program_names", "is_program_list", "select_programs", "bind",
           "ML_CRITERIA", "BAYES_CRITERIA", "PROGRAM_CRITERIA", "PROGRAM_DEFAULT_CRITERIA",
           "PROGRAM_BAYES_CRITERIA"]

#: The criteria that maximise the likelihood of the parameters.
ML_CRITERIA = ("cv", "train", "bic", "aic")
#: The criteria that need the program's priors.
BAYES_CRITERIA = ("loo", "waic", "evidence")
#: Every criterion a program candidate supports.
PROGRAM_CRITERIA = ML_CRITERIA + BAYES_CRITERIA


def is_program_list(candidates) -> bool:
    """Whether ``candidates`` is a non-empty sequence of callables (programs)."""
    if candidates is None or isinstance(candidates, str | bytes):
        return False
    try:
        items = list(candidates)
    except TypeError:
        return False
    return bool(items) and all(callable(c) for c in items)


def program_names(programs) -> tuple[str, ...]:
    """Each program's ``__name__`` (a ``functools.partial``: its function's), repeats
    suffixed ``#2``, ``#3``, ... in order."""
    names, seen = [], {}
    for program in programs:
        base = program
        while isinstance(base, functools.partial):
            base = base.func
        name = getattr(base, "__name__", None) or type(base).__name__
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return tuple(names)


class _AsParams(Messenger):
    """Give the named sample sites the values ``values`` and hide them from the
    handlers outside (the program's own parameter sites of the same names take their
    place in the trace; their prior terms are dropped)."""

    def __init__(self, fn=None, values=None):
        self.values = dict(values or {})
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["name"] in self.values:
            msg["value"] = self.values[msg["name"]]
            msg["stop"] = True


def _draw_from(fn):
    return lambda key: fn.sample(key)


def _ml_program(program, priors):
    """``program`` with the continuous sample sites ``priors`` (name -> distribution)
    as ``numpyro.param`` sites (the likelihood alone)."""

    def maximum_likelihood(x):
        values = {name: numpyro.param(name, _draw_from(fn), constraint=fn.support)
                  for name, fn in priors.items()}
        with _AsParams(values=values):
            return program(x)

    return maximum_likelihood


class _Candidate:
    """One program: its trace facts, its maximum-likelihood twin and its enumerated form."""

    def __init__(self, name, program, x, rng_key):
        from numpyro.contrib.funsor import config_enumerate

        self.name, self.program = name, program
        try:
            trace = handlers.trace(handlers.seed(program, rng_key)).get_trace(x)
        except Exception as error:  # noqa: BLE001 - re-raised naming the candidate
            raise ValueError(f"candidate {name!r} fails to trace on x of shape "
                             f"{tuple(np.shape(x))}: {type(error).__name__}: {error}"
                             ) from error
        num = np.shape(x)[0]
        sites = [s for s in trace.values() if s["type"] == "sample"]
        self.observed = {s["name"]: tuple(np.shape(s["value"])) for s in sites
                         if s["is_observed"]}
        if not self.observed:
            raise ValueError(f"candidate {name!r} has no observed site: a candidate must "
                             "observe the data x (numpyro.sample(..., obs=x))")
        latent = [s for s in sites if not s["is_observed"]]
        self.discrete = [s["name"] for s in latent if s["fn"].has_enumerate_support]
        continuous = [s for s in latent if not s["fn"].has_enumerate_support]
        self.local = [s["name"] for s in continuous
                      if any(f.size == num for f in s["cond_indep_stack"])]
        self.priors = {s["name"]: s["fn"] for s in continuous if s["name"] not in self.local}
        params = {n: s for n, s in trace.items() if s["type"] == "param"}
        self.bayesian = bool(self.priors) and not params
        self.fit_program = _ml_program(program, self.priors) if self.priors else program
        self.enumerated = config_enumerate(program)
        self.constraints = {n: s["kwargs"].get("constraint") for n, s in params.items()}
        self.constraints.update({n: fn.support for n, fn in self.priors.items()})
        values = {n: s["value"] for n, s in params.items()}
        values.update({n: trace[n]["value"] for n in self.priors})
        self.num_parameters = int(sum(
            np.size(biject_to(self.constraints[n]).inv(v)) if self.constraints[n] is not None
            else np.size(v) for n, v in values.items()))
        self.mixed = bool(self.priors) and bool(params)

    def check(self, criteria):
        """Raise ``ValueError`` naming the candidate where it cannot give a criterion."""
        ml = [c for c in criteria if c in ML_CRITERIA]
        if ml and self.local:
            raise ValueError(
                f"candidate {self.name!r}: the continuous latent site(s) {self.local} lie "
                f"inside the example plate; {ml} maximise the likelihood over the "
                "parameters with only discrete sites summed out, which a per-example "
                "continuous latent does not allow (make it discrete, integrate it out in the "
                "program, or use only 'loo', 'waic' and 'evidence' with priors)")
        bayes = [c for c in criteria if c in BAYES_CRITERIA]
        if bayes and not self.bayesian:
            why = ("mixes numpyro.param sites with sample-site priors" if self.mixed
                   else "has no priors: its parameters are numpyro.param sites")
            raise ValueError(
                f"candidate {self.name!r} {why}; {bayes} need a Bayesian program whose "
                "every parameter is a numpyro.sample site with a prior (outside the example "
                "plate). Give the parameters priors, or ask only for "
                f"{list(ML_CRITERIA)}")


class ProgramScorer(Scorer):
    """Fits and scores of the user's program candidates for :func:`inference.model_selection`.

    Parameters
    ----------
    x : array (N, ...)
        The data, examples along axis 0.
    programs : dict
        Candidate (a name, or the size passed to one program) -> program ``f(x)`` (the
        extra arguments already bound).
    names : dict, optional
        Candidate -> its name in messages (default ``str(candidate)``).
    num_restarts : int
        Restarts of every :func:`inference.fit_em` call.
    fit_options : dict
        Further keywords of :func:`inference.fit_em` (``max_iterations``, ``tol``, ...).
    """

    def __init__(self, x, programs: dict, *, rng_key, names=None, num_restarts=3,
                 fit_options=None):
        x = np.asarray(x)
        if x.ndim < 1 or x.shape[0] < 2:
            raise ValueError(f"x must hold at least two examples along axis 0; got shape "
                             f"{x.shape}")
        if x.dtype.kind in "biuf" and not np.all(np.isfinite(x)):
            raise ValueError("x must be finite (no NaN or inf)")
        if x.dtype.kind == "f":
            x = x.astype(np.float32) if not jax.config.jax_enable_x64 else x
        self.x = x
        self.num = x.shape[0]
        self.dim = int(np.prod(x.shape[1:])) if x.ndim > 1 else 1
        self.num_restarts = num_restarts
        self.fit_options = dict(fit_options or {})
        self.fit_options.pop("e_step", None)
        self.vb_options = {}
        keys = jax.random.split(rng_key, len(programs))
        names = dict(names or {})
        self.candidates = {c: _Candidate(names.get(c, str(c)), program, x, key)
                           for (c, program), key in zip(programs.items(), keys, strict=True)}
        shapes = {c.name: c.observed for c in self.candidates.values()}
        if len({tuple(sorted(s.values())) for s in shapes.values()}) > 1:
            listed = "; ".join(f"{n!r} observes {s}" for n, s in shapes.items())
            raise ValueError("the candidates observe data of different shapes (" + listed
                             + "): every candidate must be a model of the same data x")
        flat = x.reshape(self.num, -1).astype(float) if x.dtype.kind in "biuf" else None
        spread = np.std(flat, axis=0) if flat is not None else np.ones(1)
        spread = spread[spread > 0]
        self.data_scale = float(spread.min()) if spread.size else 1.0
        self.fits, self.fold_reasons = {}, {}
        self.unconverged = self.num_fits = 0

    # -- the order of candidates: ties go to fewer parameters, then the first listed
    def order(self, names):
        position = {n: i for i, n in enumerate(self.candidates)}
        return [(self.candidates[n].num_parameters, position[n]) for n in names]

    def check_criteria(self, criteria):
        for candidate in self.candidates.values():
            candidate.check(criteria)

    def _fit(self, name, x, rng_key):
        from inference.em.fit import fit_em

        candidate = self.candidates[name]
        with warnings.catch_warnings():
            # Non-convergence is counted in the notes; a non-finite or degenerate fit is
            # excluded from the choice with its reason (degenerate()).
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", NumericalWarning)
            try:
                fit = fit_em(candidate.fit_program, x, e_step="soft", rng_key=rng_key,
                             num_restarts=self.num_restarts, **self.fit_options)
            except ValueError as error:
                raise ValueError(f"candidate {candidate.name!r}: {error}") from error
        self.num_fits += 1
        self.unconverged += not fit.converged
        return self._best_sound_restart(name, fit)

    def _best_sound_restart(self, name, fit):
        """The best restart whose fit is not degenerate (a collapsed component, a value that
        is not finite), where the best one overall is: as the families' scorers do."""
        if self._reason(name, fit) is None or fit.restart_params is None:
            return fit
        objectives = np.asarray(fit.restart_objectives, float)
        for index in np.argsort(np.where(np.isfinite(objectives), -objectives, np.inf)):
            if not np.isfinite(objectives[index]):
                break
            params = {n: v[index] for n, v in fit.restart_params.items()}
            if params_reason(params, self.candidates[name].constraints,
                             self.data_scale) is None:
                return fit._replace(params=params, objective=float(objectives[index]))
        return fit

    def _reason(self, name, fit):
        if not np.isfinite(fit.objective):
            return f"log-likelihood not finite ({fit.numerical_issue})"
        return params_reason(fit.params, self.candidates[name].constraints, self.data_scale)

    def train(self, name, rng_key):
        if name not in self.fits:
            self.fits[name] = self._fit(name, self.x, rng_key)
        return float(self.fits[name].objective) / self.num

    def pointwise(self, name, params, x):
        """(len(x),) log p(x_n | params), discrete sites summed out."""
        from inference.engine.inference_data import NUTSDraws, pointwise_log_likelihood

        candidate = self.candidates[name]
        draws = NUTSDraws({n: np.asarray(v)[None, None] for n, v in params.items()}, {},
                          (x,), {}, "", {})
        values = pointwise_log_likelihood(draws, candidate.enumerated)
        total = 0.0
        for value in values.values():
            value = np.asarray(value)[0, 0]
            total = total + value.reshape(value.shape[0], -1).sum(axis=1)
        return np.asarray(total, dtype=float)

    def heldout(self, name, train, test, rng_key):
        fit = self._fit(name, self.x[train], rng_key)
        reason = self._reason(name, fit)
        if reason is not None:
            self.fold_reasons.setdefault(name, reason)
        return self.pointwise(name, fit.params, self.x[test])

    def num_parameters(self, name):
        return self.candidates[name].num_parameters

    def degenerate(self, name, criterion):
        if criterion == "cv":
            reason = self.fold_reasons.get(name)
            return None if reason is None else f"a fold's fit: {reason}"
        fit = self.fits.get(name)
        return None if fit is None else self._reason(name, fit)

    def loo(self, name, rng_key, num_warmup, num_samples, progress_bar):
        from inference.engine.inference_data import nuts_draws, to_inference_data
        from inference.engine.mcmc import run_nuts

        candidate = self.candidates[name]
        chains = run_nuts(candidate.enumerated, jax.random.split(rng_key, 1), (self.x,),
                          num_warmup=num_warmup, num_samples=num_samples,
                          progress_bar=progress_bar, desc=f"NUTS {candidate.name}")
        draws = nuts_draws(chains, num_warmup, candidate.enumerated, (self.x,))
        divergent = int(np.sum(np.asarray(draws.sample_stats["diverging"])))
        extra = f", {divergent} divergent transitions" if divergent else ""
        return to_inference_data(draws, candidate.enumerated), extra

    def evidence_program(self, name):
        return self.candidates[name].program, (self.x,), {}

    def notes(self, scored):
        out = []
        if scored:
            out.append("cv/train/bic/aic: fit_em (soft E-step, discrete sites summed out), "
                       f"best of {self.num_restarts} restarts; p = unconstrained parameter "
                       "size: " + ", ".join(f"{c.name} {c.num_parameters}"
                                            for c in self.candidates.values()))
            converted = [c.name for c in self.candidates.values() if c.priors]
            if converted:
                out.append(f"{converted}: sample-site priors maximised as parameters "
                           "(likelihood only) for cv/train/bic/aic")
        if self.unconverged:
            out.append(f"{self.unconverged} of {self.num_fits} fit_em calls did not converge")
        return out


#: Default criteria for program candidates.
PROGRAM_DEFAULT_CRITERIA = ("cv", "bic", "aic")
#: Added to the defaults when every program candidate has priors.
PROGRAM_BAYES_CRITERIA = ("loo", "waic", "evidence")


def select_programs(x, candidates, model, criteria, rng_key, num_folds, num_restarts,
                    num_warmup, num_samples, evidence_options, progress_bar, model_args,
                    model_kwargs, fit_options):
    """:func:`inference.model_selection` between programs (the user's, or one program's
    sizes): its arguments, checked here; returns a ``ModelSelectionResult``."""
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
        bound = {n: bind(p, (), model_args, model_kwargs) for n, p in zip(names, programs,
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
        bound = {c: bind(model, (c,), model_args, model_kwargs) for c in candidates}
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
    keys = dict(zip(KEYED, jax.random.split(rng_key, len(KEYED)), strict=True))
    keys["evidence"] = jax.random.fold_in(rng_key, len(KEYED))
    n_cand = len(candidates)
    units = sum({"cv": n_cand * num_folds, "loo": n_cand, "evidence": n_cand}.get(c, 0)
                for c in criteria)
    units += n_cand if {"train", "bic", "aic"} & set(criteria) else 0
    bar = Progress(progress_bar, units)
    out = Scores(candidates)
    try:
        score_candidates(out, scorer, None, candidates, criteria, keys, bar, num, num_folds,
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


def bind(program, leading, model_args, model_kwargs):
    """``program(x, *leading, *model_args, **model_kwargs)`` as a program of x alone."""
    if not leading and not model_args and not model_kwargs:
        return program

    def bound(x):
        return program(x, *leading, *model_args, **model_kwargs)

    bound.__name__ = getattr(program, "__name__", "program")
    return bound
