"""NumPyro's generic SVI on the MCVQ program (:mod:`ppl_models.mcvq`), as baselines.

The paper (Ross and Zemel (2003), below) fits MCVQ by variational EM
(:func:`inference.mcvq.em.fit_mcvq`, sec. 3). Here NumPyro's SVI runs on the *same*
program, the enumerable form of :func:`ppl_models.mcvq.model` (``enumerable=True``:
one site "s_k" per VQ, same density as the default form), with r and s per example
(the paper's generative model, sec. 2) and the selection priors a, b fixed (uniform
by default, as in the paper):

* :func:`fit_mcvq_svi`: ``TraceEnum_ELBO`` with r and s_0 .. s_{K-1} enumerated
  in the model (summed out exactly) and no latent site left for the guide, so
  the loss is exactly -log p(X | mu, sigma) = -sum_c log sum_{r, s} p(x^c, r, s):
  SVI maximises the exact likelihood by gradient ascent.
* :func:`fit_mcvq_meanfield_svi`: ``TraceEnum_ELBO`` with the paper's mean-field
  guide Q(r^c_d = k) = g_dk (shared by all examples) and Q(s^c_k = j) = m^c_kj
  (per example), the guide's sites enumerated (NumPyro 0.22 supports
  guide-side enumeration in ``TraceEnum_ELBO``): the expectation over Q is
  summed exactly, so the loss is exactly the paper's free energy F = F_N
  (:func:`inference.mcvq.em.free_energy`, T = N; tested), and SVI lowers F by
  gradient steps on (g, m, mu, sigma) where variational EM takes exact block
  minimisations. A score-function estimator (``TraceGraph_ELBO``, sampled
  guide) would work at any size but with noisy gradients; within the
  enumeration limit the exact ELBO is the peer at its best.

mu and sigma are ``numpyro.param`` point estimates passed into the program
(which treats given mu, sigma as fixed), not ``AutoDelta`` on its "mu" and
"sigma" sample sites: variational EM maximises the likelihood (its bound)
with no prior on mu, sigma, so with ``numpyro.param`` both learners optimise
the same objective (AutoDelta would add the program's log-prior: MAP).
sigma is constrained to sigma >= sqrt(floor), the floor of ``fit_mcvq``
(``variance_floor`` times the data's mean variance), so that neither learner
can reach the unbounded likelihood of a collapsed state. Both fits start from
the start of ``fit_mcvq`` for the same ``rng_key`` (:func:`inference.mcvq.em.init`).

Cost and limit: enumerating r and s costs about J^K K terms per example and
dimension; ``inference.mcvq.scoring.MAX_ENUMERATED_TERMS`` bounds J^K K and
``MAX_ENUMERATED_CELLS`` bounds N D J^K K (:func:`inference.mcvq.scoring.check_enumerable`);
larger problems raise ValueError. The fits are scored by :mod:`inference.mcvq.scoring`.

Both run exactly ``num_steps`` Adam steps (no convergence test stops them), from one
description of the SVI (:class:`inference.engine.svi.SVIFit`), through the engine
(:func:`inference.engine.run`): an :class:`~inference.engine.Algorithm` whose step is
``svi.update``.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 2-3.
Obermeyer et al., "Tensor Variable Elimination for Plated Factor Graphs", ICML 2019
(the enumeration behind ``TraceEnum_ELBO``). Kingma, Ba, "Adam", ICLR 2015.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
from numpyro.contrib.funsor import config_enumerate
from numpyro.distributions import constraints
from numpyro.infer import SVI, TraceEnum_ELBO

from inference.engine.checkpoint import checkpointing
from inference.engine.persistence import register_renamed_fields, wrap_trace
from inference.engine.protocol import follows_protocol
from inference.engine.svi import SVIFit, SVIProblem, best_svi_start
from inference.mcvq import core
from inference.mcvq import em as mcvq_fit
from inference.mcvq.scoring import check_enumerable, check_scored_inputs
from ppl_models import mcvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive, check_positive_int, check_rng_key

__all__ = ["fit_mcvq_svi", "fit_mcvq_meanfield_svi", "enumerated_loss", "MCVQSVIResult",
           "MCVQSVITrace"]

#: Adam's step size decays by a cosine to this fraction of ``learning_rate``.
_FINAL_FRACTION = 0.01


class MCVQSVITrace(NamedTuple):
    """Per-step record of :func:`fit_mcvq_svi` and :func:`fit_mcvq_meanfield_svi` (all
    ``num_steps`` steps run): ``objective``, the exact loss per example before each step."""

    objective: jax.Array


@follows_protocol("loss", "min")
class MCVQSVIResult(NamedTuple):
    """Result of :func:`fit_mcvq_svi` and :func:`fit_mcvq_meanfield_svi`.

    Attributes
    ----------
    mu, sigma : arrays (D, K, J)
        The learned point estimates (sigma >= sqrt(``variance_floor``)).
    g : array (D, K) or None
        Q(r_d = k) of the mean-field guide (None for ``fit_mcvq_svi``).
    m : array (N, K, J) or None
        Q(s^c_k = j) of the mean-field guide (None for ``fit_mcvq_svi``).
    trace : MCVQSVITrace
        ``objective`` (num_steps,): the exact loss per example before each step,
        -log p(X | mu, sigma) / N (``fit_mcvq_svi``) or F_N / N
        (``fit_mcvq_meanfield_svi``); no sampling noise.
    loss : float
        The loss per example at the returned parameters (after the last step).
    num_iterations : int
        Steps run (``num_steps``: all of them).
    converged : bool
        The loss changed by at most ``tol`` nats per example over the second
        half of the run.
    variance_floor : float
        The absolute floor on sigma^2 (as ``MCVQResult.variance_floor``).
    restart_objectives : array (num_restarts,) or None
        The final loss per example (``trace.objective[-1]``) of every start when
        ``num_restarts`` > 1 (the result is the start with the lowest); None for one
        start.
    """

    mu: jax.Array
    sigma: jax.Array
    g: jax.Array | None
    m: jax.Array | None
    trace: MCVQSVITrace
    loss: float
    num_iterations: int
    converged: bool
    variance_floor: float
    restart_objectives: jax.Array | None = None


register_renamed_fields(MCVQSVIResult, {"loss_trace": "trace", "num_steps": "num_iterations"},
                        convert=wrap_trace(MCVQSVITrace))


def _program(x, mask, a, b, init_mu, init_sigma, lower):
    """The MCVQ program (enumerable form) with mu, sigma as ``numpyro.param`` point estimates."""
    mu = numpyro.param("mu", init_mu)
    sigma = numpyro.param("sigma", init_sigma, constraint=constraints.greater_than(lower))
    return mcvq.model(x, mask=mask, mu=mu, sigma=sigma, a=a, b=b, enumerable=True)


def _no_guide(*args, **kwargs):
    """Every latent site is enumerated in the model: nothing left for the guide."""


def _meanfield_guide(x, mask, a, b, init_mu, init_sigma, lower, init_g, init_m):
    """Q(r^c_d = k) = g_dk, Q(s^c_k = j) = m^c_kj, every site enumerated (sec. 3)."""
    num, dim = x.shape
    g = numpyro.param("g", init_g, constraint=constraints.simplex)
    m = numpyro.param("m", init_m, constraint=constraints.simplex)
    with numpyro.plate("examples", num, dim=-2):
        for k in range(m.shape[1]):
            numpyro.sample(f"s_{k}", dist.Categorical(m[:, k, None, :]),
                           infer={"enumerate": "parallel"})
        with numpyro.plate("dims", dim, dim=-1):
            numpyro.sample("r", dist.Categorical(jnp.broadcast_to(g, (num, dim, g.shape[1]))),
                           infer={"enumerate": "parallel"})


def _meanfield_program(x, mask, a, b, init_mu, init_sigma, lower, init_g, init_m):
    return _program(x, mask, a, b, init_mu, init_sigma, lower)


def _make(data, params, start, *, meanfield, num_steps):
    """The SVI of the MCVQ wrappers (:class:`inference.engine.svi.SVIFit`) and the
    arguments of its model and guide: ``data`` is ``(x, mask)``, ``params`` ``(a, b,
    start, learning_rate, lower)`` (the start is in ``params``, or in ``start`` when the
    fit has several)."""
    x, mask = data
    a, b, init, learning_rate, lower = params
    if start is not None:
        init = start
    if meanfield:
        model, guide = _meanfield_program, _meanfield_guide
        args = (x, mask, a, b, init.mu, init.sigma, lower, init.g, init.m)
    else:
        model, guide = config_enumerate(_program), _no_guide
        args = (x, mask, a, b, init.mu, init.sigma, lower)
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=_FINAL_FRACTION)
    return SVIProblem(SVI(model, guide, optax.adam(schedule), TraceEnum_ELBO(max_plate_nesting=2)),
                      args, {})


def _parameters_and_loss(problem, state, data, params):
    """(params, loss) (a total) at the SVI state after the last step."""
    return problem.svi.get_params(state), problem.svi.evaluate(state, *problem.args)


def enumerated_loss(x, mu, sigma, *, g=None, m=None, mask=None, a=None, b=None,
                    variance_floor: float = 1e-3):
    """NumPyro's ``TraceEnum_ELBO`` loss (a total, not per example) of a baseline at fixed values.

    Without ``g``, ``m``: the loss of :func:`fit_mcvq_svi`'s program (r and s
    enumerated in the model), -log p(X | mu, sigma); with both: the loss of
    :func:`fit_mcvq_meanfield_svi`'s guide at (g, m), F_N. Both are computed by
    NumPyro from the program, as during the fits (tested against brute-force
    enumeration and :func:`inference.mcvq.em.free_energy`). ``sigma`` must exceed
    the fits' floor sqrt(``variance_floor`` x the data's mean variance).

    Parameters
    ----------
    x : array (N, D)
    mu, sigma : arrays (D, K, J)
    g : array (D, K), optional
    m : array (N, K, J), optional
    mask, a, b : optional, as in :func:`exact_log_likelihood`
    variance_floor : float

    Returns
    -------
    scalar
    """
    mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
    if (g is None) != (m is None):
        raise ValueError("enumerated_loss: give both g and m (mean-field guide) or neither; "
                         f"got g={'None' if g is None else 'array'}, "
                         f"m={'None' if m is None else 'array'}")
    x, mask, a, b = check_scored_inputs(x, mask, mu, a, b)
    num, dim = x.shape
    check_enumerable(num, dim, *mu.shape[1:], "enumerated_loss")
    lower = jnp.asarray(np.sqrt(_floor(x, mask, variance_floor)), mu.dtype)
    params = {"mu": mu, "sigma": sigma}
    args = (x, mask, a, b, mu, sigma, lower)
    elbo = TraceEnum_ELBO(max_plate_nesting=2)
    if g is None:
        return elbo.loss(jax.random.key(0), params, config_enumerate(_program), _no_guide,
                         *args)
    params.update(g=jnp.asarray(g, mu.dtype), m=jnp.asarray(m, mu.dtype))
    return elbo.loss(jax.random.key(0), params, _meanfield_program, _meanfield_guide, *args,
                     params["g"], params["m"])


def _check_fit_args(x, num_vqs, num_states, mask, rng_key, num_steps, learning_rate,
                    variance_floor, tol, caller):
    if rng_key is None:
        raise MissingKeyError(f"{caller} needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    x, mask = core.check_observed(x, mask, "x")
    num, dim = x.shape
    check_enumerable(num, dim, num_vqs, num_states, caller)
    for axis, what in ((1, "example(s) {} (rows of x)"), (0, "dimension(s) {} (columns of x)")):
        empty = np.flatnonzero(~np.asarray(mask).any(axis=axis))
        if empty.size:
            raise ValueError(f"mask leaves {what.format(empty[:10].tolist())} without any "
                             "observed entry; drop them")
    check_positive_int(num_steps, "num_steps")
    check_positive(learning_rate, "learning_rate")
    check_positive(variance_floor, "variance_floor")
    check_positive(tol, "tol")
    return x, mask, num_vqs, num_states


def _floor(x, mask, variance_floor):
    """The absolute variance floor of ``fit_mcvq``: variance_floor x the mean observed variance."""
    obs = np.asarray(mask)
    xs = np.asarray(x, dtype=float)
    count = obs.sum(axis=0)
    mean = (obs * xs).sum(axis=0) / count
    spread = float(np.mean((obs * (xs - mean) ** 2).sum(axis=0) / count))
    return variance_floor * (spread if spread > 0 else 1.0)


def _fit(x, num_vqs, num_states, *, mask, rng_key, num_steps, learning_rate, variance_floor, a, b,
         tol, progress_bar, meanfield, caller, checkpoint_path=None, checkpoint_every=None,
         resume_from=None, num_restarts=1):
    x, mask, num_vqs, num_states = _check_fit_args(x, num_vqs, num_states, mask, rng_key,
                                                   num_steps, learning_rate, variance_floor, tol,
                                                   caller)
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    num, dim = x.shape
    x = jnp.asarray(x)
    a, b = core.priors(a, b, dim, num_vqs, num_states, x.dtype)
    floor = _floor(x, mask, variance_floor)
    lower = jnp.asarray(np.sqrt(floor), x.dtype)
    # The start of fit_mcvq for each start's key (rng_key itself for one start, else keys
    # split off it); sigma strictly inside the open constraint.
    start_keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
    inits = []
    for start_key in start_keys:
        init = mcvq_fit.init(start_key, x, mask, num_vqs, num_states, a, b,
                             jnp.asarray(floor, x.dtype))
        inits.append(init._replace(sigma=jnp.maximum(init.sigma, 1.01 * lower)))
    init = inits[0]
    # One start: in params (as ever); several: stacked, one per start (``_make``'s start).
    starts = None if num_restarts == 1 else jax.tree.map(lambda *v: jnp.stack(v), *inits)
    learning_rate_value = jnp.asarray(learning_rate, x.dtype)
    data, params = (x, mask), (a, b, init, learning_rate_value, lower)
    keys = jnp.stack([jax.random.split(start_key)[1] for start_key in start_keys])
    checkpoint = checkpointing(
        checkpoint_path, checkpoint_every, resume_from,
        dict(num_vqs=num_vqs, num_states=num_states, num_steps=num_steps,
             learning_rate=learning_rate, variance_floor=variance_floor, rng_key=rng_key,
             **({"num_restarts": num_restarts} if num_restarts > 1 else {})),
        data=data, start=(*(init if starts is None else starts), a, b, lower))
    fit = SVIFit(_make, caller, (("meanfield", meanfield), ("num_steps", num_steps)))
    fitted = fit.run(keys, data, params, num_steps=num_steps, starts=starts,
                     progress_bar=progress_bar, checkpoint=checkpoint)
    best, restart_objectives = best_svi_start(fitted, num, num_restarts)
    states, losses = fitted.state, fitted.trace.objective[best]
    values, final = jax.tree.map(lambda leaf: leaf[best], fit.read(states, data, params,
                                                                   _parameters_and_loss))
    losses = losses / num
    final = float(final) / num
    finite = bool(np.isfinite(final)) and all(
        bool(jnp.all(jnp.isfinite(v))) for v in values.values())
    if not finite:
        warnings.warn(f"{caller}: the loss or the parameters are not finite; lower learning_rate",
                      NumericalWarning, stacklevel=3)
    change = float(jnp.abs(losses[num_steps // 2] - final))
    converged = finite and num_steps >= 10 and change <= tol
    if finite and not converged:
        warnings.warn(f"{caller}: the loss still changed by {change:.3g} nats per example over "
                      f"the second half of the {num_steps} steps (tol={tol:g}); raise num_steps",
                      ConvergenceWarning, stacklevel=3)
    return MCVQSVIResult(mu=values["mu"], sigma=values["sigma"], g=values.get("g"),
                         m=values.get("m"), trace=MCVQSVITrace(losses), loss=final,
                         num_iterations=num_steps, converged=converged, variance_floor=floor,
                         restart_objectives=restart_objectives)


_FIT_PARAMETERS = """
    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False may hold anything (NaN included).
    num_vqs, num_states : int
        K and J; num_states ** num_vqs * num_vqs <= ``MAX_ENUMERATED_TERMS`` and
        N D J^K K <= ``MAX_ENUMERATED_CELLS``, else ValueError.
    mask : bool array (N, D), optional
        True where x is observed; every row and column needs an observed entry.
    rng_key : jax.random key
        The start is ``inference.mcvq.em.init`` with this key (as ``fit_mcvq``).
    num_steps : int
        Adam steps, all of them run (``fit_mcvq_svi`` through the engine,
        :func:`inference.engine.run`).
    learning_rate : float
        Adam's initial step size, decayed by a cosine to 1% of it.
    variance_floor : float
        sigma^2 >= variance_floor x the data's mean variance (as ``fit_mcvq``).
    a, b : arrays (D, K), (K, J), optional
        Fixed selection priors (uniform by default).
    tol : float
        ``converged`` when the loss per example changed by at most ``tol`` over
        the second half of the run.
    progress_bar : bool
        tqdm bar advanced from inside the jitted loop.
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the SVI state, with its key and optimiser state, the
        loss trace and the step; the options and the SHA-256 of x and mask) to this
        ``.npz`` file every ``checkpoint_every`` steps (:mod:`inference.engine.checkpoint`;
        atomic: a killed process leaves the last one intact).
    checkpoint_every : int, optional
        Steps per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by the same function with the same data
        and options (else ``ValueError`` naming the option); the result is
        bit-identical to the uninterrupted run.
    num_restarts : int
        Starts run side by side (``vmap``) in the engine's one compiled loop; the fit
        returned is the one with the lowest final loss (``trace.objective[-1]``,
        non-finite ones skipped). One start (the default) is ``fit_mcvq``'s start for
        ``rng_key`` itself, more those for ``jax.random.split(rng_key, num_restarts)``
        (start i is the fit with ``rng_key`` that key, up to float rounding);
        ``restart_objectives`` lists every start's final loss.

    Returns
    -------
    MCVQSVIResult

    Warns
    -----
    ConvergenceWarning
        When the loss still moves by more than ``tol`` in the second half.
    NumericalWarning
        When the loss or the parameters are not finite.
"""


def fit_mcvq_svi(x, num_vqs: int, num_states: int, *, mask=None, rng_key,
                 num_steps: int = 500, learning_rate: float = 0.05, variance_floor: float = 1e-3,
                 a=None, b=None, tol: float = 1e-3,
                 progress_bar: bool = False, checkpoint_path=None,
                 checkpoint_every: int | None = None, resume_from=None,
                 num_restarts: int = 1) -> MCVQSVIResult:
    """Maximum likelihood mu, sigma by SVI with r and s enumerated (``TraceEnum_ELBO``).

    The program is ``ppl_models.mcvq.model(enumerable=True)`` with mu, sigma as
    ``numpyro.param``; every r^c_d and s^c_k is marked for parallel enumeration
    and the guide is empty, so the loss is exactly -log p(X | mu, sigma) (the
    per-example program's likelihood, r and s summed out; module docstring).
    """
    return _fit(x, num_vqs, num_states, mask=mask, rng_key=rng_key, num_steps=num_steps,
                learning_rate=learning_rate, variance_floor=variance_floor, a=a, b=b, tol=tol,
                progress_bar=progress_bar, meanfield=False, caller="fit_mcvq_svi",
                checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                resume_from=resume_from, num_restarts=num_restarts)


def fit_mcvq_meanfield_svi(x, num_vqs: int, num_states: int, *, mask=None, rng_key,
                           num_steps: int = 500, learning_rate: float = 0.05,
                           variance_floor: float = 1e-3, a=None, b=None, tol: float = 1e-3,
                           progress_bar: bool = False, checkpoint_path=None,
                           checkpoint_every: int | None = None,
                           resume_from=None, num_restarts: int = 1) -> MCVQSVIResult:
    """SVI of the paper's mean-field guide (g shared, m per example), exact ELBO (sec. 3).

    Guide Q(r^c_d = k) = g_dk, Q(s^c_k = j) = m^c_kj (``numpyro.param`` on the
    simplex, starting from ``inference.mcvq.em.init``'s g and m); its sites are
    enumerated by ``TraceEnum_ELBO``, so the loss is exactly F_N
    (:func:`inference.mcvq.em.free_energy` at T = N) of the result's g, m, mu,
    sigma: ``-result.loss`` is the exact ELBO per example of the final guide.
    """
    return _fit(x, num_vqs, num_states, mask=mask, rng_key=rng_key, num_steps=num_steps,
                learning_rate=learning_rate, variance_floor=variance_floor, a=a, b=b, tol=tol,
                progress_bar=progress_bar, meanfield=True, caller="fit_mcvq_meanfield_svi",
                checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                resume_from=resume_from, num_restarts=num_restarts)


_EXAMPLE_DATA = """
    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> from inference.mcvq.scoring import exact_log_likelihood
    >>> data = mcvq.generate(jax.random.key(2), num_examples=40, dim=6, num_vqs=2,
    ...                      num_states=3)
"""

# Examples last (numpydoc), after the shared Parameters / Returns / Warns.
_EXAMPLES = {fit_mcvq_svi: _EXAMPLE_DATA + """\
    >>> result = fit_mcvq_svi(data.x, 2, 3, rng_key=jax.random.key(10), num_steps=2000,
    ...                       learning_rate=0.2)
    >>> bool(result.converged), result.mu.shape, result.g is None
    (True, (6, 2, 3), True)
    >>> # maximum likelihood: at least the likelihood of the planted parameters
    >>> bool(-result.loss >= exact_log_likelihood(data.x, data.mu, data.sigma).mean())
    True
""", fit_mcvq_meanfield_svi: _EXAMPLE_DATA + """\
    >>> result = fit_mcvq_meanfield_svi(data.x, 2, 3, rng_key=jax.random.key(10),
    ...                                 num_steps=2000, learning_rate=0.2)
    >>> bool(result.converged), result.g.shape, result.m.shape
    (True, (6, 2), (40, 2, 3))
    >>> result.g.argmax(axis=1).tolist(), data.r.tolist()  # the planted partition
    ([1, 1, 0, 1, 0, 0], [1, 1, 0, 1, 0, 0])
    >>> # -loss is an ELBO: at most the exact log-likelihood of the same mu, sigma
    >>> bool(-result.loss <= exact_log_likelihood(data.x, result.mu, result.sigma).mean())
    True
"""}

for _fn in (fit_mcvq_svi, fit_mcvq_meanfield_svi):
    if _fn.__doc__ is not None:  # None under python -OO
        _fn.__doc__ += _FIT_PARAMETERS + _EXAMPLES[_fn]
