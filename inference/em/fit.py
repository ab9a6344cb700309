"""EM on any NumPyro program with discrete latents: :func:`fit_em`.

The papers' learning rules, read off a user's own program: the discrete latent sites
(``Bernoulli``, ``Categorical``, one-hot categorical; several per program, mixed) are
the hidden states of each example, the ``numpyro.param`` sites the parameters. The
E-step is chosen by ``e_step`` (soft, annealed, mean-field or hard; see
:mod:`inference.em.steps`), the M-step is in closed form where the expected log-joint is
quadratic in the parameters and by L-BFGS otherwise, and the iterations run through
the engine (:func:`inference.engine.loop.run`): restarts side by side, a progress bar,
the trace. NumPyro itself has no EM; its generic alternatives on the same program are
SVI with ``TraceEnum_ELBO`` and NUTS with the discrete sites enumerated out.

References
----------
A. P. Dempster, N. M. Laird and D. B. Rubin, "Maximum likelihood from incomplete data via
the EM algorithm", Journal of the Royal Statistical Society B 39(1), 1977; L. Xu,
"YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new results on
vector quantization", Proc. ICONIP, 1995 (hard-cut EM and k-means as limits of EM);
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", NIPS 15, 2003
(variational EM with a factorised posterior); M. Westerdijk, D. Barber and
W. Wiegerinck, "Deterministic generative models for fast feature discovery", Data
Mining and Knowledge Discovery 5(4), 2001 (EM with the most probable states).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from inference.association.discrete_tables import MAX_JOINT_STATES
from inference.association.m_step import constrain
from inference.em.closed_form import without_patterns
from inference.em.plan import (
    decisions,
    finish,
    first_params,
    measures,
    nonfinite_sites,
    prepare,
    starts,
    structure_checks,
)
from inference.em.result import EMResult, EMTrace, objective_of
from inference.em.steps import EMState, em_step
from inference.engine.loop import Algorithm, run, select, warn_not_converged
from inference.program.cache import SignatureCache, sites_key
from inference.program.kwargs import split_args, split_model_kwargs
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_em", "E_STEPS", "DEFAULT_RESTARTS", "annealing_schedule"]

E_STEPS = ("soft", "annealed", "mean-field", "hard")
#: Restarts of the default call: the best of 8 starts from random states.
DEFAULT_RESTARTS = 8
_INITS = ("states", "posteriors", "program")


def annealing_schedule(start: float = 2.0, num_steps: int = 10) -> np.ndarray:
    """Temperatures falling geometrically from ``start`` to 1 in ``num_steps`` steps
    (the last is 1): the default schedule of ``e_step="annealed"`` (2 to 1 in 10 steps).

    The default starts cool on purpose: above a mixture's critical temperature the
    tempered posterior makes every component the same, a symmetric fixed point that the
    deterministic iterations never leave (measured: from 10, a mixture of three
    regressions ended with its three lines equal in all eight restarts; from 2 it
    reached soft EM's maximum)."""
    start = float(check_positive(start, "start"))
    num_steps = check_positive_int(num_steps, "num_steps")
    if start < 1.0:
        raise ValueError(f"start must be at least 1 (hot to 1); got {start}")
    return np.geomspace(start, 1.0, num_steps)


def _check_noise(noise):
    if noise is None or (isinstance(noise, str) and noise == "program"):
        return noise
    if isinstance(noise, str):
        raise ValueError(f"noise must be 'program' (the program as written), None (the "
                         f"sigma -> 0 limit) or a positive float; got {noise!r}")
    return float(check_positive(noise, "noise"))


def _temperatures(e_step, temperatures, max_iterations, dtype):
    if temperatures is None:
        values = annealing_schedule() if e_step == "annealed" else np.ones(1)
    else:
        if e_step not in ("annealed", "mean-field"):
            raise ValueError(f"temperatures: e_step={e_step!r} is not annealed; pass "
                             "e_step='annealed' or 'mean-field'")
        values = np.asarray(temperatures, float).ravel()
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 1.0):
            raise ValueError("temperatures must be a non-empty sequence of finite values "
                             f">= 1 (hot to 1); got {temperatures!r}")
        if values[-1] != 1.0:
            values = np.append(values, 1.0)
    if values.size > max_iterations:
        raise ValueError(f"temperatures: the schedule has {values.size} steps, more than "
                         f"max_iterations={max_iterations}")
    return jnp.asarray(values, dtype)


def fit_em(model: Callable, *args, e_step: str = "soft", rng_key=None,
           max_iterations: int = 200, tol: float = 1e-6, num_restarts: int | None = None,
           init: str = "states", init_params: dict | None = None, noise="program",
           sites=None, temperatures=None, num_sweeps: int = 5, search: str = "auto",
           m_step: str = "auto", m_step_iterations: int = 30,
           max_joint_states: int = MAX_JOINT_STATES, progress_bar: bool = False,
           **kwargs) -> EMResult:
    """Learn the ``numpyro.param`` sites of ``model(*args, **kwargs)`` by EM, its discrete
    latent sites the hidden states of each example.

    Parameters
    ----------
    model : callable
        A NumPyro program with discrete latent sites (``Bernoulli``, ``Categorical``,
        :class:`ppl_models.distributions.OneHotCategorical`; any shape, inside the
        example plate, the outermost plate around them) and ``numpyro.param`` sites to
        learn (a ``constraint`` is honoured). Every other latent site must be fixed. A
        program without discrete sites is fitted by maximum likelihood (the M-step alone).
    *args, **kwargs
        The program's arguments (the data among them).
    e_step : {"soft", "annealed", "mean-field", "hard"}
        ``"soft"``: the exact posterior of each example's joint state (classic EM; the
        objective is the log-likelihood, which never decreases). ``"annealed"``: that
        posterior at a temperature falling from hot to 1 (``temperatures``).
        ``"mean-field"``: a factorised posterior updated unit by unit (variational EM;
        the objective is the free energy, which never increases). ``"hard"``: the most
        probable state (hard-cut EM; with ``noise=None``, k-means-type EM in the
        sigma -> 0 limit); the objective is the mean energy.
    rng_key : jax.random key
        Draws the restarts' starts.
    max_iterations : int
    tol : float
        A restart stops when its objective's relative change falls to ``tol`` (for
        ``"hard"`` also when no state changes), once the temperature has reached 1.
    num_restarts : int, optional
        Independent starts; the best final objective wins. Default
        :data:`DEFAULT_RESTARTS` (8).
    init : {"states", "posteriors", "program"}
        How a start begins: ``"states"`` (default), random states of every example's
        units followed by an M-step; ``"posteriors"``, random posteriors (Dirichlet(1)
        per unit) followed by an M-step; ``"program"``, the program's own initial
        parameter values (``numpyro.param(name, init_fn)`` draws under each start's key).
        The M-step starts from the program's values, with ``init_params`` in place.
    init_params : dict, optional
        Initial values of some or all parameters, the same for every restart.
    noise : "program", None or float
        ``"program"`` (default): the program as written. A positive float: every
        observed Gaussian site at that noise. ``None``: the sigma -> 0 limit (hard only).
    sites : str or sequence of str, optional
        The discrete sites (default: every discrete latent site).
    temperatures : sequence of float, optional
        The annealing schedule (values >= 1, ending at 1; one per iteration, then 1).
        Default for ``"annealed"``: :func:`annealing_schedule` (2 to 1 in 10 steps).
    num_sweeps : int
        Mean-field sweeps over the units per E-step.
    search : {"auto", "exact", "icm"}
        The hard E-step: ``"exact"`` by enumeration of the joint states, ``"icm"`` by
        coordinate ascent from the previous states (iterated conditional modes);
        ``"auto"``: exact where the joint states are at most ``max_joint_states``.
    m_step : {"auto", "closed", "lbfgs"}
        ``"auto"``: in closed form for each block of parameters where the expected
        log-joint allows it, detected by tracing (quadratic in real parameters, the
        normalised expected counts for a simplex, a power law such as a Gaussian scale's
        for a positive parameter: :mod:`inference.em.closed_form`), the others by
        L-BFGS. ``"closed"``: an error unless every parameter has its closed form.
        ``"lbfgs"``: L-BFGS for all.
    m_step_iterations : int
        L-BFGS steps per M-step (for the parameters without a closed form).
    max_joint_states : int
        The most joint states of one example that the soft and annealed E-steps (and
        exact search) enumerate.
    progress_bar : bool

    Returns
    -------
    EMResult

    Raises
    ------
    ValueError
        Naming the site or argument: a continuous latent site left free, a discrete
        site outside the example plate's structure, a site outside the example plate
        that depends on the states, an enumeration larger than ``max_joint_states``
        (with its size and the E-step to use instead), no ``numpyro.param`` site.

    Examples
    --------
    A two-component mixture of regressions, its component a categorical site:

    >>> import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
    >>> from numpyro.distributions import constraints
    >>> def regressions(t, y):
    ...     w = numpyro.param("w", jnp.ones(2) / 2, constraint=constraints.simplex)
    ...     slope = numpyro.param("slope", jnp.array([0.5, -0.5]))
    ...     with numpyro.plate("data", t.shape[0]):
    ...         c = numpyro.sample("c", dist.Categorical(w))
    ...         numpyro.sample("y", dist.Normal(slope[c] * t, 0.1), obs=y)
    >>> t = jnp.linspace(-1, 1, 40)
    >>> y = jnp.where(jnp.arange(40) % 2 == 0, 2.0 * t, -1.0 * t)
    >>> fit = fit_em(regressions, t, y, rng_key=jax.random.key(0))
    >>> sorted(np.asarray(fit.params["slope"], float).round(2).tolist())
    [-1.0, 2.0]
    >>> fit.posteriors["c"].shape, fit.objective_name, fit.direction
    ((40, 2), 'log_likelihood', 'max')
    """
    if e_step not in E_STEPS:
        raise ValueError(f"e_step must be one of {list(E_STEPS)}; got {e_step!r}")
    if rng_key is None:
        raise MissingKeyError("fit_em draws its restarts' starts: pass "
                              "rng_key=jax.random.key(...)")
    check_rng_key(rng_key)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(DEFAULT_RESTARTS if num_restarts is None
                                      else num_restarts, "num_restarts")
    num_sweeps = check_positive_int(num_sweeps, "num_sweeps")
    m_step_iterations = check_positive_int(m_step_iterations, "m_step_iterations")
    max_joint_states = check_positive_int(max_joint_states, "max_joint_states")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0; got {tol!r}")
    if init not in _INITS:
        raise ValueError(f"init must be one of {list(_INITS)}; got {init!r}")
    if search not in ("auto", "exact", "icm"):
        raise ValueError(f"search must be 'auto', 'exact' or 'icm'; got {search!r}")
    if m_step not in ("auto", "closed", "lbfgs"):
        raise ValueError(f"m_step must be 'auto', 'closed' or 'lbfgs'; got {m_step!r}")
    noise = _check_noise(noise)
    if noise is None and e_step != "hard":
        raise ValueError(f"noise=None is the sigma -> 0 limit, where the posterior is a "
                         f"point mass: use e_step='hard' (e_step={e_step!r} needs a finite "
                         "noise, 'program' or a float)")
    dtype = jnp.result_type(float)
    schedule = _temperatures(e_step, temperatures, max_iterations, dtype)
    key_init, key_run = jax.random.split(rng_key)
    start_keys = jax.random.split(key_init, num_restarts)
    init_params = {name: jnp.asarray(value) for name, value in dict(init_params or {}).items()}
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    noise_value = jnp.asarray(noise if isinstance(noise, float) else 1.0, dtype)
    options = (e_step, noise if not isinstance(noise, float) else "float", sites_key(sites),
               search, m_step, m_step_iterations, num_sweeps, max_joint_states, init)
    key = SignatureCache.signature(model, (traced, dynamic, init_params), (static_args, static),
                                   options)
    kept = _SETTINGS.get(key)
    if kept is not None:
        # A kept structure: check it again at this call's values (programs compiled by
        # the call that kept it), and work it out afresh where it no longer holds.
        setting, check_setting = kept
        # The same checks as the call that kept it (its compiled programs), so nothing
        # new compiles here.
        start = first_params(start_keys[0], traced, dynamic, init_params,
                             setting=check_setting)
        checks = structure_checks(start, traced, dynamic, noise_value, start_keys[0],
                                  setting=check_setting)[0]
        pairwise, blocks = decisions(checks, check_setting, measures(
            start, traced, dynamic, noise_value, start_keys[0], check_setting))
        if (pairwise != (setting.route == "pairwise")
                or blocks != without_patterns(setting.blocks)):
            kept = None
    if kept is None:
        kept = prepare(model, args, kwargs, start_keys[0], init_params, noise, e_step=e_step,
                       sites=sites, search=search, m_step=m_step,
                       m_step_iterations=m_step_iterations, num_sweeps=num_sweeps,
                       max_joint_states=max_joint_states, traced=traced, dynamic=dynamic,
                       noise_value=noise_value)
    setting = kept[0]
    _SETTINGS.put(key, kept)
    begun, weights0 = starts(start_keys, traced, dynamic, init_params, noise_value,
                             setting=setting, init=init)
    states0 = EMState(begun, weights0, jnp.full(num_restarts, jnp.inf, dtype),
                      jnp.zeros(num_restarts, jnp.int32))
    algorithm = Algorithm(em_step, options=(("setting", setting),), name="fit_em")
    params = (dynamic, noise_value, schedule, jnp.asarray(tol, dtype))
    result = run(algorithm, states0, (traced,), params,
                 keys=jax.random.split(key_run, num_restarts), max_iterations=max_iterations,
                 tol=tol, progress_bar=progress_bar)
    name, direction = objective_of(e_step)
    finals = np.asarray(result.state.objective, float)
    ranked = np.where(np.isnan(finals), np.inf, -finals if direction == "max" else finals)
    best = int(np.argmin(ranked))
    state, trace, count, converged = select(result, best)
    weights = state.weights
    marginals = finish(weights, setting=setting)
    constraint_of = {n: c.constraint for n, c in setting.constraints}
    learned = constrain(state.params, constraint_of)
    objective = float(state.objective)
    issue = None
    if not np.isfinite(objective):
        issue = nonfinite_sites(setting, learned, weights, args, kwargs)
        warnings.warn(f"fit_em: the objective is not finite at the best restart's parameters "
                      f"({issue}); check the program's parameters, their constraints and "
                      "initial values", NumericalWarning, stacklevel=2)
        converged = False
    failed = int(np.sum(np.asarray(trace.m_step_failed)))
    if failed:
        warnings.warn(f"fit_em: the closed-form M-step met a Hessian that is not positive "
                      f"semi-definite (or not of the sparsity found at the start) at {failed} "
                      f"of {count} iterations and kept the parameters of its quadratic block "
                      "there; pass m_step='lbfgs'", NumericalWarning, stacklevel=2)
    if issue is None:  # a non-finite objective has had its warning
        warn_not_converged("fit_em", converged, max_iterations)
    layout = setting.layout
    states = posteriors = None
    if e_step == "hard":
        states = layout.unflatten(weights)
        states = {n: (v.astype(jnp.int32) if k == "bernoulli" else v)
                  for (n, v), k in zip(states.items(), layout.kinds, strict=True)}
    else:
        posteriors = layout.unflatten_marginals(marginals)
    return EMResult(learned, states, posteriors, objective, name, direction, converged, count,
                    EMTrace(trace.objective, trace.temperature), jnp.asarray(finals), e_step,
                    setting.closed_form, trace.temperature, issue,
                    constrain(result.state.params, constraint_of))


#: Prepared fits of recent calls, by program, argument shapes and settings.
_SETTINGS = SignatureCache(32)


