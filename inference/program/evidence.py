"""A reference log marginal likelihood (evidence) by adaptive tempered SMC, with its error.

The evidence of a program with observed data x and continuous latent sites theta is

    Z = p(x) = integral of p(theta) p(x | theta) d theta,

with every discrete latent site summed out of p(x | theta) by enumeration (a
mixture's likelihood is the marginal p(x | theta) = prod_n sum_k alpha_k p(x_n | k),
never the joint with the labels). :func:`log_evidence` reads it from a NumPyro
program; :func:`tempered_smc_log_evidence` works on any log prior and log likelihood
of one flat vector.

Estimator
---------
Sequential Monte Carlo samplers (Del Moral, Doucet & Jasra 2006) move a population of
particles from the prior (temperature lambda = 0) to the posterior (lambda = 1)
through the tempered targets p(theta) p(x | theta)^lambda. At each step the next
temperature is chosen so that the effective sample size of the incremental weights
p(x | theta)^(lambda' - lambda) is ``target_ess`` times the number of particles
(adaptive tempering, as in BlackJAX's ``adaptive_tempered_smc``, which runs every
step here); the particles are resampled (systematic) and moved by ``num_mcmc_steps``
MCMC moves that leave the tempered target invariant, ``move="hmc"`` (the default of
:func:`log_evidence`) or ``"rwm"``:

* HMC: ``num_integration_steps`` leapfrog steps with the weighted particle variances
  as inverse mass (a diagonal metric, recomputed at every step) and a step size of
  d^(-1/4) times a factor adapted from step to step towards an acceptance rate of 0.65;
* random-walk Metropolis: a Gaussian proposal with covariance 2.38^2 / d times the
  current weighted particle covariance, times a factor adapted towards 0.234.

The product of the mean incremental weights is an unbiased estimate of Z, so

    log Z = sum over steps of log mean_i p(x | theta_i)^(lambda' - lambda).

Error
-----
The standard error comes from ``num_repeats`` independent runs (fresh prior draws
and keys): ``standard_error = sd(log Z runs, ddof=1) / sqrt(num_repeats)``. The log
of an unbiased estimate of Z is biased *low*: by about var(log Z of one run) / 2
(sd(runs)^2 / 2) when that variance is small, and by more when the moves mix poorly
(a multimodal posterior, such as a mixture's label switching). The standard error
does not cover that bias, which with few particles can exceed it; the check is to
raise ``num_particles`` (and ``num_mcmc_steps``): the estimate should not move by
more than its error. Log densities that are NaN or infinite count as zero weight
(-inf); a non-finite estimate warns :class:`~ppl_models.diagnostics.NumericalWarning`
and a run that does not reach lambda = 1 within ``max_steps`` warns
:class:`~ppl_models.diagnostics.ConvergenceWarning`; both set ``converged=False``.

Restrictions of :func:`log_evidence`: discrete latent sites must have a finite support
(they are enumerated, in parallel) and the prior of the continuous sites must not
depend on them (checked); ``numpyro.factor`` terms count as likelihood. A random walk
suits tens of dimensions; HMC hundreds (local continuous latents make theta large).
The array arguments of the program are traced: new data of the same shapes (and the
same other arguments) reuse the compiled densities and SMC loop.

Examples
--------
The evidence of a normal mean (``x_i ~ N(mu, 1)``, ``mu ~ N(0, 1)``)::

    import jax, numpyro, numpyro.distributions as dist
    from inference.program.evidence import log_evidence

    def program(x):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)

    x = 1.0 + jax.random.normal(jax.random.key(1), (20,))
    print(log_evidence(program, x, rng_key=jax.random.key(0)))  # log Z = ... +- ...

References
----------
P. Del Moral, A. Doucet, A. Jasra, "Sequential Monte Carlo samplers", Journal of the
Royal Statistical Society B 68(3), 411-436 (2006).
BlackJAX, ``blackjax.smc.adaptive_tempered`` (https://blackjax-devs.github.io/blackjax/).
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.mcmc import random_walk
from blackjax.smc import adaptive_tempered, resampling, solver

from inference.engine.runtime import warn_if_lapack_deadlock_prone
from inference.program.densities import (  # noqa: F401 (the densities' old home)
    ProgramDensities,
    finite_or_minus_inf,
    program_and_data,
    program_densities,
)
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_bool, check_fraction, check_positive_int, check_rng_key

# ProgramDensities and program_densities (inference.program.densities) stay importable
# from here.
__all__ = ["EvidenceResult", "tempered_smc_log_evidence", "log_evidence"]


class EvidenceResult(NamedTuple):
    """The log evidence of independent SMC runs, with its standard error.

    Attributes
    ----------
    log_evidence : float
        Mean over the repeats of the log Z estimates (total nats, not per example).
    standard_error : float
        sd of the repeats' log Z (ddof=1) / sqrt(num_repeats).
    runs : array (num_repeats,)
        The log Z of every independent run.
    num_steps : int array (num_repeats,)
        Tempering steps each run took.
    acceptance : float
        Mean acceptance rate of the Metropolis moves (all runs, all steps).
    seconds : float
        Wall time of all repeats (compilation included).
    converged : bool
        Every run reached temperature 1 within ``max_steps`` and the estimate and its
        standard error are finite.
    """

    log_evidence: float
    standard_error: float
    runs: np.ndarray
    num_steps: np.ndarray
    acceptance: float
    seconds: float
    converged: bool

    def __str__(self):
        lo, hi = int(np.min(self.num_steps)), int(np.max(self.num_steps))
        steps = f"{lo}" if lo == hi else f"{lo}-{hi}"
        flag = "" if self.converged else ", NOT converged"
        return (f"log Z = {self.log_evidence:.2f} +- {self.standard_error:.2f} "
                f"({len(self.runs)} runs, {steps} steps, acceptance {self.acceptance:.2f}"
                f"{flag})")


_ADDITIVE_STEP = blackjax.additive_step_random_walk.build_kernel()


def _rw_step(rng_key, state, logdensity_fn, proposal_tril):
    """One random-walk Metropolis step with Gaussian proposal N(0, L L^T)."""
    return _ADDITIVE_STEP(rng_key, state, logdensity_fn, random_walk.normal(proposal_tril))


def _proposal_tril(particles, weights):
    """Cholesky factor of 2.38^2 / d times the weighted particle covariance (jittered)."""
    dim = particles.shape[1]
    centred, weights = _weighted_moments(particles, weights)
    cov = (centred * weights[:, None]).T @ centred
    variance = jnp.diag(cov)
    jitter = 1e-6 * jnp.mean(variance) + 1e-12
    tril = jnp.linalg.cholesky(0.5 * (cov + cov.T) + jitter * jnp.eye(dim, dtype=cov.dtype))
    tril = jnp.where(jnp.all(jnp.isfinite(tril)), tril, jnp.diag(jnp.sqrt(variance + jitter)))
    return (2.38 / np.sqrt(dim)) * tril


def _root_solver(fun, min_delta, max_delta):
    """BlackJAX's dichotomy for the next temperature step, never stuck at 0: where the
    likelihood is zero on more than 1 - target_ess of the particles no step reaches the
    target ESS; the smallest step that moves lambda is taken then (it drops them)."""
    delta = solver.dichotomy(fun, min_delta, max_delta)
    eps = jnp.finfo(jnp.result_type(max_delta)).eps
    smallest = jnp.minimum(1e-9 * max_delta + 4 * eps * (1.0 - max_delta), max_delta)
    return jnp.where(delta > 0, delta, smallest)


#: The random walk's scale: 2.38 / sqrt(d) times the particles' spread, times a factor
#: moved by exp(_ADAPT_RATE * (acceptance - target)) after every step; HMC's leapfrog step
#: d^(-1/4) in the metric of the particles' variances, times such a factor.
_TARGET_ACCEPTANCE = {"rwm": 0.234, "hmc": 0.65}
_ADAPT_RATE = 2.0
_MAX_LOG_FACTOR = 5.0
MOVES = ("rwm", "hmc")
#: MCMC moves per tempering step when ``num_mcmc_steps`` is not given.
DEFAULT_MCMC_STEPS = {"rwm": 10, "hmc": 3}


def _weighted_moments(particles, weights):
    weights = jnp.where(jnp.isfinite(weights), weights, 0.0)
    weights = weights / jnp.maximum(jnp.sum(weights), jnp.finfo(weights.dtype).tiny)
    centred = particles - weights @ particles
    return centred, weights


def _hmc_parameters(particles, weights, factor):
    """Step size and diagonal inverse mass (the particles' weighted variances)."""
    centred, weights = _weighted_moments(particles, weights)
    variance = weights @ jnp.square(centred)
    variance = jnp.where(jnp.isfinite(variance), variance, 1.0)
    variance = variance + 1e-6 * jnp.mean(variance) + 1e-12
    step = factor * particles.shape[1] ** -0.25
    return {"step_size": step[None], "inverse_mass_matrix": variance[None]}


@functools.lru_cache(maxsize=8)
def _hmc_step(num_integration_steps):
    kernel = blackjax.hmc.build_kernel()

    def step(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix):
        return kernel(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix,
                      num_integration_steps)

    return step


@functools.lru_cache(maxsize=16)
def _without_data(fn):
    """u -> float as (u, data) -> float (cached: the same fn gives the same function)."""
    return lambda u, data: fn(u)


@functools.lru_cache(maxsize=16)  # the same densities again: no new compilation
def _smc_run(log_prior, log_likelihood, num_mcmc_steps, move, num_integration_steps):
    """A jitted (key, particles, target_ess, max_steps, data) -> (log Z, steps, sum of
    acceptance rates, final lambda) for densities of (u, data); the settings and the data
    are traced, so changing them compiles nothing new."""
    if move == "hmc":
        step_fn, init_fn = _hmc_step(num_integration_steps), blackjax.hmc.init
    else:
        step_fn, init_fn = _rw_step, random_walk.init
    target = _TARGET_ACCEPTANCE[move]

    def run(key, particles, target_ess, max_steps, data):
        def likelihood(u):
            return finite_or_minus_inf(log_likelihood(u, data))

        kernel = adaptive_tempered.build_kernel(
            lambda u: finite_or_minus_inf(log_prior(u, data)), likelihood,
            step_fn, init_fn, resampling.systematic, target_ess, root_solver=_root_solver)
        state = adaptive_tempered.init(particles)
        state = state._replace(tempering_param=jnp.zeros((), particles.dtype))
        zero = jnp.zeros((), particles.dtype)
        # Zero likelihood on every particle: no temperature step keeps one (its ESS is
        # 0 / 0, whose rounding the compiler decides), so log Z = -inf without a step.
        nowhere = jnp.all(jax.vmap(likelihood)(particles) == -jnp.inf)

        def cond(carry):
            _, state, step, _, _, _ = carry
            return (state.tempering_param < 1.0) & (step < max_steps) & ~nowhere

        def body(carry):
            key, state, step, log_z, acceptance, log_factor = carry
            key, subkey = jax.random.split(key)
            if move == "hmc":
                parameters = _hmc_parameters(state.particles, state.weights,
                                             jnp.exp(log_factor))
            else:
                tril = jnp.exp(log_factor) * _proposal_tril(state.particles, state.weights)
                parameters = {"proposal_tril": tril[None]}
            state, info = kernel(subkey, state, num_mcmc_steps, parameters)
            rate = jnp.mean(info.update_info.acceptance_rate)
            log_factor = jnp.clip(log_factor + _ADAPT_RATE * (rate - target),
                                  -_MAX_LOG_FACTOR, 1.0)
            return (key, state, step + 1, log_z + info.log_likelihood_increment,
                    acceptance + rate, log_factor)

        _, state, steps, log_z, acceptance, _ = jax.lax.while_loop(
            cond, body, (key, state, jnp.zeros((), jnp.int32), zero, zero, zero))
        return (jnp.where(nowhere, -jnp.inf, log_z), steps, acceptance,
                jnp.where(nowhere, 1.0, state.tempering_param))

    return jax.jit(run)


def _check_particles(particles, name):
    arr = jnp.asarray(particles)
    if arr.ndim != 2 or not jnp.issubdtype(arr.dtype, jnp.floating) or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a float array (num_particles, dim); got "
                         f"shape {arr.shape} and dtype {arr.dtype}")
    if arr.shape[0] < 2:
        raise ValueError(f"{name} must hold at least 2 particles (rows); got shape {arr.shape}")
    if not bool(jnp.all(jnp.isfinite(arr))):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _check_settings(num_repeats, target_ess, num_mcmc_steps, max_steps, progress_bar, move,
                    num_integration_steps):
    num_repeats = check_positive_int(num_repeats, "num_repeats")
    if num_repeats < 2:
        raise ValueError(f"num_repeats must be at least 2 (the standard error needs two "
                         f"runs); got {num_repeats}")
    if move not in MOVES:
        raise ValueError(f"move must be one of {MOVES}; got {move!r}")
    if num_mcmc_steps is None:
        num_mcmc_steps = DEFAULT_MCMC_STEPS[move]
    return (num_repeats, check_fraction(target_ess, "target_ess"),
            check_positive_int(num_mcmc_steps, "num_mcmc_steps"),
            check_positive_int(max_steps, "max_steps"), check_bool(progress_bar, "progress_bar"),
            move, check_positive_int(num_integration_steps, "num_integration_steps"))


def tempered_smc_log_evidence(log_prior, log_likelihood, initial_particles, *, rng_key,
                              num_repeats: int = 5, target_ess: float = 0.5,
                              num_mcmc_steps: int | None = None, max_steps: int = 200,
                              move: str = "rwm", num_integration_steps: int = 5,
                              progress_bar: bool = False) -> EvidenceResult:
    """log Z = log integral exp(log_prior(u) + log_likelihood(u)) du by adaptive tempered SMC.

    Parameters
    ----------
    log_prior, log_likelihood : callable u -> float
        Log densities of ONE flat vector u (1-D array), jax-traceable; exp(log_prior)
        must be a normalised density in u (the prior that ``initial_particles`` draw).
    initial_particles : array (num_particles, dim) or callable key -> such an array
        Draws from the prior. A callable gives every repeat fresh draws (fully
        independent repeats); a fixed array is shared by the repeats.
    rng_key : jax.random key
    num_repeats : int
        Independent runs (at least 2), from which the standard error comes.
    target_ess : float in (0, 1)
        Fraction of effective particles each tempering step keeps.
    num_mcmc_steps : int, optional
        MCMC moves of every particle per tempering step (default 10 random-walk or 3
        HMC moves).
    max_steps : int
        Most tempering steps of one run.
    move : {"rwm", "hmc"}
        The MCMC move: ``"rwm"``, random-walk Metropolis with the particles' covariance
        (no gradient; tens of dimensions); ``"hmc"``, Hamiltonian Monte Carlo with
        ``num_integration_steps`` leapfrog steps, the particles' variances as inverse
        mass and a step size adapted towards acceptance 0.65 (needs differentiable
        densities; mixes far better on concentrated or curved posteriors).
    num_integration_steps : int
        Leapfrog steps of one HMC move (ignored by ``"rwm"``).
    progress_bar : bool
        A tqdm bar over the repeats.
    """
    check_rng_key(rng_key)
    for name, fn in (("log_prior", log_prior), ("log_likelihood", log_likelihood)):
        if not callable(fn):
            raise TypeError(f"{name} must be a callable u -> float; got {fn!r}")
    settings = _check_settings(num_repeats, target_ess, num_mcmc_steps, max_steps,
                               progress_bar, move, num_integration_steps)
    if callable(initial_particles):
        def draw(key):
            return _check_particles(initial_particles(key), "initial_particles(key)")
    else:
        fixed = _check_particles(initial_particles, "initial_particles")
        draw = lambda key: fixed  # noqa: E731
    return _tempered_smc(_without_data(log_prior), _without_data(log_likelihood), (), draw,
                         rng_key, *settings)


def _tempered_smc(log_prior, log_likelihood, data, draw, rng_key, num_repeats, target_ess,
                  num_mcmc_steps, max_steps, progress_bar, move, num_integration_steps):
    """``num_repeats`` runs of the cached, jitted SMC on densities of (u, data)."""
    warn_if_lapack_deadlock_prone("tempered SMC", stacklevel=3)
    run = _smc_run(log_prior, log_likelihood, num_mcmc_steps, move,
                   num_integration_steps if move == "hmc" else 0)
    repeats = range(num_repeats)
    if progress_bar:
        from tqdm.auto import tqdm

        repeats = tqdm(repeats, desc="tempered SMC", unit="run")
    start = time.perf_counter()
    runs, steps, accept, final = [], [], [], []
    keys = jax.random.split(rng_key, num_repeats)
    for repeat in repeats:
        key_init, key_run = jax.random.split(keys[repeat])
        log_z, num_steps, acceptance, lam = run(key_run, draw(key_init), target_ess, max_steps,
                                                data)
        runs.append(float(log_z))
        steps.append(int(num_steps))
        accept.append(float(acceptance))
        final.append(float(lam))
    seconds = time.perf_counter() - start
    runs, steps = np.asarray(runs), np.asarray(steps)
    with np.errstate(invalid="ignore"):
        estimate = float(np.mean(runs))
        error = float(np.std(runs, ddof=1) / np.sqrt(num_repeats))
    reached = np.asarray(final) >= 1.0
    finite = bool(np.isfinite(estimate) and np.isfinite(error))
    if not reached.all():
        warnings.warn(f"tempered SMC: {int(np.sum(~reached))} of {num_repeats} run(s) stopped "
                      f"at max_steps={max_steps} before temperature 1 (final temperatures "
                      f"{np.round(final, 4).tolist()}); raise max_steps or target_ess",
                      ConvergenceWarning, stacklevel=3)
    if not finite:
        warnings.warn(f"tempered SMC: the log evidence is not finite (runs {runs.tolist()}): "
                      "the likelihood is zero or NaN on every particle at some step",
                      NumericalWarning, stacklevel=3)
    total_steps = max(int(np.sum(steps)), 1)
    return EvidenceResult(estimate, error, runs, steps, float(np.sum(accept)) / total_steps,
                          seconds, bool(reached.all() and finite))


@functools.lru_cache(maxsize=16)
def _from_reference(log_prior, log_likelihood):
    """Densities of (u, (data, reference)) that temper from ``reference`` instead of the
    prior: log q(u), and log p(u) + log p(x | u) - log q(u) (cached per program)."""

    def reference_log_density(u, data):
        return finite_or_minus_inf(data[1].log_prob(u))

    def log_ratio(u, data):
        program_data, reference = data
        return finite_or_minus_inf(log_prior(u, program_data) + log_likelihood(u, program_data)
                                   - reference.log_prob(u))

    return reference_log_density, log_ratio


def log_evidence(model, *model_args, rng_key, num_particles: int = 1000, num_repeats: int = 5,
                 target_ess: float = 0.5, num_mcmc_steps: int | None = None,
                 max_steps: int = 200, move: str = "hmc", num_integration_steps: int = 5,
                 progress_bar: bool = False, reference=None, **model_kwargs) -> EvidenceResult:
    """log p(x) of a NumPyro program with its observed data, by adaptive tempered SMC.

    Discrete latent sites are summed out by enumeration, the continuous latent sites
    are integrated over their prior (see
    :func:`inference.program.densities.program_densities` and the module
    docstring for the estimator and its error). The array arguments are traced: a
    second call on new data of the same shapes, with the same other arguments and
    settings, runs the functions compiled for the first.

    Parameters
    ----------
    model : callable
        The NumPyro program.
    *model_args, **model_kwargs
        Its arguments, the observed data among them.
    rng_key : jax.random key
    num_particles : int
        Particles of every run (at least 2; hundreds to thousands).
    move : {"hmc", "rwm"}
        The MCMC move (see :func:`tempered_smc_log_evidence`); HMC by default here,
        since a NumPyro program's densities are differentiable on the unconstrained
        space. Measured on a three-cluster mixture (300 points, k = 2..5, 1000
        particles, 4 repeats): HMC's standard errors 0.02-0.3 nats against 0.2-2.3 for
        10 random-walk moves, whose estimates sat 0.5-6 nats lower (the log of an
        unbiased estimate is biased low by poor mixing), at 1.6-6 times the time.
    num_repeats, target_ess, num_mcmc_steps, max_steps, num_integration_steps, \
progress_bar
        As in :func:`tempered_smc_log_evidence`.
    reference : numpyro.distributions.Distribution, optional
        A normalised distribution of the flat unconstrained vector u (event shape
        (dim,), the layout of :func:`inference.program.densities.program_densities`'
        ``unravel``) to start from instead of the prior: the particles are drawn from q
        = ``reference`` and tempered through q^(1 - lambda) (p(u) p(x | u))^lambda to the
        posterior, so the estimate is still of log p(x) (unbiased in p(x), for any q
        that covers the posterior), but with far fewer steps and far less variance when
        q sits where the posterior is, e.g. a mixture of Gaussians at the modes a fit
        found. Where the prior is much wider than the posterior and the posterior has
        many modes of very unequal mass, tempering from the prior settles in poor modes;
        a reference at the good ones avoids that.
    """
    check_rng_key(rng_key)
    num_particles = check_positive_int(num_particles, "num_particles")
    if num_particles < 2:
        raise ValueError(f"num_particles must be at least 2; got {num_particles}")
    settings = _check_settings(num_repeats, target_ess, num_mcmc_steps, max_steps,
                               progress_bar, move, num_integration_steps)
    key_program, key_smc = jax.random.split(rng_key)
    program, data = program_and_data(model, model_args, model_kwargs, key_program)
    if reference is None:
        return _tempered_smc(program.log_prior, program.log_likelihood, data,
                             lambda key: program.draw(key, num_particles, data), key_smc,
                             *settings)
    size = int(program.draw(key_program, 1, data).shape[1])
    if not hasattr(reference, "log_prob") or tuple(getattr(reference, "event_shape", ())) \
            != (size,) or tuple(getattr(reference, "batch_shape", ())) != ():
        raise ValueError(f"reference must be a numpyro distribution with event shape "
                         f"({size},) (the flat unconstrained latent vector) and no batch "
                         f"shape; got {reference!r}")
    log_q, log_ratio = _from_reference(program.log_prior, program.log_likelihood)
    return _tempered_smc(log_q, log_ratio, (data, reference),
                         lambda key: reference.sample(key, (num_particles,)), key_smc,
                         *settings)
