"""The Bayesian Gaussian mixture that variational Bayes fits (Corduneanu & Bishop 2001).

Generative story (the mixture of ``ppl_models.mixture`` with conjugate priors on
the component parameters), for components j = 1..k and examples i = 1..N:

    Lambda_j ~ Wishart(nu0, W0)                  precision matrix    site "Lambda" (k, d, d)
    m_j ~ Normal(m0, beta0^-1 I)                 mean                site "m"      (k, d)
    y_i ~ Categorical(alpha)                     component           site "y"      (N,)
    x_i | y_i ~ Normal(m_{y_i}, Lambda_{y_i}^-1) observation         site "x"      (N, d)

With ``covariance="diag"`` the precision matrices are diagonal, with independent
Gamma priors on their entries (Corduneanu & Bishop's prior in one dimension):

    tau_jd ~ Gamma(nu0 / 2, rate (W0^-1)_dd / 2)    precisions          site "tau"    (k, d)
    x_i | y_i ~ Normal(m_{y_i}, diag(tau_{y_i})^-1)

(a Gamma(nu / 2, rate 1 / (2 w)) variable is a one-dimensional Wishart(nu, w),
so both families share the hyperparameters).

The mixing weights alpha are *fixed parameters*, not sample sites: Corduneanu &
Bishop (2001, sec. 2) estimate them by type-II maximum likelihood (maximising
the variational bound), which is what lets a component's weight reach zero so
that the component can be removed. The prior on the means is the independent
Normal(m0, beta0^-1 I) of Corduneanu & Bishop (sec. 2), not the coupled
Normal-Wishart m_j | Lambda_j ~ Normal(m0, (beta0 Lambda_j)^-1) of Bishop PRML
sec. 10.2 and scikit-learn's ``BayesianGaussianMixture``: with independent
priors the posterior factorises naturally as Q(m) Q(Lambda) Q(y), the
approximation of the paper (``inference.mixture.vb``).

Wishart(nu, W) has density proportional to ``|Lambda|^((nu - d - 1) / 2)
exp(-tr(W^-1 Lambda) / 2)`` and mean nu W (PRML appendix B, eq. B.78-B.81); it
needs nu > d - 1. NumPyro has no Wishart distribution, so :class:`Wishart`
provides one: exact log-density, and sampling by the Bartlett decomposition
(Lambda = L A A^T L^T with W = L L^T, A lower triangular, A_ii^2 ~ chi^2(nu - i
+ 1) and A_ij ~ Normal(0, 1) below the diagonal). Its support is NumPyro's
``positive_definite`` constraint, so NUTS and SVI with autoguides run on the
program through the usual bijection (Cholesky factor with a log-diagonal).

Hyperparameters (:func:`prior_from_data`; the program's keyword arguments):

* ``mean_prior_mean`` m0 (d,): default the data mean;
* ``mean_prior_scale`` beta0^-1/2 > 0, the prior standard deviation of every
  coordinate of a mean: default the data's standard deviation
  sqrt(trace(Cov x) / d), so the prior covers the data cloud;
* ``dof_prior`` nu0 > d - 1: default d (scikit-learn's default, the smallest
  integer that makes the prior proper in every dimension);
* ``covariance_prior`` W0^-1 (d, d) positive definite (a positive scalar means a
  multiple of I): default (trace(Cov x) / d) I. Under the prior E[Lambda] =
  nu0 W0.

References
----------
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection
for mixture distributions", AISTATS, sec. 2 (model and priors).
Bishop, C. M. (2006), Pattern Recognition and Machine Learning, sec. 10.2 and
appendix B (Wishart distribution).
Bartlett, M. S. (1933), on the theory of statistical regression (the
decomposition used for sampling).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import multigammaln
from numpyro.distributions import constraints
from numpyro.distributions.util import validate_sample

from ppl_models import mixture
from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import check_choice, check_data, check_positive, is_traced

__all__ = ["Wishart", "VBPrior", "prior_from_data", "check_prior", "model", "INFO"]


def _tri_solve(tril, b):
    return jax.scipy.linalg.solve_triangular(tril, b, lower=True)


class Wishart(dist.Distribution):
    """Wishart distribution over positive-definite (d, d) matrices.

    Parameters
    ----------
    dof : float or array (batch,)
        Degrees of freedom nu > d - 1.
    scale_tril : array (batch, d, d), optional
        Lower Cholesky factor L of the scale matrix W = L L^T.
    scale_matrix : array (batch, d, d), optional
        The scale matrix W (give exactly one of the three matrix arguments).
    rate_matrix : array (batch, d, d), optional
        Its inverse W^-1 (the "covariance prior" of scikit-learn).

    Notes
    -----
    log p(Lambda) = -(nu/2) log|W| - (nu d / 2) log 2 - log Gamma_d(nu/2)
    + ((nu - d - 1)/2) log|Lambda| - tr(W^-1 Lambda) / 2 (PRML eq. B.78-B.79).
    Samples use the Bartlett decomposition (module docstring).

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> w = Wishart(5.0, scale_matrix=jnp.eye(2))
    >>> w.sample(jax.random.key(0), (3,)).shape
    (3, 2, 2)
    >>> bool(jnp.allclose(w.mean, 5.0 * jnp.eye(2)))
    True
    """

    arg_constraints = {"dof": constraints.positive,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.positive_definite
    reparametrized_params = ["scale_tril"]

    def __init__(self, dof, scale_tril=None, scale_matrix=None, rate_matrix=None, *,
                 validate_args=None):
        given = [a is not None for a in (scale_tril, scale_matrix, rate_matrix)]
        if sum(given) != 1:
            raise ValueError("Wishart: give exactly one of scale_tril, scale_matrix, rate_matrix")
        if scale_matrix is not None:
            scale_tril = jnp.linalg.cholesky(scale_matrix)
        elif rate_matrix is not None:
            rate_tril = jnp.linalg.cholesky(rate_matrix)
            eye = jnp.broadcast_to(jnp.eye(rate_tril.shape[-1], dtype=rate_tril.dtype),
                                   rate_tril.shape)
            # W = R^-T R^-1 for W^-1 = R R^T; its Cholesky factor via the flipped matrix.
            inv_t = jnp.swapaxes(_tri_solve(rate_tril, eye), -1, -2)
            scale_tril = jnp.linalg.cholesky(inv_t @ jnp.swapaxes(inv_t, -1, -2))
        scale_tril = jnp.asarray(scale_tril)
        dim = scale_tril.shape[-1]
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(dof), scale_tril.shape[:-2])
        self.dof = jnp.broadcast_to(jnp.asarray(dof, dtype=scale_tril.dtype), batch_shape)
        self.scale_tril = jnp.broadcast_to(scale_tril, batch_shape + (dim, dim))
        self.dim = dim
        super().__init__(batch_shape=batch_shape, event_shape=(dim, dim),
                         validate_args=validate_args)

    @property
    def scale_matrix(self):
        """W = L L^T."""
        return self.scale_tril @ jnp.swapaxes(self.scale_tril, -1, -2)

    @property
    def mean(self):
        """E[Lambda] = nu W."""
        return self.dof[..., None, None] * self.scale_matrix

    def expected_log_det(self):
        """``E[log |Lambda|] = sum_i psi((nu + 1 - i) / 2) + d log 2 + log|W|`` (PRML eq. B.81)."""
        i = jnp.arange(1, self.dim + 1, dtype=self.dof.dtype)
        digammas = jax.scipy.special.digamma((self.dof[..., None] + 1.0 - i) / 2.0)
        log_det_w = 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.scale_tril, axis1=-2, axis2=-1)),
                                  axis=-1)
        return jnp.sum(digammas, axis=-1) + self.dim * jnp.log(2.0) + log_det_w

    def entropy(self):
        """H = -E[log p(Lambda)] (PRML eq. B.82)."""
        return -(self._log_normalizer() + 0.5 * (self.dof - self.dim - 1.0)
                 * self.expected_log_det() - 0.5 * self.dof * self.dim)

    def _log_normalizer(self):
        log_det_w = 2.0 * jnp.sum(jnp.log(jnp.diagonal(self.scale_tril, axis1=-2, axis2=-1)),
                                  axis=-1)
        return (-0.5 * self.dof * log_det_w - 0.5 * self.dof * self.dim * jnp.log(2.0)
                - multigammaln(0.5 * self.dof, self.dim))

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + self.batch_shape
        d = self.dim
        key_chi, key_normal = jax.random.split(key)
        i = jnp.arange(d, dtype=self.dof.dtype)
        # A_ii^2 ~ chi^2(nu - i) (i from 0) = 2 Gamma((nu - i) / 2).
        chi2 = 2.0 * jax.random.gamma(key_chi, (self.dof[..., None] - i) / 2.0,
                                      shape + (d,), dtype=self.dof.dtype)
        normal = jax.random.normal(key_normal, shape + (d, d), dtype=self.dof.dtype)
        a = jnp.tril(normal, -1) + jnp.sqrt(chi2)[..., None] * jnp.eye(d, dtype=normal.dtype)
        la = self.scale_tril @ a
        return la @ jnp.swapaxes(la, -1, -2)

    @validate_sample
    def log_prob(self, value):
        tril = jnp.linalg.cholesky(value)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(tril, axis1=-2, axis2=-1)), axis=-1)
        scale_tril = jnp.broadcast_to(self.scale_tril, jnp.shape(value))
        trace = jnp.sum(_tri_solve(scale_tril, tril) ** 2, axis=(-2, -1))
        return self._log_normalizer() + 0.5 * (self.dof - self.dim - 1.0) * log_det - 0.5 * trace



class VBPrior(NamedTuple):
    """Hyperparameters of the Bayesian mixture (module docstring).

    Attributes
    ----------
    mean : array (d,)
        m0, the prior mean of every component mean.
    mean_scale : float
        beta0^-1/2, the prior standard deviation of each coordinate of a mean.
    dof : float
        nu0 > d - 1, degrees of freedom of the Wishart prior.
    covariance : array (d, d)
        W0^-1, the inverse Wishart scale (positive definite).
    """

    mean: jax.Array
    mean_scale: float
    dof: float
    covariance: jax.Array


def _positive_scalar(value, name):
    if is_traced(value):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a positive number; got {value!r}") from err
    if not (np.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be positive and finite; got {value!r}")
    return number


def check_prior(dim: int, *, mean_prior_mean, mean_prior_scale, dof_prior,
                covariance_prior) -> VBPrior:
    """Validate hyperparameters for data of dimension ``dim``; return a :class:`VBPrior`.

    Raises
    ------
    ValueError
        ``mean_prior_scale`` not positive, ``dof_prior`` not above d - 1,
        ``covariance_prior`` not a positive scalar or a symmetric positive-definite
        (d, d) matrix, ``mean_prior_mean`` not finite of shape (d,).
    """
    mean_prior_scale = _positive_scalar(mean_prior_scale, "mean_prior_scale")
    dof_prior = _positive_scalar(dof_prior, "dof_prior")
    if not is_traced(dof_prior) and dof_prior <= dim - 1:
        raise ValueError(f"dof_prior must exceed d - 1 = {dim - 1} (a proper Wishart); "
                         f"got {dof_prior}")
    mean = jnp.asarray(mean_prior_mean, dtype=jnp.result_type(float))
    if not is_traced(mean_prior_mean):
        arr = np.asarray(mean_prior_mean, dtype=float)
        if arr.ndim == 0:
            arr = np.full(dim, float(arr))
            mean = jnp.full(dim, mean)
        if arr.shape != (dim,) or not np.all(np.isfinite(arr)):
            raise ValueError(f"mean_prior_mean must be a finite vector of shape ({dim},); "
                             f"got {mean_prior_mean!r}")
    if np.ndim(covariance_prior) == 0:
        covariance = _positive_scalar(covariance_prior, "covariance_prior") * jnp.eye(dim)
    else:
        covariance = jnp.asarray(covariance_prior, dtype=jnp.result_type(float))
        if not is_traced(covariance_prior):
            arr = np.asarray(covariance_prior, dtype=float)
            ok = (arr.shape == (dim, dim) and np.all(np.isfinite(arr))
                  and np.allclose(arr, arr.T, rtol=1e-5, atol=1e-8 * np.abs(arr).max()))
            if ok:
                ok = bool(np.linalg.eigvalsh(arr).min() > 0)
            if not ok:
                raise ValueError(
                    "covariance_prior must be a positive scalar or a symmetric positive-"
                    f"definite matrix of shape ({dim}, {dim}); got {covariance_prior!r}")
    return VBPrior(mean, mean_prior_scale, dof_prior, covariance)


def prior_from_data(x, *, mean_prior_mean=None, mean_prior_scale=None, dof_prior=None,
                    covariance_prior=None) -> VBPrior:
    """Hyperparameters with every ``None`` replaced by its data-derived default.

    Parameters
    ----------
    x : array (num_examples, d)
        The data; only its mean and its mean variance s^2 = trace(Cov x) / d are used.
    mean_prior_mean, mean_prior_scale, dof_prior, covariance_prior : optional
        See the module docstring; defaults m0 = mean of x, beta0^-1/2 = s, nu0 = d,
        W0^-1 = s^2 I.

    Returns
    -------
    VBPrior

    Raises
    ------
    ValueError
        Bad data (see ``check_data``), data with zero variance when a default needs
        its scale, or a bad hyperparameter (:func:`check_prior`).
    """
    x = check_data(x, "x")
    dim = x.shape[1]
    needs_data = mean_prior_mean is None or mean_prior_scale is None or covariance_prior is None
    if needs_data and is_traced(x):
        raise ValueError("x is traced (inside jit), so the data-derived default "
                         "hyperparameters cannot be computed; give them explicitly")
    # The defaults are computed with numpy: concrete numbers even inside a jit trace.
    data = np.asarray(x, dtype=np.float64) if needs_data else None
    if mean_prior_mean is None:
        mean_prior_mean = data.mean(axis=0)
    if mean_prior_scale is None or covariance_prior is None:
        variance = float(np.mean(np.var(data, axis=0)))
        if not variance > 0:
            raise ValueError("x has zero variance, so the default prior scales "
                             "(mean_prior_scale, covariance_prior) are undefined; give them")
        if mean_prior_scale is None:
            mean_prior_scale = variance ** 0.5
        if covariance_prior is None:
            covariance_prior = variance
    if dof_prior is None:
        dof_prior = float(dim)
    return check_prior(dim, mean_prior_mean=mean_prior_mean, mean_prior_scale=mean_prior_scale,
                       dof_prior=dof_prior, covariance_prior=covariance_prior)


def model(x=None, *, weights, mean_prior_mean=None, mean_prior_scale=None, dof_prior=None,
          covariance_prior=None, covariance="full", num_examples=None, dim=None):
    """The Bayesian mixture program; sites and priors in the module docstring.

    Parameters
    ----------
    x : array (num_examples, d), optional
        Observations; ``None`` samples them (then give ``num_examples`` and the four
        hyperparameters, or ``dim`` when ``mean_prior_mean`` is a scalar).
    weights : array (k,)
        Mixing weights alpha (fixed parameters: positive, summing to 1).
    mean_prior_mean, mean_prior_scale, dof_prior, covariance_prior : optional
        Hyperparameters m0, beta0^-1/2, nu0, W0^-1; ``None`` derives them from ``x``
        (:func:`prior_from_data`).
    covariance : {"full", "diag"}
        Full precision matrices (site "Lambda", Wishart prior) or diagonal ones
        (site "tau", Gamma priors; only the diagonal of ``covariance_prior`` is used).
    num_examples, dim : int, optional
        Sizes when ``x`` is ``None``.
    """
    check_choice(covariance, "covariance", ("full", "diag"))
    check_positive(weights, "weights")
    weights = jnp.asarray(weights)
    k = weights.shape[0]
    hyper = dict(mean_prior_mean=mean_prior_mean, mean_prior_scale=mean_prior_scale,
                 dof_prior=dof_prior, covariance_prior=covariance_prior)
    if x is not None:
        x = check_data(x, "x")
        num_examples, dim = jnp.shape(x)
        if any(value is None for value in hyper.values()):
            prior = prior_from_data(x, **hyper)
        else:
            prior = check_prior(dim, **hyper)
    else:
        if dim is None:
            dim = int(np.shape(mean_prior_mean)[0]) if np.ndim(mean_prior_mean) else None
        if num_examples is None or dim is None or any(
                h is None for h in (mean_prior_mean, mean_prior_scale, dof_prior,
                                    covariance_prior)):
            raise ValueError("model: without x give num_examples, dim (or a vector "
                             "mean_prior_mean) and all four prior hyperparameters")
        prior = check_prior(dim, mean_prior_mean=mean_prior_mean,
                            mean_prior_scale=mean_prior_scale, dof_prior=dof_prior,
                            covariance_prior=covariance_prior)
    if covariance == "full":
        precision = numpyro.sample(
            "Lambda", Wishart(jnp.full(k, prior.dof), rate_matrix=prior.covariance).to_event(1))
    else:
        rate = jnp.diagonal(prior.covariance) / 2.0
        precision = numpyro.sample(
            "tau", dist.Gamma(prior.dof / 2.0, rate).expand([k, dim]).to_event(2))
    means = numpyro.sample(
        "m", dist.Normal(prior.mean, prior.mean_scale).expand([k, dim]).to_event(2))
    with numpyro.plate("examples", num_examples):
        y = numpyro.sample("y", dist.Categorical(weights), infer={"enumerate": "parallel"})
        if covariance == "full":
            numpyro.sample("x", dist.MultivariateNormal(means[y],
                                                        precision_matrix=precision[y]), obs=x)
        else:
            numpyro.sample("x", dist.Normal(means[y], jax.lax.rsqrt(precision[y])).to_event(1),
                           obs=x)


#: Metadata, registered under "vb_mixture" (see ``ppl_models.registry``). Data: the
#: planted mixtures of ``ppl_models.mixture.generate`` (its ``weights`` are the fixed alpha).
INFO = register(ModelInfo(
    name="vb_mixture",
    model=model,
    generate=mixture.generate,
    observed_site="x",
    latent_sites={
        "Lambda": "(k, d, d) precision matrices, Wishart(nu0, W0) prior (covariance='full')",
        "tau": "(k, d) diagonal precisions, Gamma priors (covariance='diag')",
        "m": "(k, d) means, Normal(m0, beta0^-1 I) prior",
        "y": "(num_examples,) component of each example (enumerable)",
    },
    algorithms=("fit_vb_mixture", "model_selection"),
    family="mixture",
    contract=dict(generate=dict(num_examples=6, num_components=2, dim=3),
                  data=lambda data: data.x,
                  # Diagonal precisions: a Normal core, so the noise handlers apply. The
                  # hyperparameters are given: sampling without x cannot derive them.
                  fixed=lambda data: {"weights": data.weights, "covariance": "diag",
                                      "mean_prior_mean": jnp.zeros(3),
                                      "mean_prior_scale": 2.0, "dof_prior": 3.0,
                                      "covariance_prior": 1.0},
                  unobserved=lambda data: {"num_examples": data.x.shape[0]}),
    reference=(f"{REFERENCES['vb_mixture'].short}, sec. 2; "
               f"{REFERENCES['prml'].short}, sec. 10.2"),
    story=r"""\Lambda_j &\sim \mathrm{Wishart}(\nu_0, W_0), \quad
        m_j \sim \mathcal{N}(m_0, \beta_0^{-1} I) && j = 1, \dots, k \\
    y_i &\sim \mathrm{Categorical}(\alpha) && \alpha \text{ by type-II maximum likelihood} \\
    x_i \mid y_i &\sim \mathcal{N}(m_{y_i}, \Lambda_{y_i}^{-1}) && i = 1, \dots, N""",
    deviations=("The means' prior is the paper's independent Normal, not the Normal-Wishart "
                "of Bishop's PRML (sec. 10.2) and scikit-learn's BayesianGaussianMixture.",),
    figure="yingyang_selection",
))
