"""Distributions the zoo's programs need beyond NumPyro's own.

``ClippedNormal(loc, scale)``
    the law of s = sign(x) for x ~ Normal(loc, scale), on {-1, +1}:
    P(s = +1) = Phi(loc / scale), the probit layer of the clipped-Gaussian model
    (:mod:`ppl_models.clipped_gaussian`; D. D. Lee and H. Sompolinsky, "Learning a
    continuous hidden variable model for binary data", Advances in Neural
    Information Processing Systems 11 (NIPS 1998), 1999). It is a Gaussian observation seen
    through a clip, so the noise handlers (``inference.program.handlers``) treat its
    ``scale`` as the observation noise: ``observation_noise`` sets or rescales
    it, and ``noiseless`` replaces it by its sigma -> 0 limit,
``NoiselessClip(loc)``
    2 sigma^2 log Phi(s loc / sigma) -> -min(0, s loc)^2: zero for a sign that
    agrees with loc, minus the squared violation otherwise (the limit of
    log Phi(-a) ~ -a^2 / 2 for large a); sampling returns sign(loc), the
    deterministic clip.

sign(0) is taken as +1 throughout (a probability-zero event for x).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import log_ndtr, ndtr
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes

__all__ = ["ClippedNormal", "NoiselessClip", "sign_of", "spin"]


class _Spin(constraints.Constraint):
    """Values in {-1, +1}."""

    is_discrete = True
    event_dim = 0

    def __call__(self, x):
        return (x == 1) | (x == -1)

    def feasible_like(self, prototype):
        return jnp.ones_like(prototype)

    def tree_flatten(self):
        return (), ((), {})


#: The support of :class:`ClippedNormal`: {-1, +1}.
spin = _Spin()


def sign_of(value):
    """sign(value) in {-1, +1} (0 maps to +1), in ``value``'s float dtype."""
    value = jnp.asarray(value)
    dtype = value.dtype if jnp.issubdtype(value.dtype, jnp.floating) else jnp.result_type(float)
    return jnp.where(value >= 0, 1.0, -1.0).astype(dtype)


class ClippedNormal(dist.Distribution):
    """sign(x) for x ~ Normal(loc, scale): P(+1) = Phi(loc / scale), support {-1, +1}.

    >>> import jax.numpy as jnp
    >>> d = ClippedNormal(jnp.array([0.0, 1.0]), 0.5)
    >>> [round(float(v), 4) for v in d.log_prob(jnp.array([1.0, -1.0]))]  # log Phi(0), log Phi(-2)
    [-0.6931, -3.7832]
    >>> [round(float(v), 4) for v in d.mean]  # 2 Phi(loc / scale) - 1
    [0.0, 0.9545]
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = spin
    pytree_data_fields = ("loc", "scale")

    def __init__(self, loc=0.0, scale=1.0, *, validate_args=None):
        self.loc, self.scale = promote_shapes(loc, scale)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(scale))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + self.batch_shape
        x = self.loc + self.scale * jax.random.normal(key, shape)
        return sign_of(x)

    def log_prob(self, value):
        return log_ndtr(value * self.loc / self.scale)

    @property
    def mean(self):
        return 2.0 * ndtr(self.loc / self.scale) - 1.0

    @property
    def variance(self):
        return 1.0 - jnp.square(self.mean)


class NoiselessClip(dist.Distribution):
    """The sigma -> 0 limit of ``ClippedNormal(loc, sigma)`` in energy units.

    ``log_prob(s) = -min(0, s loc)^2`` (0 when the sign agrees with ``loc``);
    ``sample`` returns sign(loc). Improper, for energies and the deterministic clip.

    >>> import jax.numpy as jnp
    >>> NoiselessClip(jnp.array([0.5, -2.0])).log_prob(jnp.array([1.0, 1.0]))
    Array([-0., -4.], dtype=float32)
    """

    arg_constraints = {"loc": constraints.real}
    support = spin
    pytree_data_fields = ("loc",)

    def __init__(self, loc, *, validate_args=None):
        self.loc = jnp.asarray(loc)
        super().__init__(batch_shape=jnp.shape(self.loc), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        return jnp.broadcast_to(sign_of(self.loc), tuple(sample_shape) + self.batch_shape)

    def log_prob(self, value):
        return -jnp.square(jnp.minimum(value * self.loc, 0.0))

    @property
    def mean(self):
        return sign_of(self.loc)
