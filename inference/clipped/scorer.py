"""Scoring clipped-Gaussian candidates (the number of hidden units P) for model selection.

Used by :func:`inference.model_selection` (``model="clipped"``). The fit of a candidate
is the paper's moment matching (:func:`inference.fit_clipped_gaussian`: biases from the
means, the arcsine-corrected correlation matrix C_xx, W from its P leading
eigenvectors); the model it is scored as is the program
:func:`ppl_models.clipped_gaussian.model` at that fit and the program's noise sigma,
with the fitted marginals kept (:func:`inference.clipped.fit.program_parameters`: the
biases rescaled to the variance norm(W_a)^2 + sigma^2 of x_a),

    y ~ Normal(0, I_P),   P(s_a = +1 | y) = Phi((W_a y + xi_a) / sigma).

Likelihood. The log-likelihood of a pattern needs y integrated out,

    p(s | W, xi) = E_{y ~ N(0, I_P)} prod_a Phi(s_a (W_a y + xi_a) / sigma),

computed by a product trapezoidal rule on the grid h Z^P inside the ball norm(y) <= 6
(prior mass outside below 1e-7 for P <= 3), the nodes weighted by the N(0, I_P)
density times h^P, a log-sum-exp over the nodes (:func:`log_likelihood`). The integrand
changes on the scale sigma / norm(W_a) in y (a probit edge per unit), so Gauss-Hermite
rules with tens of nodes per dimension, whose spacing near the centre is ~0.6, miss
whole cells at sigma = 0.1 (errors of several nats per pattern, measured); the
trapezoidal rule converges geometrically once h is below that scale (L. N. Trefethen
and J. A. C. Weideman, "The exponentially convergent trapezoidal rule", SIAM Review
56(3), 2014). Here h = :data:`SPACING` sigma / max(1, max_a norm(W_a)), raised where the
ball would hold more than :data:`MAX_NODES` nodes (P = 3 below sigma = 0.127, P = 2
below 0.014; at sigma = 0.1, P = 3 runs at h = 0.95 sigma). Errors measured against a
grid five times finer (P = 1, 2; sigma 0.05 - 0.2; 16 units): at most 2e-5 nats per
pattern at h = 0.75 sigma / norm(W_a), 1.5e-3 at h = 0.95 sigma / norm(W_a). The
patterns are scored once per distinct pattern. Candidates P <= :data:`MAX_HIDDEN` (3):
the grid grows as (12 / h)^P.

Criteria ``"cv"``, ``"train"``, ``"bic"``, ``"aic"``: p = N P - P (P - 1) / 2 + N (W up
to a rotation of its columns, and the biases; N P - P (P - 1) / 2 without biases).
There is no ``"evidence"``: the Bayesian program has P continuous hidden causes per
pattern, N_examples P latent dimensions for SMC (:meth:`ClippedScorer.evidence_reason`).

The fit assumes the paper's noiseless clip with unit-variance x; the program shares one
sigma over the units, so where the rank-P fit leaves norm(W_a)^2 < 1 (P below the data's)
the program's correlations W_a . W_b / ((norm(W_a)^2 + sigma^2)(norm(W_b)^2 + sigma^2))^(1/2)
exceed the fitted W_a . W_b: a
candidate that is too small is penalised more than by its rank alone. ``"train"`` need
not grow with P either: the columns added beyond the data's rank come from sampling
noise in C_xx and lower the training likelihood a little (measured: 0.01 - 0.05 nats per
pattern per extra unit on planted data).

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999, eq. 1-10.
G. Schwarz, "Estimating the dimension of a model", Annals of Statistics 6, 1978 (BIC).
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from inference.clipped.fit import fit_clipped_gaussian, program_parameters
from inference.engine.selection import Scorer, check_candidate_list
from ppl_models import clipped_gaussian
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import check_data, check_positive, check_positive_int

__all__ = ["ClippedScorer", "check_candidates", "log_likelihood", "num_parameters",
           "quadrature", "MAX_HIDDEN", "MAX_NODES", "SPACING", "RADIUS"]

#: Largest candidate P: the grid holds about (12 / h)^P nodes.
MAX_HIDDEN = 3
#: Grid spacing in units of the narrowest probit edge, sigma / max(1, max_a norm(W_a)).
SPACING = 0.75
#: Radius of the ball of nodes, in prior standard deviations.
RADIUS = 6.0
#: Most nodes of one grid (the spacing is raised to stay below).
MAX_NODES = 1 << 20
#: Nodes per step of the scan over nodes, and patterns per block.
NODE_CHUNK = 8192
PATTERN_BLOCK = 256


def check_candidates(candidates, num, dim):
    """The clipped-Gaussian candidates P as a tuple: integers 1 .. min(3, N units), none
    repeated (default all of them)."""
    largest = min(MAX_HIDDEN, dim)
    why = (f" (the grid in y has (12 / h)^P nodes: P <= {MAX_HIDDEN}; and P <= N = {dim} "
           "units, the columns of x)")
    if candidates is None:
        return tuple(range(1, largest + 1))
    return check_candidate_list(
        candidates, "integers (numbers of hidden units)",
        lambda c: check_positive_int(c, "candidates", maximum=largest, why=why))


def num_parameters(num_units: int, num_hidden: int, bias: bool = True) -> int:
    """p of BIC and AIC: N P - P (P - 1) / 2 (W up to rotation) plus N biases.

    >>> num_parameters(16, 2)
    47
    """
    return num_units * num_hidden - num_hidden * (num_hidden - 1) // 2 + (num_units if bias
                                                                            else 0)


def quadrature(num_hidden: int, spacing: float):
    """Nodes (M, P) and log weights (M,) of the trapezoidal rule for E_{N(0, I_P)}.

    The grid ``spacing`` Z^P inside the ball of radius :data:`RADIUS`, each node weighted
    by the N(0, I_P) density times spacing^P; the spacing is raised where the ball
    would hold more than :data:`MAX_NODES` nodes.
    """
    ball = math.pi ** (num_hidden / 2) / math.gamma(num_hidden / 2 + 1)
    spacing = max(float(spacing), RADIUS * (ball / MAX_NODES) ** (1 / num_hidden))
    half = int(math.ceil(RADIUS / spacing))
    axis = spacing * np.arange(-half, half + 1)
    grid = np.stack([g.ravel() for g in np.meshgrid(*[axis] * num_hidden, indexing="ij")], 1)
    nodes = grid[np.sum(grid ** 2, axis=1) <= RADIUS ** 2]
    log_w = (-0.5 * np.sum(nodes ** 2, axis=1) - 0.5 * num_hidden * math.log(2 * math.pi)
             + num_hidden * math.log(spacing))
    return nodes, log_w


@jax.jit
def _pattern_blocks(u, nodes, log_w, weights, bias, noise):
    """log p(s) for blocks of patterns u (B, K, N) of 0 / 1, nodes (chunks, C, P) and their
    log weights (chunks, C) scanned chunk by chunk.

    log Phi(s_a t_a) = c_a + u_a A_a + (1 - u_a) B_a with c_a = max(log Phi(t_a),
    log Phi(-t_a)) and A, B <= 0 (one of them 0): every term added is of one sign, so
    float32 keeps its relative accuracy where the large -t^2 / 2 terms would cancel.
    """
    def one_block(ub):
        both = jnp.concatenate([ub, 1.0 - ub], axis=1)                # (K, 2N)

        def step(carry, chunk):
            top, total = carry
            y, lw = chunk
            t = (y @ weights.T + bias) / noise                         # (C, N)
            lp, lm = log_ndtr(t), log_ndtr(-t)
            c = jnp.maximum(lp, lm)
            terms = jnp.concatenate([lp - c, lm - c], axis=1)          # (C, 2N)
            logs = lw + jnp.sum(c, axis=1) + both @ terms.T            # (K, C)
            new_top = jnp.maximum(top, jnp.max(logs, axis=1))
            total = total * jnp.exp(top - new_top) + jnp.sum(jnp.exp(logs - new_top[:, None]),
                                                             axis=1)
            return (new_top, total), None

        start = (jnp.full(ub.shape[0], -jnp.inf, ub.dtype), jnp.zeros(ub.shape[0], ub.dtype))
        (top, total), _ = jax.lax.scan(step, start, (nodes, log_w))
        return top + jnp.log(total)

    return jax.lax.map(one_block, u)


def log_likelihood(s, weights, bias, noise=clipped_gaussian.DEFAULT_NOISE, *, spacing=None):
    """log p(s_c | W, xi) of the clipped-Gaussian program per pattern, y integrated out.

    The product trapezoidal rule of the module docstring, run once per distinct pattern.

    Parameters
    ----------
    s : array (num_examples, N)
        Patterns of -1 / +1 (or 0 / 1).
    weights : array (N, P)
        W of the program (P <= :data:`MAX_HIDDEN`).
    bias : array (N,)
        xi of the program.
    noise : float
        sigma of the program's probit layer (> 0).
    spacing : float, optional
        Grid spacing in y (default ``SPACING`` sigma / max(1, max_a norm(W_a))).

    Returns
    -------
    ndarray (num_examples,)
    """
    spins = clipped_gaussian.to_spins(s, "s")
    weights = jnp.asarray(weights, spins.dtype)
    if weights.ndim != 2 or weights.shape[0] != spins.shape[1]:
        raise ValueError(f"weights must have shape (N, P) = ({spins.shape[1]}, P) to match s; "
                         f"got {weights.shape}")
    num_hidden = check_positive_int(int(weights.shape[1]), "weights.shape[1] (P)",
                                    maximum=MAX_HIDDEN, why=" (the grid grows as (12 / h)^P)")
    bias = jnp.broadcast_to(jnp.asarray(bias, spins.dtype), (spins.shape[1],))
    noise = float(check_positive(noise, "noise"))
    if spacing is None:
        widest = max(1.0, float(jnp.max(jnp.linalg.norm(weights, axis=1))))
        spacing = SPACING * noise / widest
    nodes, log_w = quadrature(num_hidden, check_positive(spacing, "spacing"))
    chunk = min(NODE_CHUNK, len(nodes))
    pad = -len(nodes) % chunk
    nodes = np.concatenate([nodes, np.zeros((pad, num_hidden))]).reshape(-1, chunk, num_hidden)
    log_w = np.concatenate([log_w, np.full(pad, -np.inf)]).reshape(-1, chunk)
    patterns, inverse = np.unique(np.asarray(spins) > 0, axis=0, return_inverse=True)
    # padded to a power of two (or blocks of PATTERN_BLOCK): few shapes, few compilations
    block = min(PATTERN_BLOCK, 1 << max(6, (len(patterns) - 1).bit_length()))
    extra = -len(patterns) % block
    u = np.concatenate([patterns, np.zeros((extra, patterns.shape[1]), bool)])
    dtype = np.dtype(spins.dtype)  # converted by numpy: no compiled conversions per shape
    out = _pattern_blocks(u.reshape(-1, block, u.shape[1]).astype(dtype), nodes.astype(dtype),
                          log_w.astype(dtype), weights, bias, np.asarray(noise, dtype))
    return np.asarray(out).reshape(-1)[:len(patterns)][np.ravel(inverse)]


class ClippedScorer(Scorer):
    """Fits and scores of clipped-Gaussian candidates P for :func:`inference.model_selection`.

    The fit is deterministic (moment matching), so ``num_restarts`` and the keys are not
    used; full-data fits are cached. ``fit_options`` go to
    :func:`inference.fit_clipped_gaussian`, with ``constant_columns="independent"``
    unless given (a training fold may hold a unit constant that the data as a whole
    does not).

    Parameters
    ----------
    x : array (num_examples, N)
        Binary patterns, -1 / +1 or 0 / 1.
    noise : float, optional
        sigma of the program's probit layer at which every candidate is scored
        (default ``ppl_models.clipped_gaussian.DEFAULT_NOISE``, 0.1).
    """

    def __init__(self, x, *, num_restarts=3, fit_options=None, vb_options=None, noise=None):
        x = check_data(x, "x")
        spins = clipped_gaussian.to_spins(x, "x")
        super().__init__(spins, num_restarts=num_restarts, fit_options=fit_options,
                         vb_options=vb_options)
        self.fit_options.setdefault("constant_columns", "independent")
        self.noise = (clipped_gaussian.DEFAULT_NOISE if noise is None
                      else float(check_positive(noise, "noise")))
        self.cache = {}
        self.warned = []

    def _fit(self, num_hidden, rows):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NumericalWarning)
            fit = fit_clipped_gaussian(rows, num_hidden, **self.fit_options)
        self.warned.extend(str(w.message) for w in caught
                           if issubclass(w.category, NumericalWarning))
        return program_parameters(fit, self.noise)

    def _score(self, params, rows):
        return log_likelihood(rows, params["weights"], params["bias"], params["noise"])

    def train(self, num_hidden, rng_key):
        if num_hidden not in self.cache:
            self.cache[num_hidden] = self._fit(num_hidden, self.x)
        return float(jnp.mean(self._score(self.cache[num_hidden], self.x)))

    def heldout(self, num_hidden, train, test, rng_key):
        params = self._fit(num_hidden, self.x[train])
        return np.asarray(self._score(params, self.x[test]))

    def num_parameters(self, num_hidden):
        return num_parameters(self.dim, num_hidden, self.fit_options.get("bias", True))

    def evidence_reason(self, num_hidden, limit):
        return (f"the Bayesian program has P = {num_hidden} continuous hidden causes per "
                f"pattern, {self.num * num_hidden} latent dimensions besides W and xi: beyond "
                "the random-walk SMC of the reference evidence")

    def notes(self, scored):
        out = []
        if scored:
            out.append(f"cv/train/bic/aic: log-likelihood of the program at sigma = "
                       f"{self.noise:.3g} and the moment-matching fit (program_parameters), "
                       "y integrated by a product trapezoidal rule")
        if self.warned:
            out.append(f"fit_clipped_gaussian warned {len(self.warned)} time(s), first: "
                       f"{self.warned[0]}")
        return out
