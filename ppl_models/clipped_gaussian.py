"""The clipped-Gaussian model for binary data (Lee and Sompolinsky 1999).

Generative story, for each example (pattern) of N binary units driven by P << N
continuous hidden units:

    y ~ Normal(0, I_P)                      hidden causes          site "y" (P,)
    x = W y + xi + noise,  noise ~ N(0, sigma^2 I_N)
    s = sign(x) in {-1, +1}^N               the binary pattern     site "s" (N,)

x is not a site of its own: the program observes s through
``ClippedNormal(W y + xi, sigma)``, so P(s_a = +1 | y) = Phi((W y + xi)_a / sigma),
a probit layer (a finite sigma is the zoo's choice). The paper's
deterministic clip s = sign(W y + xi) is its sigma -> 0 limit, reached through
the noise handlers: ``inference.program.handlers.noiseless`` turns the site into
``NoiselessClip`` (sampling returns sign(W y + xi)) and ``observation_noise``
sets sigma. The paper has no noise and unit-variance x (C_xx has unit
diagonal); with noise the variance of x_a is ``|W_a|^2 + sigma^2``.

Parameters: the weights ``W`` (N, P) and biases ``xi`` (N,) are fixed when passed
(``weights=``, ``bias=``) and otherwise sample sites with priors
W ~ Normal(0, 1 / sqrt(P)) entrywise (so that the prior variance of W_a y is 1, as
the paper's unit-variance x) and xi ~ Normal(0, 1), so the same program serves
NUTS on W and SVI with W as a point estimate.

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999: eq. 1-4
(model), 8 (biases), Fig. 1-2.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from ppl_models.distributions import ClippedNormal
from ppl_models.references import REFERENCES
from ppl_models.registry import ModelInfo, register
from ppl_models.validation import check_positive_int, check_rng_key, is_traced

__all__ = ["model", "generate", "ClippedData", "INFO", "DEFAULT_NOISE", "ring_bumps",
           "sum_constraint_patterns", "to_spins"]

#: Default observation noise sigma of the probit layer (the zoo's choice, not the paper's):
#: small against the unit scale of W y, so the program is close to the clip.
DEFAULT_NOISE = 0.1


def model(s=None, *, weights=None, bias=None, noise=DEFAULT_NOISE, num_examples=None,
          num_visible=None, num_hidden=None):
    """The clipped-Gaussian program.

    Parameters
    ----------
    s : array (num_examples, N) of -1 / +1, optional
        Observed patterns; ``None`` samples them.
    weights : array (N, P), optional
        Fixed W; otherwise site ``"W"`` with prior Normal(0, 1 / sqrt(P)).
    bias : array (N,), optional
        Fixed biases xi; otherwise site ``"xi"`` with prior Normal(0, 1).
        ``bias=0.0`` gives the zero-bias model of the paper's eq. 7.
    noise : float
        sigma of the probit layer (``DEFAULT_NOISE``).
    num_examples, num_visible, num_hidden : int, optional
        Sizes when they cannot be read from ``s`` and ``weights``.
    """
    if weights is not None:
        num_visible, num_hidden = jnp.shape(weights)
    if s is not None and not is_traced(s):
        s = to_spins(s, "s")  # the checks of every entry point; 0 / 1 become -1 / +1
    if s is not None:
        num_examples, num_visible = jnp.shape(s)
    if num_examples is None or num_visible is None or num_hidden is None:
        raise ValueError("model: give s or num_examples, weights or num_visible and num_hidden")
    if weights is None:
        weights = numpyro.sample(
            "W", dist.Normal(0.0, 1.0 / math.sqrt(num_hidden))
            .expand([num_visible, num_hidden]).to_event(2))
    if bias is None:
        bias = numpyro.sample("xi", dist.Normal(0.0, 1.0).expand([num_visible]).to_event(1))
    with numpyro.plate("examples", num_examples):
        y = numpyro.sample("y", dist.Normal(0.0, 1.0).expand([num_hidden]).to_event(1))
        loc = y @ jnp.transpose(weights) + bias
        numpyro.sample("s", ClippedNormal(loc, noise).to_event(1), obs=s)


class ClippedData(NamedTuple):
    """Patterns drawn from the clipped-Gaussian program.

    Attributes
    ----------
    s : float32 array (num_examples, N)
        The patterns, -1 / +1.
    y : array (num_examples, P)
        The hidden causes that produced them.
    weights : array (N, P)
    bias : array (N,)
    """

    s: jax.Array
    y: jax.Array
    weights: jax.Array
    bias: jax.Array


def generate(rng_key, num_examples: int = 200, num_visible: int = 16, num_hidden: int = 2, *,
             weights=None, bias=None, noise=0.0) -> ClippedData:
    """Sample patterns from the program (``noise=0``: the deterministic clip).

    Without ``weights`` / ``bias``, W has rows of unit norm in random directions
    (so that x = W y has unit variance, as in the paper) and xi ~ Normal(0, 1/2).
    ``noise > 0`` samples the finite-noise program instead.
    """
    num_examples = check_positive_int(num_examples, "num_examples")
    key_w, key_b, key_run = jax.random.split(check_rng_key(rng_key), 3)
    if weights is None:
        num_visible = check_positive_int(num_visible, "num_visible")
        num_hidden = check_positive_int(num_hidden, "num_hidden")
        raw = jax.random.normal(key_w, (num_visible, num_hidden))
        weights = raw / jnp.linalg.norm(raw, axis=1, keepdims=True)
    weights = jnp.asarray(weights, jnp.result_type(float))
    if weights.ndim != 2:
        raise ValueError(f"weights must be 2-D (num_visible, num_hidden); got {weights.shape}")
    if bias is None:
        bias = math.sqrt(0.5) * jax.random.normal(key_b, (weights.shape[0],))
    bias = jnp.broadcast_to(jnp.asarray(bias, weights.dtype), (weights.shape[0],))
    if noise < 0:
        raise ValueError(f"noise must be >= 0; got {noise}")
    program = model
    if noise == 0:
        from inference.program.handlers import noiseless  # the limit comes from the handler

        program = noiseless(model, sites="s")
    trace = handlers.trace(handlers.seed(program, key_run)).get_trace(
        None, weights=weights, bias=bias, noise=noise if noise > 0 else 1.0,
        num_examples=num_examples)
    return ClippedData(trace["s"]["value"], trace["y"]["value"], weights, bias)


def to_spins(s, name: str = "s"):
    """Patterns as float -1 / +1: accepts -1 / +1 or 0 / 1 (0 -> -1); anything else is an error."""
    import numpy as np

    arr = np.asarray(s)
    if arr.dtype == bool:
        arr = arr.astype(np.int8)
    if not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be a numeric array of -1 / +1 or 0 / 1; got {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (num_examples, num_units); got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty; got shape {arr.shape}")
    values = np.unique(arr)
    if set(values.tolist()) <= {-1, 1}:
        spins = arr
    elif set(values.tolist()) <= {0, 1}:
        spins = 2 * arr - 1
    else:
        shown = values[:6].tolist()
        raise ValueError(f"{name} must hold only -1 / +1 or only 0 / 1; got values {shown}"
                         f"{' ...' if values.size > 6 else ''}")
    return jnp.asarray(spins, jnp.result_type(float))


def ring_bumps(rng_key, num_examples: int, num_units: int = 256, width: int | None = None):
    """The translation-invariant example (paper, Fig. 3): N spins on a ring, +1 on a bump.

    Each pattern has ``width`` (default N/2) contiguous +1 units starting at a
    uniformly random position (periodic boundary), -1 elsewhere.
    """
    num_units = check_positive_int(num_units, "num_units")
    width = num_units // 2 if width is None else check_positive_int(width, "width")
    starts = jax.random.randint(rng_key, (check_positive_int(num_examples, "num_examples"),), 0,
                                num_units)
    offset = (jnp.arange(num_units)[None, :] - starts[:, None]) % num_units
    return jnp.where(offset < width, 1.0, -1.0)


def sum_constraint_patterns(num_units: int):
    """Every pattern of N spins with sum zero (the paper's counterexample), (C(N, N/2), N)."""
    import itertools

    import numpy as np

    num_units = check_positive_int(num_units, "num_units")
    if num_units % 2:
        raise ValueError(f"num_units must be even for patterns with zero sum; got {num_units}")
    rows = [np.where(np.isin(np.arange(num_units), ups), 1.0, -1.0)
            for ups in itertools.combinations(range(num_units), num_units // 2)]
    return jnp.asarray(np.stack(rows), jnp.result_type(float))


INFO = register(
    ModelInfo(
        name="clipped",
        model=model,
        generate=generate,
        observed_site="s",
        latent_sites={
            "y": "(num_examples, P) hidden causes per pattern",
            "W": "(N, P) weights; a latent site only when weights=None",
            "xi": "(N,) biases; a latent site only when bias=None",
        },
        algorithms=("fit_clipped_gaussian", "fit_clipped_gaussian_stream",
                    "clipped.fit.infer_hidden", "clipped.fit.morph"),
        family="clipped",
        contract=dict(generate=dict(num_examples=5, num_visible=6, num_hidden=2),
                  data=lambda data: data.s,
                  fixed=lambda data: {"weights": data.weights, "bias": data.bias},
                  unobserved=lambda data: {"num_examples": data.s.shape[0]}),
        reference=f"{REFERENCES['clipped'].short}, eq. 1-4 and 8",
        story=r"""y_c &\sim \mathcal{N}(0, I_P) && \text{hidden causes, } P \ll N \\
        x_c &= W y_c + \xi + \varepsilon_c, \quad \varepsilon_c \sim \mathcal{N}(0, \sigma^2 I_N)
            && \text{not a site of its own} \\
        s_c &= \operatorname{sign}(x_c) \in \{-1, +1\}^N && P(s_{ca} = +1 \mid y_c) =
            \Phi\big((W y_c + \xi)_a / \sigma\big)""",
        deviations=("The paper's clip s = sign(W y + xi) is the sigma -> 0 limit of the "
                    "program's probit layer; with noise, var x_a = |W_a|^2 + sigma^2, not 1.",
                    "Priors on W and xi, absent from the paper, let NUTS and SVI sample them."),
        figure="clipped_bumps",
    )
)
