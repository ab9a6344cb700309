"""Multiple Cause Vector Quantization (MCVQ; Ross and Zemel 2003, and their 2002 slides).

Generative story (Ross and Zemel (2003), sec. 2-3): K vector quantisers (VQs) of J states
each explain D data dimensions. For every example c::

    s_k ~ Categorical(b_k)                      k = 1..K   site "s" (N, K)
    r_d ~ Categorical(a_d)                      d = 1..D   site "r" (N, D)
    x_d ~ Normal(mu[d, r_d, s_{r_d}],           d = 1..D   site "x" (N, D)
                 sigma[d, r_d, s_{r_d}])

so one state of one VQ determines each dimension. mu and sigma have shape
(D, K, J); a (D, K) and b (K, J) are the selection priors, uniform by default
(the paper's choice, sec. 3: "we have assumed uniform priors for the selection
variables").

Structure of r (``shared_r``). By default r is drawn per example (inside the
examples plate), as the paper's generative model says (sec. 2). With the
factorised guide Q(r^c_d = k) = g_dk shared by every example and
Q(s^c_k = j) = m^c_kj, the negative ELBO of this program is exactly the
paper's free energy (sec. 3)

    F = sum_c [ sum_kj m^c_kj log(m^c_kj / b_kj) + sum_dk g_dk log(g_dk / a_dk)
                + sum_dkj g_dk m^c_kj ell^c_dkj ],  ell^c_dkj = -log N(x^c_d; mu_dkj, sigma_dkj),

whose g update carries the 1/C of the per-example formulation (temperature T = C
in :mod:`inference.mcvq.core`). ``shared_r=True`` draws one r for all examples (outside the
plate): the paper's "slightly different model formulation" whose free energy
counts the g term once (T = 1), the model its annealing ends at. Both are
tested against the fit's free energy in ``tests/test_mcvq.py``.

Missing data (sec. 5.2: unobserved dimensions are leaves and drop out):
``mask`` (bool (N, D), True = observed) masks the likelihood of x; entries
where ``mask`` is False are replaced by 0 before the likelihood, so NaN there
cannot poison the log-density. The selection r^c_d of a masked entry is
still drawn (only x is masked), so the g term of F counts every dimension of
every example and T = C stays the per-example constant.

Parameters are fixed when passed (``mu=``, ``sigma=``, ``a=``, ``b=``); mu and
sigma are otherwise sample sites with priors mu ~ Normal(0, ``prior_scale``) and
sigma ~ HalfNormal(``prior_scale``) (sites "mu", "sigma"), as the Bayesian MCVQ
of the slides (Ross and Zemel (2002)) puts priors on the Gaussian
parameters; a and b stay point values (the slides point-estimate them too).

Bayesian form (``bayesian=True``; "VB MCVQ" in the slides of Ross and Zemel (2002)). The
program that variational Bayes (``inference.mcvq.vb``) fits: conjugate priors on
the Gaussian parameters, in the precision parametrisation of Corduneanu & Bishop
(2001) and Bishop PRML sec. 10.2,

    tau_dkj ~ Gamma(a0, b0)               precisions 1 / sigma_dkj^2   site "tau" (D, K, J)
    mu_dkj ~ Normal(m0_d, beta0^-1/2)     means                       site "mu"  (D, K, J)

(x_d then has scale tau^-1/2). The prior on the means is the *independent*
Normal(m0, 1/beta0) of Corduneanu & Bishop (sec. 2), not the Normal-Gamma
mu | tau ~ Normal(m0, 1/(beta0 tau)) of PRML sec. 10.2: with independent priors
the posterior mean-field factorisation Q(mu) Q(tau) Q(R, S) loses no coupling
that the prior itself imposes, each factor stays conjugate (Normal and Gamma),
and a VQ or state that no data reaches has Q equal to its prior, so removing it
changes nothing (the same choice as ``ppl_models.vb_mixture``). The selection
priors stay fixed parameters, estimated by type-II maximum likelihood: the VQ
weights alpha_k enter as ``a`` = alpha broadcast to (D, K) (the same weights for
every dimension) and the state weights pi_kj as ``b``. Zero weights are allowed
(a pruned VQ or state is never selected). The hyperparameters are an
:class:`MCVQPrior` (``prior=``); by default :func:`prior_from_data` derives them
from x (see there), or, when x is not given, m0 = 0, beta0^-1/2 =
``prior_scale``, a0 = b0 = 1.

Enumerable form (``enumerable=True``). As written, x_d depends on s through
the index r_d, across the "vqs" plate, so NumPyro's plate-wise parallel
enumeration (TraceEnum_ELBO) cannot sum s out. With ``enumerable=True`` the
program draws the state of each VQ as its own site, "s_0" .. "s_{K-1}" (each
(N, 1), inside the examples plate only), and builds the mean and scale of x_d
by broadcasting, loc = sum_k [r_d = k] mu[d, k, s_k], so that enumerated values
(with their extra leading dimensions) flow through unchanged; r stays one site
in the examples and dims plates. The generative story and the joint density
are those of the default form (tested in ``tests/test_mcvq_baselines.py``);
enumerating every site costs about J^K K terms per example and dimension
(``inference.mcvq.baselines`` states the limit). ``shared_r=True`` is not
available in this form (r shared by all examples couples them: K^D terms).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003: sec. 2 (generative model), sec. 3
(variational EM), sec. 5 (experiments).
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: MCVQ and its variational Bayes version.
Corduneanu and Bishop, "Variational Bayesian model selection for mixture
distributions", AISTATS 2001, sec. 2 (independent conjugate priors, type-II ML weights).
Bishop, Pattern Recognition and Machine Learning (2006), sec. 10.2 (Normal and Gamma factors).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import (
    check_data,
    check_finite,
    check_positive,
    check_positive_int,
    check_probability,
    check_rng_key,
    is_traced,
)

__all__ = ["model", "MCVQPrior", "prior_from_data", "check_prior", "MCVQData", "generate",
           "random_mask", "INFO"]


class MCVQPrior(NamedTuple):
    """Hyperparameters of the Bayesian MCVQ program (module docstring).

    Attributes
    ----------
    mean : float or array (D,)
        m0, the prior mean of every mu_dkj.
    mean_scale : float
        beta0^-1/2 > 0, the prior standard deviation of every mu_dkj.
    shape : float
        a0 > 0, the Gamma shape of every precision tau_dkj.
    rate : float
        b0 > 0, its rate (prior mean of tau: a0 / b0).
    """

    mean: jax.Array
    mean_scale: jax.Array
    shape: jax.Array
    rate: jax.Array


def check_prior(prior: MCVQPrior) -> MCVQPrior:
    """Raise ``ValueError`` naming the field if a scale, shape or rate is not positive."""
    check_finite(prior.mean, "mean_prior_mean")
    for name, value in (("mean_prior_scale", prior.mean_scale),
                        ("precision_prior_shape", prior.shape),
                        ("precision_prior_rate", prior.rate)):
        check_positive(value, name)
    return prior


def prior_from_data(x, mask=None, *, mean_prior_mean=None, mean_prior_scale=None,
                    precision_prior_shape=None, precision_prior_rate=None) -> MCVQPrior:
    """Hyperparameters from the data scale, where not given (then checked).

    Defaults (the choices of ``ppl_models.vb_mixture.prior_from_data``, per
    dimension where it matters): m0 = the observed mean of every dimension;
    beta0^-1/2 = the data's standard deviation s = sqrt(mean over d of the
    observed variance of dimension d), so the prior on the means covers the
    data; a0 = 1 (an exponential prior on tau, worth 2 a0 = 2 pseudo-observations
    in the posterior shape a0 + n / 2, so a state with a few examples is ruled by
    its data); b0 = a0 (s / 10)^2, so that E[tau] = a0 / b0 = 100 / s^2: a priori
    a state's noise is a tenth of the data's spread (a VQ state is a cluster
    within the data cloud). *Measured choice*: with b0 = a0 s^2 the two pseudo
    observations of variance s^2 dominate the within-state variance of a few
    dozen examples, the states come out too broad and too few, and
    ``inference.mcvq.vb`` recovered the planted 3 VQs of
    ``generate(key(seed), 100, 12, 3, 4)`` (from K = J = 6) in 3 of 8 seeds,
    against 6 of 8 with (s / 10)^2 (5 of 8 with (s / 3)^2).

    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False are ignored (may be NaN).
    mask : bool array (N, D), optional
    mean_prior_mean, mean_prior_scale, precision_prior_shape, precision_prior_rate : optional
        m0 (scalar or (D,)), beta0^-1/2, a0, b0; positive where a scale, shape or rate.

    Returns
    -------
    MCVQPrior
    """
    x = jnp.asarray(x)
    obs = jnp.ones(x.shape, bool) if mask is None else jnp.asarray(mask, bool)
    w = obs.astype(x.dtype)
    count = jnp.maximum(jnp.sum(w, axis=0), 1.0)
    xz = jnp.where(obs, x, 0.0)
    mean = jnp.sum(xz, axis=0) / count
    var = jnp.sum(w * jnp.square(xz - mean), axis=0) / count
    spread = jnp.mean(var)
    spread = jnp.where(spread > 0, spread, 1.0)
    shape = 1.0 if precision_prior_shape is None else precision_prior_shape
    prior = MCVQPrior(
        mean=mean if mean_prior_mean is None else mean_prior_mean,
        mean_scale=jnp.sqrt(spread) if mean_prior_scale is None else mean_prior_scale,
        shape=shape,
        rate=None if precision_prior_rate is None else precision_prior_rate)
    check_prior(prior._replace(rate=1.0 if prior.rate is None else prior.rate))
    if prior.rate is None:
        prior = prior._replace(rate=jnp.asarray(shape) * spread / 100.0)
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32
    return MCVQPrior(*(jnp.asarray(v, dtype) for v in prior))


def _sizes(x, mu, a, b, num_vqs, num_states, num_examples, dim):
    if x is not None:
        num_examples, dim = jnp.shape(x)
    if mu is not None:
        dim, num_vqs, num_states = jnp.shape(mu)
    if a is not None:
        dim, num_vqs = jnp.shape(a)
    if b is not None:
        num_vqs, num_states = jnp.shape(b)
    if None in (num_examples, dim, num_vqs, num_states):
        raise ValueError("model: give x or num_examples and dim, and mu, or a and b, or "
                         "num_vqs and num_states")
    check_positive_int(int(num_vqs), "num_vqs")
    return num_examples, dim, num_vqs, num_states


def model(x=None, *, mask=None, mu=None, sigma=None, a=None, b=None, num_vqs=None,
          num_states=None, num_examples=None, dim=None, shared_r: bool = False,
          prior_scale: float = 10.0, enumerable: bool = False, bayesian: bool = False,
          prior: MCVQPrior | None = None):
    """The MCVQ program; see the module docstring for sites, priors and ``shared_r``.

    Parameters
    ----------
    x : array (num_examples, D), optional
        Observations; ``None`` samples them. Entries where ``mask`` is False may
        hold anything (NaN included).
    mask : bool array (num_examples, D), optional
        True where x is observed; default: everything observed.
    mu, sigma : arrays (D, K, J), optional
        Means and standard deviations of every state of every VQ per dimension;
        sample sites with priors when ``None``.
    a : array (D, K), optional
        Prior over the VQ that explains each dimension (rows sum to 1); uniform by default.
    b : array (K, J), optional
        Prior over the states of each VQ (rows sum to 1); uniform by default.
    num_vqs, num_states, num_examples, dim : int, optional
        Sizes K, J, N, D where they cannot be read from the other arguments.
    shared_r : bool
        Draw r once for all examples instead of per example.
    prior_scale : float
        Scale of the priors on mu and sigma.
    enumerable : bool
        The enumerable form (module docstring): sites "s_0" .. "s_{K-1}" of
        shape (num_examples, 1) in place of "s" (num_examples, K); same density.
    bayesian : bool
        The Bayesian form (module docstring): sites "tau" ~ Gamma(a0, b0) and
        "mu" ~ Normal(m0, beta0^-1/2) (each where ``sigma`` / ``mu`` is not given),
        sigma = tau^-1/2; ``prior_scale`` is then unused unless x is ``None``.
    prior : MCVQPrior, optional
        Hyperparameters of the Bayesian form (checked: a non-positive scale, shape
        or rate raises ``ValueError`` naming it); default :func:`prior_from_data`
        of x (with ``mask``).
    """
    if x is not None and not is_traced(x) and (mask is None or not is_traced(mask)):
        observed = None if mask is None else np.asarray(mask, bool)
        if observed is not None and observed.shape != np.shape(x):
            raise ValueError(f"mask must have the shape of x, {np.shape(x)}; got "
                             f"{observed.shape}")
        check_data(x if observed is None else np.where(observed, x, 0.0), "x")
    num_examples, dim, num_vqs, num_states = _sizes(x, mu, a, b, num_vqs, num_states,
                                                    num_examples, dim)
    if a is None:
        a = jnp.full((dim, num_vqs), 1.0 / num_vqs)
    if b is None:
        b = jnp.full((num_vqs, num_states), 1.0 / num_states)
    shape = [dim, num_vqs, num_states]
    if bayesian:
        if prior is None:
            prior = (prior_from_data(x, mask) if x is not None
                     else MCVQPrior(0.0, prior_scale, 1.0, 1.0))
        check_prior(prior)
        if sigma is None:
            tau = numpyro.sample("tau", dist.Gamma(prior.shape, prior.rate)
                                 .expand(shape).to_event(3))
            sigma = jax.lax.rsqrt(tau)
        if mu is None:
            loc = jnp.broadcast_to(jnp.reshape(jnp.asarray(prior.mean), (-1, 1, 1)), shape)
            mu = numpyro.sample("mu", dist.Normal(loc, prior.mean_scale).to_event(3))
    elif prior is not None:
        raise ValueError("model: prior= is for the Bayesian form; pass bayesian=True")
    if mu is None:
        mu = numpyro.sample("mu", dist.Normal(0.0, prior_scale).expand(shape).to_event(3))
    if sigma is None:
        sigma = numpyro.sample("sigma", dist.HalfNormal(prior_scale).expand(shape).to_event(3))
    if enumerable:
        if shared_r:
            raise ValueError("model: enumerable=True needs shared_r=False (a shared r couples "
                             "all examples); got shared_r=True")
        return _enumerable_body(x, mask, mu, sigma, a, b, num_examples, dim, num_vqs)
    with numpyro.plate("examples", num_examples, dim=-2):
        with numpyro.plate("vqs", num_vqs, dim=-1):
            s = numpyro.sample("s", dist.Categorical(b))  # (N, K)
        if not shared_r:
            with numpyro.plate("dims", dim, dim=-1):
                r = numpyro.sample("r", dist.Categorical(a))  # (N, D)
    if shared_r:
        with numpyro.plate("dims", dim, dim=-1):
            r = numpyro.sample("r", dist.Categorical(a))  # (D,)
    r = jnp.broadcast_to(r, (num_examples, dim))
    state = jnp.take_along_axis(s, r, axis=-1)  # s_{r_d}, (N, D)
    dims = jnp.arange(dim)
    loc, scale = mu[dims, r, state], sigma[dims, r, state]
    if mask is not None:
        mask = jnp.asarray(mask, bool)
        if x is not None:
            x = jnp.where(mask, x, 0.0)  # NaN at unobserved entries must not reach log_prob
    fn = dist.Normal(loc, scale)
    if mask is not None:
        fn = fn.mask(mask)
    with numpyro.plate("examples", num_examples, dim=-2), numpyro.plate("dims", dim, dim=-1):
        return numpyro.sample("x", fn, obs=x)


def _enumerable_body(x, mask, mu, sigma, a, b, num_examples, dim, num_vqs):
    """Sites s_0 .. s_{K-1}, r and x of the enumerable form; values may carry enum dims."""
    dims = jnp.arange(dim)
    with numpyro.plate("examples", num_examples, dim=-2):
        states = [numpyro.sample(f"s_{k}", dist.Categorical(b[k]).expand([num_examples, 1]))
                  for k in range(num_vqs)]  # each (N, 1), or (J, 1, ..., 1) when enumerated
        with numpyro.plate("dims", dim, dim=-1):
            r = numpyro.sample("r", dist.Categorical(a))  # (N, D), or (K, 1, ..., 1)
    loc = scale = 0.0
    for k, s_k in enumerate(states):  # loc = sum_k [r_d = k] mu[d, k, s_k]
        chosen = r == k
        loc = jnp.where(chosen, mu[dims, k, s_k], loc)
        scale = jnp.where(chosen, sigma[dims, k, s_k], scale)
    if mask is not None:
        mask = jnp.asarray(mask, bool)
        if x is not None:
            x = jnp.where(mask, x, 0.0)
    fn = dist.Normal(loc, scale)
    if mask is not None:
        fn = fn.mask(mask)
    with numpyro.plate("examples", num_examples, dim=-2), numpyro.plate("dims", dim, dim=-1):
        return numpyro.sample("x", fn, obs=x)


class MCVQData(NamedTuple):
    """Data drawn from a planted MCVQ.

    Attributes
    ----------
    x : array (num_examples, D)
        The complete data (also at entries ``mask`` marks missing).
    mask : bool array (num_examples, D)
        True where a fit may see x (all True unless ``missing_fraction > 0``).
    s : int32 array (num_examples, K)
        The state of every VQ in every example.
    r : int32 array (D,)
        The planted partition: the VQ that explains each dimension (shared by all
        examples, the ``shared_r`` program).
    mu, sigma : arrays (D, K, J)
    """

    x: jax.Array
    mask: jax.Array
    s: jax.Array
    r: jax.Array
    mu: jax.Array
    sigma: jax.Array


def random_mask(rng_key, num_examples: int, dim: int, missing_fraction: float):
    """A bool (num_examples, dim) mask with about ``missing_fraction`` entries False.

    Every row and every column keeps at least one observed entry (entry
    (i, i mod dim) and (j mod num_examples, j) stay True), so that the mask is
    valid for ``inference.mcvq.em.fit_mcvq``.
    """
    num_examples = check_positive_int(num_examples, "num_examples")
    dim = check_positive_int(dim, "dim")
    check_probability(missing_fraction, "missing_fraction")
    if missing_fraction >= 1:
        raise ValueError(f"missing_fraction must be below 1; got {missing_fraction}")
    return _random_mask(rng_key, num_examples, dim, missing_fraction)


def _random_mask(rng_key, num_examples, dim, missing_fraction):
    mask = jax.random.uniform(rng_key, (num_examples, dim)) >= missing_fraction
    rows = jnp.arange(num_examples)
    cols = jnp.arange(dim)
    mask = mask.at[rows, rows % dim].set(True)
    return mask.at[cols % num_examples, cols].set(True)


def generate(rng_key, num_examples: int = 100, dim: int = 12, num_vqs: int = 3,
             num_states: int = 4, *, separation: float = 3.0, noise_scale: float = 0.3,
             missing_fraction: float = 0.0) -> MCVQData:
    """A planted MCVQ and data drawn from it by the program.

    The D dimensions are split into K balanced groups at random (group sizes
    differ by at most one; ``dim >= num_vqs`` needed, so every VQ explains some
    dimension): the planted r, shared by all examples. Means mu ~ Normal(0,
    ``separation``) and standard deviations ``noise_scale`` everywhere; states
    s ~ uniform; then x is sampled from ``model(shared_r=True)`` with r
    conditioned to the partition.

    Parameters
    ----------
    rng_key : jax.random key
    num_examples, dim, num_vqs, num_states : int
        N, D, K, J.
    separation : float
        Standard deviation of the means (in units where ``noise_scale`` is the noise).
    noise_scale : float
        sigma of every state.
    missing_fraction : float
        Fraction of entries marked missing in ``mask`` (see :func:`random_mask`).

    Returns
    -------
    MCVQData
    """
    num_examples = check_positive_int(num_examples, "num_examples")
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    dim = check_positive_int(dim, "dim")
    if dim < num_vqs:
        raise ValueError(f"dim must be at least num_vqs={num_vqs} (every VQ explains a "
                         f"dimension); got {dim}")
    num_states = check_positive_int(num_states, "num_states")
    check_positive(separation, "separation")
    check_positive(noise_scale, "noise_scale")
    check_probability(missing_fraction, "missing_fraction")
    if missing_fraction >= 1:
        raise ValueError(f"missing_fraction must be below 1; got {missing_fraction}")
    check_rng_key(rng_key)
    return _generate(rng_key, float(separation), float(noise_scale), float(missing_fraction),
                     num_examples, dim, num_vqs, num_states)


@functools.partial(jax.jit, static_argnums=(4, 5, 6, 7))
def _generate(rng_key, separation, noise_scale, missing_fraction, num_examples, dim, num_vqs,
              num_states):
    """:func:`generate` after its checks, jitted (one compilation per set of sizes)."""
    keys = jax.random.split(rng_key, 4)
    r = jax.random.permutation(keys[0], jnp.arange(dim) % num_vqs).astype(jnp.int32)
    mu = separation * jax.random.normal(keys[1], (dim, num_vqs, num_states))
    sigma = jnp.full((dim, num_vqs, num_states), noise_scale)
    program = handlers.condition(model, {"r": r})
    trace = handlers.trace(handlers.seed(program, keys[2])).get_trace(
        None, mu=mu, sigma=sigma, num_examples=num_examples, shared_r=True)
    mask = _random_mask(keys[3], num_examples, dim, missing_fraction)
    return MCVQData(trace["x"]["value"], mask, trace["s"]["value"].astype(jnp.int32), r, mu,
                    sigma)


#: Metadata, registered under "mcvq" (see ``ppl_models.registry``).
INFO = register(ModelInfo(
    name="mcvq",
    model=model,
    generate=generate,
    observed_site="x",
    latent_sites={
        "s": "(num_examples, K) state of every VQ",
        "r": "(num_examples, D) VQ that explains each dimension ((D,) with shared_r=True)",
        "mu": "(D, K, J) means; a latent site only when mu=None",
        "sigma": "(D, K, J) standard deviations; a latent site only when sigma=None "
                 "(and bayesian=False)",
        "tau": "(D, K, J) precisions 1 / sigma^2; a latent site when bayesian=True and "
               "sigma=None",
        "s_0 .. s_{K-1}": "(num_examples, 1) state of each VQ, in place of s when "
                          "enumerable=True",
    },
    algorithms=("fit_mcvq", "fit_mcvq_stream", "infer_states", "reconstruct", "fit_vb_mcvq",
                "model_selection"),
    family="mcvq",
    contract=dict(generate=dict(num_examples=5, dim=4, num_vqs=2, num_states=2),
                  data=lambda data: data.x,
                  fixed=lambda data: {"mu": data.mu, "sigma": data.sigma},
                  unobserved=lambda data: {"num_examples": data.x.shape[0]}),
    reference=f"{REFERENCES['mcvq'].short}, sec. 2-3; {REFERENCES['mcvq_slides'].short}, "
              "slides (VB MCVQ)",
    story=r"""s_{ck} &\sim \mathrm{Categorical}(b_k) && k = 1, \dots, K \\
    r_{cd} &\sim \mathrm{Categorical}(a_d) && d = 1, \dots, D \\
    x_{cd} &\sim \mathcal{N}\big(\mu_{d r s},\ \sigma^2_{d r s}\big) && r = r_{cd},\ s = s_{cr}""",
    deviations=("Priors on mu and sigma when they are sample sites follow the slides' "
                "Bayesian MCVQ; the paper point-estimates them.",),
    figure="mcvq_shapes",
))
