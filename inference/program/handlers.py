"""Noise handlers: change the observation noise of a NumPyro program from outside.

Every model of the zoo is written with *finite* Gaussian observation noise
sigma, so that NumPyro's generic inference runs on it unchanged. The papers'
algorithms work at other noise levels:

* annealing schedules lower sigma step by step (Westerdijk, Barber and Wiegerinck
  (2001), App. A and C: the belief-propagation and mean-field sweeps halve sigma^2
  per sweep);
* the deterministic models are the sigma -> 0 limit (Westerdijk, Barber and
  Wiegerinck (2001), sec. 3: GVQ is the cooperative vector quantiser without noise;
  Lee and Sompolinsky (1999): the clip is the probit layer without noise).

The two messengers here express both without editing a model:

``observation_noise``
    sets (``sigma=``) or rescales (``factor=``) the standard deviation of the
    observed Gaussian sites of any program.
``noiseless``
    the sigma -> 0 limit in *energy units*. Multiplying a log-density by
    2 sigma^2 and letting sigma -> 0 sends 2 sigma^2 log N(x; loc, sigma) to
    -||x - loc||^2 and every sigma-independent term (priors on latent sites) to
    zero. So under ``noiseless`` an observed Gaussian site scores
    ``-||x - loc||^2``, every other site is scaled by zero, and sampling an
    unobserved Gaussian site returns its mean: x = loc, the deterministic model.

Observed Gaussian sites are ``Normal`` distributions, possibly wrapped in
``to_event``, ``expand`` or ``mask``, and clipped Gaussians
(``ppl_models.distributions.ClippedNormal``, s = sign(x) with x Gaussian), whose
``scale`` is the noise of the x they clip: under ``noiseless`` they become
``NoiselessClip`` (score -min(0, s loc)^2, sample sign(loc): the deterministic clip).
Pass ``sites=`` to restrict a handler to named sites; a named site that is not Gaussian is an error.

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001.
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.primitives import Messenger

from ppl_models.distributions import ClippedNormal, NoiselessClip
from ppl_models.validation import is_traced

__all__ = ["observation_noise", "noiseless", "NoiselessGaussian", "map_gaussian"]


class NoiselessGaussian(dist.Distribution):
    """The sigma -> 0 limit of ``Normal(loc, sigma)`` in energy units.

    ``log_prob(x) = -(x - loc)^2``, the limit of ``2 sigma^2 log N(x; loc, sigma)``
    (the normaliser ``2 sigma^2 log(sigma sqrt(2 pi))`` vanishes); ``sample``
    returns ``loc``. It is improper and only meant for energies and for the
    deterministic generative model.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> limit = NoiselessGaussian(jnp.array([1.0, 2.0]))
    >>> limit.log_prob(jnp.array([0.0, 2.0])).tolist()  # -(x - loc)^2
    [-1.0, -0.0]
    >>> limit.sample(jax.random.key(0)).tolist()  # the mean, x = loc
    [1.0, 2.0]
    """

    arg_constraints = {"loc": constraints.real}
    support = constraints.real
    reparametrized_params = ["loc"]
    pytree_data_fields = ("loc",)

    def __init__(self, loc, *, validate_args=None):
        self.loc = jnp.asarray(loc)
        super().__init__(batch_shape=jnp.shape(self.loc), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        return jnp.broadcast_to(self.loc, tuple(sample_shape) + self.batch_shape)

    def log_prob(self, value):
        return -jnp.square(value - self.loc)

    @property
    def mean(self):
        return self.loc


def map_gaussian(fn: dist.Distribution, leaf: Callable[[dist.Normal], dist.Distribution]):
    """Rebuild ``fn`` with ``leaf`` applied to its ``Normal`` core.

    Unwraps ``Independent`` (``to_event``), ``ExpandedDistribution`` (``expand``)
    and ``MaskedDistribution`` (``mask``), and rewraps the result the same way.
    A ``ClippedNormal`` is the clip of a ``Normal``: ``leaf`` acts on that Normal and
    the result is clipped again (a ``NoiselessGaussian`` becomes a ``NoiselessClip``).
    Returns ``None`` when ``fn`` has no ``Normal`` core.

    Examples
    --------
    >>> import numpyro.distributions as dist
    >>> site = dist.Normal(0.0, 1.0).expand([3]).to_event(1)
    >>> smaller = map_gaussian(site, lambda normal: dist.Normal(normal.loc, 0.5))
    >>> smaller.event_shape, smaller.base_dist.scale.tolist()
    ((3,), [0.5, 0.5, 0.5])
    >>> map_gaussian(dist.Bernoulli(0.5), lambda normal: normal) is None
    True
    """
    if isinstance(fn, dist.Normal):
        return leaf(fn)
    if isinstance(fn, ClippedNormal):
        inner = leaf(dist.Normal(fn.loc, fn.scale))
        if isinstance(inner, NoiselessGaussian):
            return NoiselessClip(inner.loc)
        return ClippedNormal(inner.loc, inner.scale)
    if isinstance(fn, dist.Independent):
        inner = map_gaussian(fn.base_dist, leaf)
        return None if inner is None else dist.Independent(inner, fn.reinterpreted_batch_ndims)
    if isinstance(fn, dist.ExpandedDistribution):
        inner = map_gaussian(fn.base_dist, leaf)
        return None if inner is None else _expand(inner, fn.batch_shape)
    if isinstance(fn, dist.MaskedDistribution):
        inner = map_gaussian(fn.base_dist, leaf)
        return None if inner is None else inner.mask(fn._mask)
    return None


def _expand(fn, batch_shape):
    """Re-apply the expansion ``fn.expand(batch_shape)`` that the rebuild unwrapped.

    A ``Normal`` (or ``ClippedNormal``) stays one, with broadcast parameters, so that
    the noise of a rebuilt site can be read and set again. The noiseless limits
    (``NoiselessGaussian``, ``NoiselessClip``) have no noise left to set: their
    expansion stays lazy, an ``ExpandedDistribution`` over the unexpanded base, so a
    plate over N examples of k conditioned components keeps a (k, 1, d) ``loc``
    instead of materialising (k, N, d) copies of it. Inference that evaluates the
    site for many examples can then read the per-component base (e.g. the
    ||x||^2 - 2 x . m + ||m||^2 form of ``inference.mixture.em``); ``log_prob``,
    ``sample`` and ``mean`` of the expansion are those of the broadcast copy.
    """
    if isinstance(fn, dist.Normal):
        return dist.Normal(jnp.broadcast_to(fn.loc, batch_shape),
                           jnp.broadcast_to(fn.scale, batch_shape))
    if isinstance(fn, ClippedNormal):
        return ClippedNormal(jnp.broadcast_to(fn.loc, batch_shape),
                             jnp.broadcast_to(fn.scale, batch_shape))
    if isinstance(fn, NoiselessGaussian | NoiselessClip) and fn.batch_shape == tuple(batch_shape):
        return fn
    return fn.expand(batch_shape)


def _site_names(sites: Iterable[str] | str | None) -> frozenset[str] | None:
    if sites is None:
        return None
    if isinstance(sites, str):
        return frozenset([sites])
    names = frozenset(sites)
    if not names or not all(isinstance(name, str) for name in names):
        raise TypeError(
            f"sites must be a site name or a non-empty collection of names; got {sites!r}")
    return names


class _GaussianSiteMessenger(Messenger):
    """Common part: find the observed Gaussian sites this handler acts on."""

    def __init__(self, fn=None, sites=None):
        self.sites = _site_names(sites)
        super().__init__(fn)

    def _targets(self, msg) -> bool:
        if msg["type"] != "sample":
            return False
        if self.sites is not None:
            return msg["name"] in self.sites
        return bool(msg["is_observed"])

    def _rebuild(self, msg, leaf):
        new_fn = map_gaussian(msg["fn"], leaf)
        if new_fn is None and self.sites is not None:
            raise ValueError(
                f"{type(self).__name__}: site {msg['name']!r} was named in sites= but its "
                f"distribution {type(msg['fn']).__name__} has no Normal core"
            )
        return new_fn


class observation_noise(_GaussianSiteMessenger):
    """Set or rescale the noise of a program's observed Gaussian sites.

    Parameters
    ----------
    fn : callable, optional
        The NumPyro program (or use as a context manager).
    sigma : float or array, optional
        New standard deviation (broadcast against the site's ``loc``).
    factor : float or array, optional
        Multiply the site's existing standard deviation by this (annealing).
    sites : str or collection of str, optional
        Restrict to these site names (observed or not). Default: every observed
        site whose distribution is a ``Normal``, possibly wrapped.

    Exactly one of ``sigma`` and ``factor`` is given; both must be positive.
    Traced (jitted) values are accepted, so a schedule can run inside
    ``lax.scan``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro import handlers
    >>> def model(x=None):
    ...     mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    ...     with numpyro.plate("data", 3):
    ...         numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)
    >>> x = jnp.zeros(3)
    >>> tr = handlers.trace(handlers.seed(observation_noise(model, sigma=0.1), 0)).get_trace(x)
    >>> tr["x"]["fn"].scale, tr["mu"]["fn"].scale  # the prior is untouched
    (Array([0.1, 0.1, 0.1], dtype=float32, weak_type=True), 1.0)
    >>> with observation_noise(factor=0.5):
    ...     tr = handlers.trace(handlers.seed(model, 0)).get_trace(x)
    >>> tr["x"]["fn"].scale
    Array([0.5, 0.5, 0.5], dtype=float32, weak_type=True)
    """

    def __init__(self, fn=None, sigma=None, factor=None, sites=None):
        if (sigma is None) == (factor is None):
            raise ValueError("observation_noise: give exactly one of sigma= and factor=")
        for name, value in (("sigma", sigma), ("factor", factor)):
            if value is not None and not is_traced(value):
                v = np.asarray(value, dtype=float)  # numpy: no tracers when called under jit
                if not np.all(np.isfinite(v)) or not np.all(v > 0):
                    raise ValueError(
                        f"observation_noise: {name} must be positive and finite; got {value!r}"
                    )
        self.sigma = sigma
        self.factor = factor
        super().__init__(fn, sites)

    def process_message(self, msg):
        if not self._targets(msg):
            return

        def leaf(normal):
            scale = self.sigma if self.sigma is not None else normal.scale * self.factor
            shape = jnp.broadcast_shapes(jnp.shape(scale), normal.batch_shape)
            scale = jnp.broadcast_to(scale, shape)
            loc = jnp.broadcast_to(normal.loc, jnp.shape(scale))
            return dist.Normal(loc, scale)

        new_fn = self._rebuild(msg, leaf)
        if new_fn is not None:
            msg["fn"] = new_fn


class noiseless(_GaussianSiteMessenger):
    """The deterministic sigma -> 0 limit of a program, in energy units.

    Observed Gaussian sites score ``-||x - loc||^2`` (see ``NoiselessGaussian``);
    all other sample sites (priors on latents, non-Gaussian observations) are
    scaled by zero, since 2 sigma^2 times a sigma-independent log-density
    vanishes in the limit. The log-density of the handled program is then minus
    the energy E(s, x) of Westerdijk, Barber and Wiegerinck (2001), eq. 5. Unobserved
    Gaussian sites named in ``sites`` sample their mean, which is the deterministic
    generative model.

    Parameters
    ----------
    fn : callable, optional
        The NumPyro program (or use as a context manager).
    sites : str or collection of str, optional
        The Gaussian sites whose noise vanishes. Default: every observed site
        with a ``Normal`` core. Other sites are scaled by zero.

    Examples
    --------
    >>> import jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> from numpyro.infer.util import log_density
    >>> def model(x=None):
    ...     s = numpyro.sample("s", dist.Bernoulli(0.3))
    ...     numpyro.sample("x", dist.Normal(2.0 * s, 0.1).expand([2]).to_event(1), obs=x)
    >>> x = jnp.array([1.5, 2.5])
    >>> logp, _ = log_density(noiseless(model), (x,), {}, {"s": 1.0})
    >>> float(logp)  # -(0.5^2 + 0.5^2); the Bernoulli(0.3) prior drops out
    -0.5
    """

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        if self._targets(msg):
            new_fn = self._rebuild(msg, lambda normal: NoiselessGaussian(
                jnp.broadcast_to(normal.loc, normal.batch_shape)))
            if new_fn is not None:
                msg["fn"] = new_fn
                return
        msg["scale"] = 0.0 if msg["scale"] is None else 0.0 * msg["scale"]


