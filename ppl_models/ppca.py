"""Probabilistic principal component analysis (PPCA) as a NumPyro program.

Generative story (Tipping & Bishop 1999, sec. 2-3; rows are examples, the rows of W
are the components), for examples n = 1..N in dimension d with q components:

    W ~ Normal(0, weight_scale^2)      (q, d) loading matrix     site "W" (when weights=None)
    mu ~ Normal(0, mean_scale^2)       (d,) mean                 site "mu" (when mean=None)
    sigma ~ HalfNormal(1)              noise standard deviation  site "sigma" (when sigma=None)
    z_n ~ Normal(0, I_q)               (q,) latent coordinates   site "z" (N, q)
    x_n | z_n ~ Normal(z_n W + mu, sigma^2 I_d)                  site "x" (N, d), observed

Integrating z out gives the marginal x_n ~ Normal(mu, W^T W + sigma^2 I_d), the
*collapsed* program (``collapsed=True``: no z site, one multivariate Normal per
example), which NUTS samples cheaply and whose log-density is the likelihood that
Tipping & Bishop's EM maximises (with ``sufficient_statistics=True`` the rows are
observed together through their mean and scatter, the same density at a cost that does
not grow with N: the reference evidence uses it). The observation is a ``Normal`` (with
``to_event(1)``), so the noise handlers of :mod:`inference.program.handlers` apply:
``observation_noise(model, sigma=...)`` sets sigma and ``noiseless(model)`` is the
sigma -> 0 limit, where x = z W + mu exactly and the maximum-likelihood W spans
the principal subspace (PCA; Roweis 1998 gives its EM algorithm,
:func:`inference.ppca.em.fit_ppca` with ``noise=None``).

Where ``weights``, ``mean`` or ``sigma`` is given it is a fixed parameter, not a
sample site, so the same program serves EM (parameters fixed, z inferred), SVI and
NUTS (parameters sampled).

Symmetry: W -> Q W, z -> z Q^T for any orthogonal Q (q, q) leaves the program
unchanged; only W^T W and the row space of W are identified.

References
----------
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", Journal of
the Royal Statistical Society B 61(3), 611-622, 1999.
S. Roweis, "EM algorithms for PCA and SPCA", Advances in Neural Information Processing
Systems 10 (NIPS 1997, published 1998).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ppl_models.distributions import GaussianRows
from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import (
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
    is_traced,
)

__all__ = ["PPCAData", "generate", "model", "marginal_covariance", "INFO"]


def _size(value, name):
    return None if value is None else check_positive_int(value, name)


def _shape_of(value, name, ndim):
    if is_traced(value):
        return jnp.shape(value)
    arr = np.asarray(value)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values; all entries must be finite")
    return arr.shape


def model(x=None, *, num_examples: int | None = None, num_components: int | None = None,
          dim: int | None = None, weights=None, mean=None, sigma=1.0, collapsed: bool = False,
          weight_scale: float = 1.0, mean_scale: float = 10.0,
          sufficient_statistics: bool = False):
    """The PPCA program (module docstring).

    Parameters
    ----------
    x : array (num_examples, d), optional
        Observations; ``None`` samples them.
    num_examples, num_components, dim : int, optional
        N, q and d where they cannot be read from ``x``, ``weights`` or ``mean``.
    weights : array (q, d), optional
        W (rows: components); ``None`` makes it a sample site "W" with prior
        Normal(0, weight_scale^2).
    mean : array (d,), optional
        mu; ``None`` makes it a sample site "mu" with prior Normal(0, mean_scale^2).
    sigma : float, optional
        Noise standard deviation (> 0); ``None`` makes it a sample site "sigma" with
        prior HalfNormal(1).
    collapsed : bool
        Integrate z out: x_n ~ MultivariateNormal(mu, W^T W + sigma^2 I) (no "z" site).
    weight_scale, mean_scale : float
        Prior scales of W and mu.
    sufficient_statistics : bool
        With ``collapsed=True``: observe the N rows as one event of
        :class:`ppl_models.distributions.GaussianRows` (site "x" outside the plate),
        whose log-density, the same sum over examples, is computed from the rows' mean
        and scatter: O(d^3) per evaluation instead of O(N d^2). For the reference
        evidence (tempered SMC evaluates the likelihood on thousands of particles);
        it has no per-example log-likelihoods, so LOO and WAIC need the default.
    """
    if x is not None:
        x = check_data(x, "x")
        num_examples, dim = jnp.shape(x)
    num_examples = _size(num_examples, "num_examples")
    if weights is not None:
        num_components, weight_dim = _shape_of(weights, "weights", 2)
        if dim is not None and weight_dim != dim:
            raise ValueError(f"weights must have shape (q, d) with d = {dim}; got "
                             f"{jnp.shape(weights)}")
        dim = weight_dim
    if mean is not None:
        (mean_dim,) = _shape_of(mean, "mean", 1)
        if dim is not None and mean_dim != dim:
            raise ValueError(f"mean must have shape (d,) = ({dim},); got {jnp.shape(mean)}")
        dim = mean_dim
    num_components, dim = _size(num_components, "num_components"), _size(dim, "dim")
    for name, value, sources in (("num_examples", num_examples, "x"),
                                 ("num_components", num_components, "weights"),
                                 ("dim", dim, "x, weights or mean")):
        if value is None:
            raise ValueError(f"{name} must be given when {sources} is None; got None")
    if sigma is not None and not is_traced(sigma):
        check_positive(sigma, "sigma")
    if sufficient_statistics and not collapsed:
        raise ValueError("sufficient_statistics=True needs collapsed=True (the statistics "
                         "summarise the marginal of x, with z integrated out)")
    if weights is None:
        weights = numpyro.sample("W", dist.Normal(0.0, weight_scale)
                                 .expand([num_components, dim]).to_event(2))
    if mean is None:
        mean = numpyro.sample("mu", dist.Normal(0.0, mean_scale).expand([dim]).to_event(1))
    if sigma is None:
        sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    weights, mean = jnp.asarray(weights), jnp.asarray(mean)
    if collapsed:
        covariance = marginal_covariance(weights, sigma)
        if sufficient_statistics:
            numpyro.sample("x", GaussianRows(mean, covariance, num_examples), obs=x)
            return
        with numpyro.plate("examples", num_examples):
            numpyro.sample("x", dist.MultivariateNormal(mean, covariance), obs=x)
        return
    with numpyro.plate("examples", num_examples):
        z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([num_components]).to_event(1))
        numpyro.sample("x", dist.Normal(z @ weights + mean, sigma).to_event(1), obs=x)


def marginal_covariance(weights, sigma):
    """C = W^T W + sigma^2 I (d, d), the covariance of x with z integrated out."""
    weights = jnp.asarray(weights)
    return weights.T @ weights + jnp.square(sigma) * jnp.eye(weights.shape[1],
                                                               dtype=weights.dtype)


class PPCAData(NamedTuple):
    """Data drawn from a planted PPCA program.

    Attributes
    ----------
    x : array (num_examples, dim)
    weights : array (num_components, dim)
        The planted W: orthogonal rows with norms spread from 3 down to 1.5.
    mean : array (dim,)
    noise : float
        sigma.
    """

    x: jax.Array
    weights: jax.Array
    mean: jax.Array
    noise: float


def generate(rng_key, num_examples: int, dim: int, num_components: int,
             noise: float = 0.1) -> PPCAData:
    """A planted PPCA program and ``num_examples`` draws from it.

    W has orthogonal rows in random directions with norms evenly spaced from 3
    down to 1.5 (distinct principal variances 9 ... 2.25, well above sigma^2, so
    the principal subspace and its axes are well identified); mu ~ Normal(0, 1).
    The data are drawn from :func:`model` with these parameters fixed.

    Parameters
    ----------
    rng_key : jax.random key
    num_examples : int
    dim : int
        d >= num_components.
    num_components : int
        q.
    noise : float
        sigma > 0.
    """
    check_rng_key(rng_key)
    num_examples = check_positive_int(num_examples, "num_examples")
    num_components = check_positive_int(num_components, "num_components")
    dim = check_positive_int(dim, "dim")
    if dim < num_components:
        raise ValueError(f"dim must be at least num_components={num_components}; got {dim}")
    if isinstance(noise, bool) or not isinstance(noise, int | float | np.floating | np.integer):
        raise TypeError(f"noise must be a positive number; got {noise!r}")
    check_positive(noise, "noise")
    key_w, key_mu, key_x = jax.random.split(rng_key, 3)
    directions = jnp.linalg.qr(jax.random.normal(key_w, (dim, num_components)))[0].T
    norms = jnp.linspace(3.0, 1.5, num_components)
    weights = norms[:, None] * directions
    mean = jax.random.normal(key_mu, (dim,))
    trace = handlers.trace(handlers.seed(model, key_x)).get_trace(
        None, weights=weights, mean=mean, sigma=float(noise), num_examples=num_examples)
    return PPCAData(trace["x"]["value"], weights, mean, float(noise))


INFO = register(
    ModelInfo(
        name="ppca",
        model=model,
        generate=generate,
        observed_site="x",
        latent_sites={
            "z": "(num_examples, q) latent coordinates (absent with collapsed=True)",
            "W": "(q, d) loading matrix, rows = components; a site only when weights=None",
            "mu": "(d,) mean; a site only when mean=None",
            "sigma": "noise standard deviation; a site only when sigma=None",
        },
        algorithms=("fit_ppca",),
        reference=f"{REFERENCES['ppca'].short}, sec. 2-3; {REFERENCES['ppca_em'].short}",
        story=r"""z_n &\sim \mathcal{N}(0, I_q) && \text{latent coordinates} \\
            x_n \mid z_n &\sim \mathcal{N}(z_n W + \mu, \sigma^2 I_d) && W \in
                \mathbb{R}^{q \times d} \\
            x_n &\sim \mathcal{N}(\mu, W^\top W + \sigma^2 I_d) && \text{collapsed; }
                \sigma \to 0: \text{ PCA}""",
        deviations=("Rows are examples and the rows of W the components (the paper: "
                    "x = W z + mu); priors on W, mu and sigma let NUTS and SVI sample them.",),
        family="ppca",
        contract=dict(generate=dict(num_examples=8, dim=4, num_components=2),
                      data=lambda data: data.x,
                      fixed=lambda data: {"weights": data.weights, "mean": data.mean,
                                          "sigma": data.noise},
                      unobserved=lambda data: {"num_examples": data.x.shape[0]}),
    )
)
