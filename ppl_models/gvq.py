"""Generative Vector Quantisation (GVQ) as a finite-noise NumPyro program.

Generative story (Westerdijk, Barber and Wiegerinck (2001), sec. 3 and 7, eq. 14):

    F    ~ Normal(0, feature_scale)          (num_features, dim)   the features f_i
    s_i  ~ Bernoulli(p_i)                    i = 1..num_features   (paper: p_i = 1/2)
    x    ~ Normal(s @ F, sigma^2 I_dim)      one row per example

With sigma > 0 this is the cooperative vector quantiser; GVQ is its sigma -> 0
limit, where each x is explained by the one state s* = argmin_s ||x - s @ F||^2
(eq. 5). The limit is taken from outside with ``inference.program.handlers.noiseless``;
the annealed algorithms lower sigma with ``inference.program.handlers.observation_noise``.

The prior on F is there so that the same program serves MCMC and SVI over the
features; EM in the sigma -> 0 limit does not see it (``noiseless`` scales it
by zero). Pass ``features=`` to fix F: the program then has no ``F`` site.

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001: sec. 3 (GVQ),
sec. 4.3.1 (the planted-feature generator).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ppl_models.distributions import BinaryStateMixture
from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import (
    check_data,
    check_finite,
    check_positive,
    check_positive_int,
    check_probability,
    check_rng_key,
)

__all__ = ["model", "PlantedData", "generate_planted", "planted_features", "INFO",
           "features_per_set", "full_states", "set_units", "reconstruction_error"]

#: Paper sec. 4.3.1: the noise eps has variance 1/10.
PAPER_NOISE_SCALE = math.sqrt(0.1)


def model(
    x=None,
    *,
    num_features: int | None = None,
    dim: int | None = None,
    num_examples: int | None = None,
    features=None,
    sigma=0.1,
    prior_probs=0.5,
    feature_scale=10.0,
    num_sets: int | None = None,
    sparsity=None,
    binary: bool = False,
    beta=None,
    split_states: bool = False,
    enumerate_states: bool = True,
    sum_states: bool = False,
):
    """The GVQ program with finite observation noise.

    Parameters
    ----------
    x : array (num_examples, dim), optional
        Observed data; ``None`` samples it.
    num_features, dim, num_examples : int, optional
        Sizes, read from ``features`` and ``x`` when those are given.
    features : array (num_features, dim), optional
        Fixed features F (with ``binary=True``: the unconstrained F_hat, the
        features being sigmoid(F_hat)). When ``None``, F is a latent site
        ``"F"`` with an isotropic ``Normal(0, feature_scale)`` prior.
    sigma : float
        Observation noise standard deviation (sites ``"x"``).
    prior_probs : float or array
        Bernoulli prior p_i of each binary unit (of each switchable unit of a set).
    feature_scale : float
        Prior standard deviation of the entries of F.
    num_sets : int, optional
        Multiple feature sets (Westerdijk, Barber and Wiegerinck (2001), sec. 5.1).
        The rows of F form ``num_sets`` consecutive blocks of m = num_features / num_sets; the last
        row of each block is the set's *origin*, always on when the set is used.
        Each example picks one set, site ``"set"`` (uniform ``Categorical``), and
        the m - 1 other units of that set, site ``"s"`` of shape
        (num_examples, m - 1): x ~ Normal(o_set + s @ F_set, sigma). One feature
        per set (m = 1, no switchable units) is ordinary vector quantisation.
    sparsity : float, optional
        lambda >= 0 of sec. 5.2: adds lambda s.s to the energy. Written as the
        observed zero vector of a Gaussian site ``"sparsity"`` with mean
        sqrt(lambda) s and the same noise sigma, i.e. the prior
        p(s) ∝ exp(-lambda s.s / (2 sigma^2)), so that -2 sigma^2 log p gains
        exactly lambda s.s at every sigma, the sigma -> 0 limit included (where
        an ordinary prior on s would vanish), and NumPyro's generic inference
        sees the same penalty.
    binary : bool
        Binary data (sec. 5.3, eq. 10): features sigmoid(F_hat) and
        reconstruction sigmoid(beta (s @ sigmoid(F_hat) - 1/2)). The energy is
        then not quadratic in s.
    beta : float, optional
        Steepness of the squashing function with ``binary=True`` (paper: 4.5).
    split_states : bool
        If True, each unit is its own site ``"s_0"``, ..., ``"s_{n-1}"`` of
        shape (num_examples,) marked for parallel enumeration, which is what
        NumPyro's ``infer_discrete`` and ``TraceEnum_ELBO`` need (the units are
        coupled through x, so one plated site cannot be enumerated). Otherwise
        one site ``"s"`` of shape (num_examples, num_features). Not with
        ``num_sets``.
    enumerate_states : bool
        In split mode, mark the unit sites for parallel enumeration (default).
        ``False`` leaves them as ordinary discrete sites, for samplers such as
        NumPyro's ``DiscreteGibbs``.
    sum_states : bool
        Observe x through the states summed out, p(x | F) = sum_s p(s) N(x | s F,
        sigma^2 I) (:class:`ppl_models.distributions.BinaryStateMixture`), with no
        state site at all: the density that enumerating the states gives, several
        times cheaper to evaluate and differentiate (the reference evidence of model
        selection uses it). Not with ``split_states``, ``num_sets``, ``sparsity`` or
        ``binary``; the program then returns None.

    Returns
    -------
    array (num_examples, num_features)
        The binary states of all features (in split mode: stacked after
        broadcasting; with ``num_sets``: the chosen set's origin and units, every
        other set's units zero, see :func:`full_states`).
    """
    if features is not None:
        features = check_data(features, "features")
        num_features, dim = jnp.shape(features)
    if x is not None:
        x = check_data(x, "x", dim=dim if features is not None else None)
        num_examples, dim = jnp.shape(x)
    if sigma is not None:
        check_positive(sigma, "sigma")
    check_probability(prior_probs, "prior_probs")
    if num_features is None or dim is None or num_examples is None:
        raise ValueError(
            "gvq.model needs num_features, dim and num_examples, directly or through "
            "features= and x="
        )
    per_set = None
    if num_sets is not None:
        per_set = features_per_set(num_features, num_sets)
        if split_states:
            raise ValueError("split_states is not available with num_sets")
    if sum_states:
        unsupported = [name for name, value in (("split_states", split_states),
                                                ("num_sets", num_sets is not None),
                                                ("sparsity", sparsity is not None),
                                                ("binary", binary)) if value]
        if unsupported:
            raise ValueError(f"sum_states=True is not available with {', '.join(unsupported)}")
    if binary and beta is None:
        raise ValueError("binary=True needs beta (the steepness of the squashing; paper: 4.5)")
    if features is None:
        F = numpyro.sample(
            "F", dist.Normal(0.0, feature_scale).expand([num_features, dim]).to_event(2)
        )
    else:
        F = features
    if binary:
        F = jax.nn.sigmoid(F)

    def squash(loc):
        return jax.nn.sigmoid(beta * (loc - 0.5)) if binary else loc

    num_units = num_features if num_sets is None else per_set - 1
    probs = jnp.broadcast_to(jnp.asarray(prior_probs), (num_units,))
    if sum_states:
        with numpyro.plate("data", num_examples):
            numpyro.sample("x", BinaryStateMixture(F, sigma, probs), obs=x)
        return None
    with numpyro.plate("data", num_examples):
        if split_states:
            units = [
                numpyro.sample(f"s_{i}", dist.Bernoulli(probs[i]),
                               infer={"enumerate": "parallel"} if enumerate_states else {})
                for i in range(num_features)
            ]
            # Sum of per-unit contributions: broadcasts under enumeration.
            loc = sum(u[..., None] * F[i] for i, u in enumerate(units))
            s = jnp.stack(jnp.broadcast_arrays(*units), axis=-1)
            active = s
        elif num_sets is None:
            s = numpyro.sample("s", dist.Bernoulli(probs).to_event(1))
            loc = s @ F
            active = s
        else:
            blocks = F.reshape(num_sets, per_set, -1)
            chosen = numpyro.sample("set", dist.Categorical(logits=jnp.zeros(num_sets)))
            s = numpyro.sample("s", dist.Bernoulli(probs).to_event(1))
            own = blocks[chosen]  # (num_examples, per_set, dim)
            loc = own[..., -1, :] + jnp.einsum("...i,...id->...d", s, own[..., :-1, :])
            active = s
        if sparsity is not None:
            penalty_loc = jnp.sqrt(jnp.asarray(sparsity)) * active
            numpyro.sample("sparsity", dist.Normal(penalty_loc, sigma).to_event(1),
                           obs=jnp.zeros(jnp.shape(penalty_loc)[-2:]))
        numpyro.sample("x", dist.Normal(squash(loc), sigma).to_event(1), obs=x)
    if num_sets is not None:
        return full_states(chosen, s, num_sets)
    return s


def features_per_set(num_features: int, num_sets: int) -> int:
    """m = num_features / num_sets (origin included), or a ValueError naming both."""
    num_sets = check_positive_int(num_sets, "num_sets")
    if num_features % num_sets:
        raise ValueError(
            f"num_features ({num_features}) must be num_sets ({num_sets}) times the number of "
            "features per set (each set's origin included)")
    return num_features // num_sets


def full_states(sets, units, num_sets: int):
    """States of all features (num_examples, num_sets * m) from a set and its units.

    ``sets`` (num_examples,) is the chosen set, ``units`` (num_examples, m - 1)
    its switchable units; the chosen set's origin (last of its block) is 1 and
    every other set is all zeros.
    """
    units = jnp.asarray(units)
    num_examples = units.shape[0]
    block = jnp.concatenate([units, jnp.ones((num_examples, 1), units.dtype)], axis=1)
    one_hot = jax.nn.one_hot(sets, num_sets, dtype=units.dtype)
    return (one_hot[:, :, None] * block[:, None, :]).reshape(num_examples, -1).astype(jnp.int32)


def set_units(states, num_sets: int):
    """Inverse of :func:`full_states`: (sets (num_examples,), units (num_examples, m - 1))."""
    states = jnp.asarray(states)
    blocks = states.reshape(states.shape[0], num_sets, -1)
    sets = jnp.argmax(blocks[:, :, -1], axis=1)
    units = jnp.take_along_axis(blocks, sets[:, None, None], axis=1)[:, 0, :-1]
    return sets, units


def planted_features(
    rng_key,
    num_features: int,
    dim: int,
    *,
    num_parents: int | None = None,
    feature_mean: float = 2.0,
    feature_std: float = 1.0,
):
    """Features of the paper's sec. 4.3 experiments, shape (num_features, dim).

    Each visible unit (column) gets ``num_parents`` distinct hidden parents
    chosen uniformly at random; the connections have weights
    ``N(feature_mean, feature_std^2)`` and all other entries are zero. With
    ``num_parents=None`` every unit is connected (Fig. 4b, Fig. 5). Paper
    defaults: mean 2, std 1 (sec. 4.3.1), chosen there to avoid symmetric
    solutions.
    """
    num_features = check_positive_int(num_features, "num_features")
    dim = check_positive_int(dim, "dim")
    if num_parents is None:
        num_parents = num_features
    num_parents = check_positive_int(
        num_parents, "num_parents", maximum=num_features, why=" (= num_features)"
    )
    check_finite(feature_mean, "feature_mean")
    check_positive(feature_std, "feature_std")
    key_mask, key_weights = jax.random.split(rng_key)
    # For every column pick num_parents rows: the ranks of iid uniforms.
    uniforms = jax.random.uniform(key_mask, (dim, num_features))
    ranks = jnp.argsort(jnp.argsort(uniforms, axis=1), axis=1)
    mask = (ranks < num_parents).T
    weights = feature_mean + feature_std * jax.random.normal(key_weights, (num_features, dim))
    return jnp.where(mask, weights, 0.0)


class PlantedData(NamedTuple):
    """Data drawn from the GVQ program with planted features.

    Attributes
    ----------
    x : array (num_examples, dim)
        Observations.
    features : array (num_features, dim)
        The planted F.
    states : array (num_examples, num_features)
        The generating binary states s* (int32 in {0, 1}).
    """

    x: jax.Array
    features: jax.Array
    states: jax.Array


def generate_planted(
    rng_key,
    num_examples: int,
    num_features: int,
    dim: int,
    *,
    num_parents: int | None = None,
    feature_mean: float = 2.0,
    feature_std: float = 1.0,
    noise_scale: float = PAPER_NOISE_SCALE,
    prior_probs: float = 0.5,
) -> PlantedData:
    """Draw planted features (:func:`planted_features`) and data from the program.

    The data are sampled by running :func:`model` itself with the planted
    features and ``sigma=noise_scale``, so the generator and the program
    cannot disagree. The paper's sec. 4.3.1 uses noise of variance 1/10,
    ``noise_scale = sqrt(0.1)`` (the default).
    """
    num_examples = check_positive_int(num_examples, "num_examples")
    check_positive(noise_scale, "noise_scale")
    check_probability(prior_probs, "prior_probs")
    check_rng_key(rng_key)
    key_features, key_data = jax.random.split(rng_key)
    features = planted_features(
        key_features, num_features, dim, num_parents=num_parents,
        feature_mean=feature_mean, feature_std=feature_std,
    )
    trace = handlers.trace(handlers.seed(model, key_data)).get_trace(
        num_examples=num_examples, features=features, sigma=noise_scale, prior_probs=prior_probs
    )
    return PlantedData(
        x=trace["x"]["value"], features=features, states=trace["s"]["value"].astype(jnp.int32)
    )


def reconstruction(features, states, *, binary: bool = False, beta=None):
    """The codebook vector of every state: s @ F, or with ``binary=True``
    sigmoid(beta (s @ sigmoid(F_hat) - 1/2)) (eq. 10), ``features`` being F_hat."""
    states = jnp.asarray(states)
    if binary:
        return jax.nn.sigmoid(beta * (states @ jax.nn.sigmoid(features) - 0.5))
    return states @ features


def reconstruction_error(x, features, states, *, binary: bool = False, beta=None):
    """Mean over examples of ||x - s @ F||^2 (the paper's E of eq. 1 divided by N);
    with ``binary=True`` the error of eq. 10 (see :func:`reconstruction`)."""
    x = check_data(x, "x")
    recon = reconstruction(features, jnp.asarray(states, x.dtype), binary=binary, beta=beta)
    return jnp.mean(jnp.sum(jnp.square(x - recon), axis=-1))


INFO = register(
    ModelInfo(
        name="gvq",
        model=model,
        generate=generate_planted,
        observed_site="x",
        latent_sites={
            "s": "(num_examples, num_features) binary feature combination per example",
            "F": "(num_features, dim) features; a latent site only when features=None",
            "set": "(num_examples,) the feature set of each example; only with num_sets",
        },
        algorithms=("associate", "associate_sets", "fit_gvq", "fit_gvq_stream", "map_states",
                    "fit_map_em"),
        family="gvq",
        contract=dict(generate=dict(num_examples=5, num_features=3, dim=4),
                  data=lambda data: data.x,
                  fixed=lambda data: {"features": data.features},
                  unobserved=lambda data: {"num_examples": data.x.shape[0]}),
        reference=f"{REFERENCES['gvq'].short}, sec. 3-4",
        story=r"""F &\sim \mathcal{N}(0, \tau^2) && F \in \mathbb{R}^{n \times d} \text{ (rows: the
            features } f_i\text{)},\ \tau = \texttt{feature\_scale} \\
        s_{ci} &\sim \mathrm{Bernoulli}(p_i) && i = 1, \dots, n \text{ (paper: } p_i = 1/2) \\
        x_c &\sim \mathcal{N}(s_c F, \sigma^2 I_d) && \text{GVQ: } \sigma \to 0, \;
            s_c^* = \arg\min_s \lVert x_c - s F \rVert^2""",
        deviations=("The prior on F, absent from the paper, lets MCMC and SVI sample the "
                    "features; EM in the sigma -> 0 limit does not see it.",),
        figure="gvq_association",
    )
)
