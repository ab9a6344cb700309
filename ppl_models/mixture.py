"""Finite Gaussian mixtures, the G-Net-I of the YING-YANG machine (Xu 1995).

Generative story, for each example:

    y ~ Categorical(alpha)                    the component     site "y" ()
    x | y ~ Normal(m_y, Sigma_y)              the observation   site "x" (d,)

with mixing weights alpha (k,), means m (k, d) and covariances Sigma (k, d, d).
``covariance`` chooses the family: ``"full"`` (any Sigma_y, a ``MultivariateNormal``
with Cholesky factor), ``"diag"`` (Sigma_y diagonal) or ``"spherical"`` (Sigma_y =
sigma_y^2 I); the last two are ``Normal(m_y, sd_y).to_event(1)`` sites, so the
noise handlers of ``inference.program.handlers`` act on them: ``noiseless`` is the
sigma -> 0 limit whose energy is ||x - m_y||^2 (nearest-neighbour VQ, k-means;
paper eq. 21-22) and ``observation_noise`` sets sigma.

Parameters are fixed when passed (``weights=``, ``means=``, and ``scale_tril=``
(k, d, d) for "full", or ``scales=`` (k, d) for "diag" / (k,) for "spherical"),
otherwise sample sites with priors: alpha ~ Dirichlet(1), m_y ~ Normal(0,
``prior_scale``), standard deviations HalfNormal(``prior_scale``) and, for
"full", correlations LKJ(2) (sites "alpha", "m", "sd", "corr"). Summing y out
(``infer={"enumerate": "parallel"}``) gives the mixture density that NumPyro's
SVI and NUTS work on.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), Beijing, 1995: sec. 4 (eq. 13, 17-22), 5.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import check_data, check_positive, check_positive_int, check_rng_key

__all__ = ["model", "COVARIANCES", "MixtureData", "generate", "covariance_matrices", "INFO"]

#: Covariance families of the program.
COVARIANCES = ("full", "diag", "spherical")


def _check_covariance(covariance):
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance must be one of {COVARIANCES}; got {covariance!r}")


def model(x=None, *, weights=None, means=None, scale_tril=None, scales=None,
          covariance: str = "full", num_components=None, num_examples=None, dim=None,
          prior_scale: float = 10.0):
    """The Gaussian-mixture program; see the module docstring for sites and priors.

    Parameters
    ----------
    x : array (num_examples, d), optional
        Observations; ``None`` samples them.
    weights : array (k,), optional
        Mixing weights alpha (positive, summing to 1).
    means : array (k, d), optional
    scale_tril : array (k, d, d), optional
        Cholesky factors of Sigma_y (``covariance="full"``).
    scales : array (k, d) or (k,), optional
        Standard deviations (``"diag"`` / ``"spherical"``).
    covariance : {"full", "diag", "spherical"}
    num_components, num_examples, dim : int, optional
        Sizes where they cannot be read from the other arguments.
    prior_scale : float
        Scale of the priors on means and standard deviations.
    """
    _check_covariance(covariance)
    if x is not None:
        x = check_data(x, "x")
        num_examples, dim = jnp.shape(x)
    if means is not None:
        num_components, dim = jnp.shape(means)
    elif weights is not None:
        num_components = jnp.shape(weights)[0]
    if num_components is not None:
        check_positive_int(num_components, "num_components")
    if num_components is None or num_examples is None or dim is None:
        raise ValueError("model: give x or num_examples, means or num_components and dim")
    if weights is None:
        weights = numpyro.sample("alpha", dist.Dirichlet(jnp.ones(num_components)))
    if means is None:
        means = numpyro.sample("m", dist.Normal(0.0, prior_scale)
                               .expand([num_components, dim]).to_event(2))
    if covariance == "full":
        if scale_tril is None:
            sd = numpyro.sample("sd", dist.HalfNormal(prior_scale)
                                .expand([num_components, dim]).to_event(2))
            corr = numpyro.sample("corr", dist.LKJCholesky(dim, 2.0)
                                  .expand([num_components]).to_event(1))
            scale_tril = sd[..., :, None] * corr
    elif scales is None:
        shape = [num_components, dim] if covariance == "diag" else [num_components]
        scales = numpyro.sample("sd", dist.HalfNormal(prior_scale).expand(shape)
                                .to_event(len(shape)))
    with numpyro.plate("examples", num_examples):
        y = numpyro.sample("y", dist.Categorical(weights), infer={"enumerate": "parallel"})
        if covariance == "full":
            numpyro.sample("x", dist.MultivariateNormal(means[y], scale_tril=scale_tril[y]),
                           obs=x)
        else:
            sd = scales[y] if covariance == "diag" else scales[y][..., None]
            numpyro.sample("x", dist.Normal(means[y], sd).to_event(1), obs=x)


def covariance_matrices(covariance: str, *, scale_tril=None, scales=None, dim=None):
    """Sigma (k, d, d) from the program's parameters of the given family."""
    _check_covariance(covariance)
    if covariance == "full":
        return scale_tril @ jnp.swapaxes(scale_tril, -1, -2)
    scales = jnp.asarray(scales)
    if covariance == "spherical":
        scales = jnp.broadcast_to(scales[:, None], (scales.shape[0], dim))
    return jax.vmap(jnp.diag)(scales ** 2)


class MixtureData(NamedTuple):
    """Data drawn from a planted mixture.

    Attributes
    ----------
    x : array (num_examples, d)
    labels : int32 array (num_examples,)
        The component of every example.
    weights : array (k,)
    means : array (k, d)
    covariances : array (k, d, d)
    """

    x: jax.Array
    labels: jax.Array
    weights: jax.Array
    means: jax.Array
    covariances: jax.Array


def generate(rng_key, num_examples: int = 600, num_components: int = 4, dim: int = 2, *,
             separation: float = 4.0, unequal: bool = True, min_weight: float | None = None,
             max_elongation: float = 4.0) -> MixtureData:
    """A planted mixture with chosen separation, unequal sizes and shapes, and data from it.

    Means are spread so that neighbouring components are about ``separation``
    standard deviations apart (``separation`` 2-3: badly separated, overlapping;
    6 and more: well separated). With ``unequal=True`` the weights are uneven
    (Dirichlet(2), floored at ``min_weight``, default 1 / (4 k)) and every
    covariance has a random orientation and an elongation (ratio of largest to
    smallest standard deviation) up to ``max_elongation``; otherwise weights are
    equal and covariances are the identity. Data are drawn from the program.
    """
    num_examples = check_positive_int(num_examples, "num_examples")
    num_components = check_positive_int(num_components, "num_components")
    dim = check_positive_int(dim, "dim")
    separation = check_positive(separation, "separation")
    check_rng_key(rng_key)
    keys = jax.random.split(rng_key, 6)
    k = num_components
    if unequal:
        weights = jax.random.dirichlet(keys[0], 2.0 * jnp.ones(k))
        floor = 1.0 / (4 * k) if min_weight is None else float(min_weight)
        weights = jnp.maximum(weights, floor)
        weights = weights / weights.sum()
        rotations = jnp.linalg.qr(jax.random.normal(keys[1], (k, dim, dim)))[0]
        spread = jnp.exp(jax.random.uniform(keys[2], (k, dim), minval=0.0,
                                            maxval=math.log(max_elongation)))
        spread = spread / jnp.exp(jnp.mean(jnp.log(spread), axis=1, keepdims=True))
        scale_tril = jnp.linalg.cholesky(
            rotations @ (spread[..., None] ** 2 * jnp.swapaxes(rotations, -1, -2)))
    else:
        weights = jnp.full(k, 1.0 / k)
        scale_tril = jnp.broadcast_to(jnp.eye(dim), (k, dim, dim))
    # Means on a random cloud scaled so that the nearest pair is `separation` apart.
    raw = jax.random.normal(keys[3], (k, dim))
    if k > 1:
        gaps = jnp.linalg.norm(raw[:, None] - raw[None], axis=-1) + jnp.eye(k) * 1e9
        raw = raw * (separation / jnp.min(gaps))
    means = raw
    from numpyro import handlers

    trace = handlers.trace(handlers.seed(model, keys[4])).get_trace(
        None, weights=weights, means=means, scale_tril=scale_tril, num_examples=num_examples)
    return MixtureData(trace["x"]["value"], trace["y"]["value"].astype(jnp.int32), weights,
                       means, scale_tril @ jnp.swapaxes(scale_tril, -1, -2))


INFO = register(
    ModelInfo(
        name="mixture",
        model=model,
        generate=generate,
        observed_site="x",
        latent_sites={
            "y": "(num_examples,) component of each example (enumerable)",
            "alpha": "(k,) mixing weights; a latent site only when weights=None",
            "m": "(k, d) means; a latent site only when means=None",
            "sd": "standard deviations; a latent site only when scales / scale_tril are None",
            "corr": "(k, d, d) Cholesky factors of correlations (full covariance only)",
        },
        algorithms=("fit_mixture", "fit_mixture_stream", "fit_online", "fit_online_stream",
                    "select_num_components", "compare_criteria", "model_selection"),
        family="mixture",
        contract=dict(generate=dict(num_examples=6, num_components=2, dim=3),
                  data=lambda data: data.x,
                  # Spherical covariances: a Normal core, so the noise handlers apply.
                  fixed=lambda data: {"weights": data.weights, "means": data.means,
                                      "scales": jnp.ones(2), "covariance": "spherical"},
                  unobserved=lambda data: {"num_examples": data.x.shape[0]}),
        reference=f"{REFERENCES['yingyang'].short}, YING-YANG machine, sec. 4-5",
        story=r"""y_c &\sim \mathrm{Categorical}(\alpha) && \text{the component} \\
        x_c \mid y_c &\sim \mathcal{N}(m_{y_c}, \Sigma_{y_c}) && \Sigma_y = \sigma_y^2 I,\;
            \sigma \to 0: \text{ nearest mean (k-means)}""",
        deviations=("Priors on alpha, m and the covariances, absent from the paper, let "
                    "NumPyro's SVI and NUTS sample them; the paper's fits estimate them.",),
        figure="yingyang_selection",
    )
)
