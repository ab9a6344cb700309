"""The zoo's own programs with their parameters as ``numpyro.param`` sites, for
:func:`inference.fit_em`.

The programs of :mod:`ppl_models` take their parameters as arguments (or sample them
from priors). Each wrapper here calls one of them with ``numpyro.param`` sites in
place of the parameters it learns, so that the generic EM fits the very program that
the family's own fit reads:

* :func:`mixture_program`: :func:`ppl_models.mixture.model` (weights, means, standard
  deviations or Cholesky factors); with ``e_step="soft"`` it is the EM of
  :func:`inference.mixture.em.fit_mixture`, with ``"hard"`` its hard-cut EM, and with
  fixed equal weights and ``noise=None`` its k-means;
* :func:`mcvq_program`: :func:`ppl_models.mcvq.model` (mu and sigma), whose
  ``e_step="mean-field"`` fit is variational EM with a posterior factorised per
  example and unit (:func:`inference.mcvq.em.fit_mcvq` shares Q(r) between the
  examples instead);
* :func:`ppca_program`: the marginal (``collapsed=True``) branch of
  :func:`ppl_models.ppca.model` (W, mu, sigma), no discrete site, so ``fit_em``
  maximises its likelihood, the fixed point of Tipping and Bishop's EM
  (:func:`inference.ppca.em.fit_ppca` with ``noise="ml"``).

A parameter passed to a wrapper is fixed (not learned). The initial values drawn
under a key (random examples as means) come from the key ``fit_em`` gives every
restart; ``fit_em(..., init="program", init_params=...)`` starts at given values
instead (its first E-step there), as the families' fits do. ``tests/test_em_families.py``
shows each family's fit equal to ``fit_em`` on these programs from the same start.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proc. ICONIP, 1995; D. A. Ross and R. S. Zemel,
"Multiple cause vector quantization", NIPS 15, 2003; M. E. Tipping and C. M. Bishop,
"Probabilistic principal component analysis", Journal of the Royal Statistical
Society B 61(3), 1999.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro
from numpyro.distributions import constraints

from ppl_models import mcvq, mixture, ppca

__all__ = ["mixture_program", "mcvq_program", "ppca_program"]


def _spread(x):
    """Per-dimension standard deviation of the rows of x (1 where it is 0)."""
    std = jnp.std(x, axis=0)
    return jnp.where(std > 0, std, 1.0)


def _rows(key, x, count):
    """``count`` distinct rows of x drawn under ``key``."""
    return x[jax.random.choice(key, x.shape[0], (count,), replace=False)]


def mixture_program(x, num_components, *, covariance="diag", weights=None, scales=None,
                    scale_tril=None):
    """The Gaussian-mixture program (:func:`ppl_models.mixture.model`) with its
    parameters as ``numpyro.param`` sites.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        k.
    covariance : {"full", "diag", "spherical"}
        The family of the covariances, as in the program.
    weights : array (k,), optional
        Fixed mixing weights; default: the site ``"weights"`` (simplex, initially equal).
    scales : array (k, d) or (k,), optional
        Fixed standard deviations (``"diag"`` / ``"spherical"``); default: the site
        ``"scales"`` (positive, initially the data's per-dimension spread, or its mean
        for ``"spherical"``).
    scale_tril : array (k, d, d), optional
        Fixed Cholesky factors (``"full"``); default: the site ``"scale_tril"``
        (lower Cholesky, initially diagonal with the data's spread).

    The means are always the site ``"means"`` (initially ``num_components`` distinct
    examples drawn under the restart's key).

    Examples
    --------
    The sites: three parameters for :func:`inference.fit_em` to learn, the component
    ``"y"`` of every example its discrete latent site (``fit_em(mixture_program, x, 2,
    rng_key=...)`` is EM on it):

    >>> import numpy as np
    >>> from numpyro import handlers
    >>> x = np.random.default_rng(0).normal(size=(50, 2))
    >>> trace = handlers.trace(handlers.seed(mixture_program, 0)).get_trace(x, 2)
    >>> [name for name, site in trace.items() if site["type"] == "param"]
    ['weights', 'means', 'scales']
    >>> trace["y"]["value"].shape, trace["scales"]["value"].shape  # y: one per example
    ((50,), (2, 2))
    """
    x = jnp.asarray(x)
    k = int(num_components)
    dim = x.shape[1]
    spread = _spread(x)
    if weights is None:
        weights = numpyro.param("weights", jnp.full(k, 1.0 / k, x.dtype),
                                constraint=constraints.simplex)
    means = numpyro.param("means", lambda key: _rows(key, x, k))
    if covariance == "full":
        if scale_tril is None:
            scale_tril = numpyro.param(
                "scale_tril", jnp.broadcast_to(jnp.diag(spread), (k, dim, dim)),
                constraint=constraints.lower_cholesky)
        return mixture.model(x, weights=weights, means=means, scale_tril=scale_tril,
                             covariance=covariance)
    if scales is None:
        start = (jnp.broadcast_to(spread, (k, dim)) if covariance == "diag"
                 else jnp.full(k, jnp.sqrt(jnp.mean(spread ** 2)), x.dtype))
        scales = numpyro.param("scales", start, constraint=constraints.positive)
    return mixture.model(x, weights=weights, means=means, scales=scales,
                         covariance=covariance)


def mcvq_program(x, num_vqs, num_states, *, mask=None, a=None, b=None):
    """The MCVQ program (:func:`ppl_models.mcvq.model`, r per example) with mu and sigma
    as ``numpyro.param`` sites ``"mu"`` and ``"sigma"`` (positive), both (D, K, J).

    Parameters
    ----------
    x : array (num_examples, D)
    num_vqs, num_states : int
        K VQs of J states each.
    mask : bool array (num_examples, D), optional
        True where x is observed (the program's ``mask``).
    a : array (D, K), optional
    b : array (K, J), optional
        The selection priors, fixed (uniform by default, as in the program).

    Initially mu[:, k, j] is an example drawn under the restart's key and sigma the
    data's per-dimension spread (as :func:`inference.mcvq.core.init`, without its
    noise on mu). The discrete sites are ``"s"`` (N, K) and ``"r"`` (N, D), both inside
    the examples plate: ``fit_em``'s mean-field posterior has a factor for every
    example's r, where :func:`inference.mcvq.em.fit_mcvq` shares one (g) between them.

    Examples
    --------
    The parameters and the discrete sites of ``fit_em(mcvq_program, x, 2, 3,
    e_step="mean-field", rng_key=...)``:

    >>> import numpy as np
    >>> from numpyro import handlers
    >>> x = np.random.default_rng(0).normal(size=(30, 6))
    >>> trace = handlers.trace(handlers.seed(mcvq_program, 0)).get_trace(x, 2, 3)
    >>> {name: site["value"].shape for name, site in trace.items()
    ...  if site["type"] == "param" or site["name"] in ("s", "r")}
    {'mu': (6, 2, 3), 'sigma': (6, 2, 3), 's': (30, 2), 'r': (30, 6)}
    """
    x = jnp.asarray(x)
    k, j = int(num_vqs), int(num_states)
    dim = x.shape[1]
    observed = jnp.ones(x.shape, bool) if mask is None else jnp.asarray(mask, bool)
    weight = observed.astype(x.dtype)
    count = jnp.maximum(jnp.sum(weight, axis=0), 1.0)
    filled = jnp.where(observed, x, 0.0)
    centre = jnp.sum(filled, axis=0) / count
    spread = jnp.sqrt(jnp.sum(weight * jnp.square(filled - centre), axis=0) / count)
    spread = jnp.where(spread > 0, spread, 1.0)
    filled = jnp.where(observed, x, centre)

    def first_mu(key):
        rows = jax.random.choice(key, x.shape[0], (k * j,), replace=x.shape[0] < k * j)
        return jnp.moveaxis(filled[rows].reshape(k, j, dim), -1, 0)

    mu = numpyro.param("mu", first_mu)
    sigma = numpyro.param("sigma", jnp.broadcast_to(spread[:, None, None], (dim, k, j)),
                          constraint=constraints.positive)
    return mcvq.model(x, mask=mask, mu=mu, sigma=sigma, a=a, b=b)


def ppca_program(x, num_components, *, mean=None):
    """The marginal PPCA program (:func:`ppl_models.ppca.model` with ``collapsed=True``:
    x_n ~ Normal(mu, W^T W + sigma^2 I), z integrated out) with W, mu and sigma as
    ``numpyro.param`` sites ``"weights"`` (q, d), ``"mean"`` (d,) and ``"sigma"``
    (positive).

    No discrete site: :func:`inference.fit_em` fits it by maximum likelihood, the
    fixed point of Tipping and Bishop's EM (:func:`inference.ppca.em.fit_ppca`).

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        q.
    mean : array (d,), optional
        A fixed mu; default: the site ``"mean"`` (initially the data mean).

    Initially W has Normal(0, 1) entries times the data's standard deviation (drawn
    under the restart's key, as ``fit_ppca`` draws its start) and sigma that standard
    deviation.

    Examples
    --------
    The parameters of ``fit_em(ppca_program, x, 1, rng_key=...)``, and the program's
    log-likelihood there, that of the marginal program itself:

    >>> import numpy as np
    >>> from numpyro import handlers
    >>> from numpyro.infer.util import log_density
    >>> from ppl_models import ppca
    >>> x = np.random.default_rng(0).normal(size=(100, 4))
    >>> seeded = handlers.seed(ppca_program, 0)
    >>> trace = handlers.trace(seeded).get_trace(x, 1)
    >>> {name: site["value"].shape for name, site in trace.items() if site["type"] == "param"}
    {'weights': (1, 4), 'mean': (4,), 'sigma': ()}
    >>> start = {name: trace[name]["value"] for name in ("weights", "mean", "sigma")}
    >>> ours = log_density(seeded, (x, 1), {}, {})[0]
    >>> theirs = log_density(ppca.model, (x,), dict(start, collapsed=True), {})[0]
    >>> bool(abs(ours - theirs) < 1e-3)
    True
    """
    x = jnp.asarray(x)
    q = int(num_components)
    dim = x.shape[1]
    scale = jnp.sqrt(jnp.mean(jnp.var(x, axis=0)))
    weights = numpyro.param("weights",
                            lambda key: scale * jax.random.normal(key, (q, dim), x.dtype))
    if mean is None:
        mean = numpyro.param("mean", jnp.mean(x, axis=0))
    sigma = numpyro.param("sigma", scale, constraint=constraints.positive)
    return ppca.model(x, weights=weights, mean=mean, sigma=sigma, collapsed=True)
