"""Merge and refresh moves for variational Bayes MCVQ: a structure search on the bound.

Coordinate ascent (``inference.mcvq.vb_maths.step``) changes g one dimension at a time
and a VQ's states only through its m, so it stalls in two kinds of local optima
that the bound itself would leave (measured on the shapes images,
``ppl_models.datasets.shapes``, from K = 8, J = 10):

* **split causes**: one shape's pixels shared by two or more VQs whose states
  are each a function of the shape's position. Moving a single pixel from one
  to the other changes nothing, so g never consolidates, and every extra VQ
  keeps paying its KL(m || pi) (about N log J nats);
* **state deficits**: a VQ with fewer active states than its cause needs (a
  starting state that no example preferred was pruned, or two positions share
  a state); the lost states never return.

A *move* proposes a new state and keeps it only when the bound, after a few
iterations of ordinary coordinate ascent from it, is higher than the current
one (Ueda et al.'s split-and-merge EM, and the merge moves of Hughes and
Sudderth's memoized VB, both scored by the same objective):

* **merge(a, b)**: every dimension of VQ a goes to VQ b (g_db += g_da), a is
  removed; b's states are re-fitted as below on the union of their dimensions;
* **refresh(b)**: b's states alone are re-fitted as below, all J slots active.

Re-fitting b's states: k-means (k-means++ start, then Lloyd iterations) of the
examples on the dimensions weighted by g_db (x centred, missing entries at the
centre), J clusters; m^c_b is the one-hot of example c's cluster, and empty
clusters are inactive states. Q(mu), Q(tau) are then re-fitted to the new m
(a few alternations of their closed-form updates, starting from the
cluster-wise means) before the trial iterations, because the first update of
Q(tau) would otherwise use the stale Q(mu) of b's old states, and the g step
in the same iteration would hand b's dimensions to another VQ.

:func:`search` scores every merge of two active VQs and every refresh of one
in parallel (``vmap``) and returns the best, if it raises the bound. The
driver (``fit_vb_mcvq(..., moves=True)``) alternates ordinary convergence and
searches until no move raises the bound.

References
----------
Ueda, N., Nakano, R., Ghahramani, Z. and Hinton, G. E. (2000), "SMEM algorithm
for mixture models", Neural Computation 12, 2109-2128.
Hughes, M. C. and Sudderth, E. B. (2013), "Memoized online variational inference
for Dirichlet process mixture models", NIPS (merge moves accepted on the bound).
Arthur, D. and Vassilvitskii, S. (2007), "k-means++" (the seeding).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from inference.mcvq import core, vb_maths
from inference.mixture.seeding import kmeans_plus_plus

__all__ = ["kmeans_states", "propose", "search"]

#: Lloyd iterations of the state re-fit, and alternations of the Q(mu), Q(tau) updates.
_LLOYD_ITERATIONS = 20
_PARAMETER_SWEEPS = 5


def kmeans_states(rng_key, x, weights, num_states: int):
    """One-hot k-means clusters of the examples on weighted dimensions, (N, J).

    Parameters
    ----------
    rng_key : jax.random key
    x : array (N, D)
        Centred data (missing entries at 0).
    weights : array (D,)
        Non-negative weight of every dimension in the squared distance.
    num_states : int
        J clusters (static); clusters that end empty have all-zero columns.
    """
    xs = x * jnp.sqrt(weights)

    def assign(centres):
        distance = (jnp.sum(centres ** 2, axis=1) - 2.0 * xs @ centres.T)
        return jax.nn.one_hot(jnp.argmin(distance, axis=1), num_states, dtype=x.dtype)

    def lloyd(_, centres):
        one_hot = assign(centres)
        count = jnp.sum(one_hot, axis=0)[:, None]
        return jnp.where(count > 0, (one_hot.T @ xs) / jnp.maximum(count, 1.0), centres)

    centres = kmeans_plus_plus(rng_key, xs, num_states)
    return assign(jax.lax.fori_loop(0, _LLOYD_ITERATIONS, lloyd, centres))


def propose(state: vb_maths.VBMCVQState, rng_key, source, target, x, mask, centred,
            conditional: bool = True) -> vb_maths.VBMCVQState:
    """The state after merging VQ ``source`` into ``target`` (refresh when equal).

    Parameters
    ----------
    state : VBMCVQState
    rng_key : jax.random key
        For the k-means++ start.
    source, target : int
        Slots (traced); both should be active.
    x : array (N, D)
        Data with 0 where ``mask`` is False.
    mask : bool array (N, D)
    centred : tuple
        ``inference.mcvq.vb_maths.centred_prior`` of the prior.
    conditional : bool
        The family of Q (static).
    """
    moments, shift = core.data_moments(x, mask)
    num_vqs, num_states = state.pi.shape
    removed = (jnp.arange(num_vqs) == source) & (source != target)
    g = state.g.at[:, target].add(jnp.where(source != target, state.g[:, source], 0.0))
    g = jnp.where(removed, 0.0, g)
    vq_active = state.vq_active & ~removed
    centred_x = jnp.where(mask, x - shift, 0.0)
    m_target = kmeans_states(rng_key, centred_x, g[:, target], num_states)
    used = jnp.sum(m_target, axis=0) > 0
    m = state.m.at[:, target].set(m_target)
    m = jnp.where(removed[None, :, None], state.pi[None], m)  # a removed VQ: m = pi
    state_active = state.state_active.at[target].set(used)
    pi = state.pi.at[target].set(jnp.mean(m_target, axis=0))
    alpha = jnp.where(vq_active, jnp.mean(g, axis=0), 0.0)
    new = state._replace(g=g, m=m, alpha=alpha / jnp.sum(alpha), pi=pi, vq_active=vq_active,
                         state_active=state_active, stats=core.statistics(moments, m))
    weight, first, _ = new.stats
    new = new._replace(mean=jnp.where(weight > 0, first / jnp.maximum(weight, 1e-30), new.mean))
    for _ in range(_PARAMETER_SWEEPS):
        new = vb_maths.update_parameters(new, centred, conditional)
    return new


def _trial(state, x, mask, prior, prune_threshold, temperature, num_steps, conditional):
    def body(state, _):
        return vb_maths.step(state, x, mask, prior, prune_threshold, temperature,
                             conditional)[0], None

    return jax.lax.scan(body, state, None, length=num_steps)[0]


@functools.partial(jax.jit, static_argnames=("num_steps", "conditional"))
def search(state: vb_maths.VBMCVQState, rng_key, x, mask, prior, prune_threshold,
           temperature, *, num_steps: int, conditional: bool = True):
    """Every merge of two active VQs and every refresh of one, scored after ``num_steps``.

    Parameters
    ----------
    state : VBMCVQState
        A converged state.
    rng_key : jax.random key
    x, mask, prior, prune_threshold, temperature
        As for ``inference.mcvq.vb_maths.step``.
    num_steps : int
        Iterations of coordinate ascent from every proposal before it is scored.
    conditional : bool

    Returns
    -------
    best : VBMCVQState
        The proposal with the highest bound after its trial iterations.
    bounds : array (P,)
        L_T of every proposal (-inf for pairs involving a removed VQ).
    pairs : int array (P, 2)
        (source, target) of every proposal; equal entries are refreshes.
    """
    _, shift = core.data_moments(x, mask)
    centred = vb_maths.centred_prior(prior, shift, x.dtype)
    num_vqs = state.pi.shape[0]
    source, target = jnp.triu_indices(num_vqs)
    keys = jax.random.split(rng_key, source.shape[0])

    def score(key, a, b):
        proposal = propose(state, key, a, b, x, mask, centred, conditional)
        trial = _trial(proposal, x, mask, prior, prune_threshold, temperature, num_steps,
                       conditional)
        valid = state.vq_active[a] & state.vq_active[b] & ~trial.all_pruned
        return trial, jnp.where(valid & jnp.isfinite(trial.bound), trial.bound, -jnp.inf)

    trials, bounds = jax.vmap(score)(keys, source, target)
    best = jnp.argmax(bounds)
    return (jax.tree.map(lambda leaf: leaf[best], trials), bounds,
            jnp.stack([source, target], axis=1))
