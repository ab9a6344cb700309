"""The mixture fit's EM iteration as an engine step, and the data it runs on.

One iteration of EM, hard-cut EM or k-means (:mod:`inference.mixture.em`) is one
sweep over the blocked quadratic features of the data (E-step and the M-step's
statistics, :func:`inference.mixture.sweep.sweep_sums`) followed by the closed-form
M-step with pruning (:func:`inference.mixture.mstep.m_step`). :func:`em_step` is that
iteration as an :class:`inference.engine.Algorithm` step, so the engine
(:func:`inference.engine.run`) supplies the loop, the trace, the convergence test,
checkpoints and the split over devices. It is an ``Algorithm`` rather than a
``StatisticsAlgorithm`` because the M-step may need a second look at the data (the
exact scatter where the moment form would cancel). Sharded, each device sweeps its
rows and the statistics, the objective, the count of changed labels and the exact
fallbacks are summed over the devices.

The data the step reads (:func:`prepare`): the examples, their quadratic features
(computed once per fit about the data's mean) and a validity mask, as rows padded
to whole blocks of :func:`inference.mixture.sweep.block_rows` rows (and to a
multiple of the device count), so that the step views them as blocks without a copy.
Bucketed (``layout(..., bucket=True)``, :func:`prepare_padded`; one device), the rows
are padded further, to a size of a geometric ladder (:func:`bucket_rows`), and the
number of examples is a traced value (:class:`Params` ``num``), never a static one:
every program of the fit (the start, the loop, the criteria) then depends on the
bucket only, so data sets of 150 and 151 rows, or the folds of a cross-validation,
share one compilation. The padded rows are masked by ``valid``: every sum is over the
real examples, though summed in another order (the same fit up to float rounding).

Convergence: the step reports ``converged`` itself (the engine's test is then not
used): when the objective changed by at most ``tol`` relative (:func:`settled`) or,
for the hard modes, when no assignment changed.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from inference.engine import Algorithm
from inference.engine.sharding import map_shards, mesh_axis, psum
from inference.mixture.criteria import block_criteria
from inference.mixture.features import feature_width, kind_of
from inference.mixture.mstep import m_step
from inference.mixture.sweep import (
    BlockFeatures,
    EMState,
    block_features,
    block_rows,
    bucket_rows,
    ladder,
    log_joint_eta,
    pad_rows,
    sweep_sums,
)

__all__ = ["MixtureState", "EMInfo", "em_step", "settled", "em_algorithm", "prepare",
           "initial_states", "finish", "finish_sharded", "bucket_rows", "layout", "pad_rows",
           "prepare_padded"]


class MixtureState(NamedTuple):
    """The engine's state of one mixture fit: the parameters (padded to the k components at
    the start, ``active`` marking those not pruned), the labels of the last sweep (hard
    modes, one per data row; -1 before the first) and the last objective."""

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    active: jax.Array
    labels: jax.Array
    objective: jax.Array


class EMInfo(NamedTuple):
    """Per-iteration record of the fit: the objective before the update, the surviving
    components after its pruning, and the fit's own stopping test (:func:`settled`)."""

    objective: jax.Array
    num_components: jax.Array
    converged: jax.Array


class Params(NamedTuple):
    """The numbers the step reads (replicated over the devices)."""

    shift: jax.Array
    tol: jax.Array
    reg_covar: jax.Array
    min_count: jax.Array
    variance_floor: jax.Array
    weight_offset: jax.Array
    inv_scale: jax.Array
    num: jax.Array | None = None  # the number of examples (traced: the rows are padded)


def _features(phi, valid, shift, block):
    """The rows' features as blocks (a view: the rows are a multiple of ``block``)."""
    return BlockFeatures(shift, phi.reshape(-1, block, phi.shape[1]), valid.reshape(-1, block))


def em_step(rng_key, state, data, params, *, shard, mode, covariance, prune, block,
            num=None):
    """One EM / hard-cut EM / k-means iteration (module docstring); jittable.

    ``data`` is ``(x, phi, valid)`` (:func:`prepare`), ``params`` a :class:`Params`;
    the number of examples, the divisor of the mean objective, is ``params.num``
    (traced, so that one program serves every size in a bucket), or ``num`` (static)
    when given.
    """
    del rng_key  # deterministic
    x, phi, valid = data
    axis = None
    if shard is not None:
        valid, axis = valid & shard.valid, shard.axis_name
    features = _features(phi, valid, params.shift, block)
    em = EMState(state.weights, state.means, state.covariances, state.active)
    eta = log_joint_eta(x, em, mode, covariance, params.shift)
    stats, total, labels = sweep_sums(features, eta, em.active, mode)
    hard = mode != "stochastic"
    changed = jnp.sum((labels != state.labels) & valid) if hard else jnp.zeros((), jnp.int32)
    if axis is not None:  # one collective for every sum of the iteration
        stats, total, changed = psum((stats, total, changed), axis)
    objective = total / (params.num if num is None else num)
    # num=None: the valid rows are the examples (the padding of the rows is masked).
    new = m_step(x, stats, labels, em, eta, features, mode, covariance, params.reg_covar,
                 prune, params.min_count, params.variance_floor, params.weight_offset,
                 axis_name=axis, num=num, inv_scale=params.inv_scale)
    count = jnp.sum(new.active).astype(jnp.int32)
    converged = settled(objective, state.objective, params.tol)
    if hard:  # the hard modes reach a fixed point when no assignment changes
        converged = converged | (changed == 0)
    new_state = MixtureState(*new, labels if hard else state.labels, objective)
    return new_state, EMInfo(objective, count, converged)


def settled(objective, previous, tol):
    """|previous - objective| / |objective| <= tol (False while ``previous`` is infinite).

    The fit's relative change, taken against the new objective. The engine's test
    (:func:`inference.engine.relative_change_converged`) takes it against the previous
    one; with float32 objectives and the default tol = 1e-7 both sit at the last
    digit, where the two roundings stop a fit at different iterations.
    """
    return jnp.abs(previous - objective) / jnp.maximum(jnp.abs(objective), 1e-30) <= tol


def em_algorithm(*, mode, covariance, prune, block, num=None,
                 name="fit_mixture") -> Algorithm:
    """The engine's :class:`~inference.engine.Algorithm` of the mixture fit (hashable).

    ``num=None`` (:func:`inference.mixture.em.fit_mixture`): the number of examples is
    read from ``params.num`` (traced); an int makes it a static option."""
    rows = ("labels",) if mode != "stochastic" else ()
    options = (("mode", mode), ("covariance", covariance), ("prune", prune), ("block", block))
    if num is not None:
        options += (("num", num),)
    return Algorithm(em_step, options=options, name=name, rows=rows, vectorized=False)


def layout(num, dim, covariance, devices=1, *, bucket=False):
    """Rows per block and the padded number of rows for ``num`` examples over ``devices``.

    One device: :func:`inference.mixture.sweep.block_rows` of the data. Several: the
    blocks of one device's share, every device holding whole blocks.

    ``bucket`` (one device): the rows are the bucket of ``num`` (:func:`bucket_rows`) and
    the block :func:`inference.mixture.sweep.block_rows` of that many rows; when the
    bucket holds more than one block, the number of blocks is bucketed on the same
    ladder instead. Every ``num`` of a bucket then gets the same layout (and, with
    :func:`prepare_padded`, the same compiled programs).
    """
    width = feature_width(kind_of(covariance), dim)
    if bucket and devices == 1:
        rows = bucket_rows(num)
        block = block_rows(rows, width)
        if block < rows:  # whole blocks of block_rows: bucket their number
            rows = ladder(-(-num // block)) * block
        return block, rows
    block = block_rows(-(-num // devices), width)
    multiple = block * devices
    return block, -(-num // multiple) * multiple


@functools.partial(jax.jit, static_argnames=("covariance", "block", "rows"))
def prepare(x, *, covariance, block, rows):
    """The step's data ``(x, phi, valid)`` padded to ``rows`` rows (:func:`layout`), and the
    shift: the features of :func:`inference.mixture.sweep.block_features` about the data's
    mean, as rows."""
    num = x.shape[0]
    features = block_features(x, kind_of(covariance), block=block)
    phi = features.blocks.reshape(-1, features.blocks.shape[-1])
    phi = jnp.pad(phi, ((0, rows - phi.shape[0]), (0, 0)))
    padded = jnp.pad(x, ((0, rows - num), (0, 0)))
    return (padded, phi, jnp.arange(rows) < num), features.shift


@functools.partial(jax.jit, static_argnames=("covariance", "block"))
def prepare_padded(x, num, *, covariance, block):
    """The step's data ``(x, phi, valid)`` and the shift from x padded to whole blocks
    (:func:`layout`, :func:`pad_rows`) whose first ``num`` rows (traced) are the
    examples: the features of :func:`inference.mixture.sweep.block_features` about the
    examples' mean, as rows, zero on the padding."""
    rows = x.shape[0]
    valid = jnp.arange(rows) < num
    shift = jnp.sum(jnp.where(valid[:, None], x, 0.0), axis=0) / num.astype(x.dtype)
    features = block_features(x, kind_of(covariance), shift=shift, block=block)
    phi = features.blocks.reshape(-1, features.blocks.shape[-1])
    phi = jnp.where(valid[:, None], phi, 0.0)
    return (x, phi, valid), shift


@functools.partial(jax.jit, static_argnames=("labels",))
def initial_states(state, *, labels):
    """The engine's stacked states from the padded start ``state``: one start, or several
    when ``state``'s leaves carry a leading axis of starts (``state.weights`` 2-D)."""
    if state.weights.ndim == 1:
        state = jax.tree.map(lambda leaf: leaf[None], state)
    starts = state.weights.shape[0]
    return MixtureState(*state, jnp.full((starts, labels), -1, jnp.int32),
                        jnp.full(starts, jnp.inf, state.means.dtype))


@functools.partial(jax.jit, static_argnames=("covariance", "block", "map_is_nearest",
                                             "masked"))
def finish(x, phi, valid, shift, state, *, covariance, block, map_is_nearest, masked=False):
    """The criteria at the fit (:func:`inference.mixture.criteria.block_criteria`) over the
    ``x.shape[0]`` examples of the padded rows ``phi``/``valid``. ``masked``: x is the
    padded rows of :func:`prepare_padded` too, the criteria are over its valid rows and
    the labels are every row's (the caller keeps the first ``num``)."""
    features = _features(phi, valid, shift, block)
    return block_criteria(x, features, state.weights, state.means, state.covariances,
                          state.active, covariance, map_is_nearest=map_is_nearest,
                          masked=masked)


@functools.partial(jax.jit, static_argnames=("covariance", "block", "map_is_nearest",
                                             "mesh"))
def finish_sharded(data, shift, state, *, covariance, block, map_is_nearest, mesh):
    """:func:`finish` with the rows split over ``mesh``; labels of every padded row."""
    axis = mesh_axis(mesh)

    def per_shard(x, phi, valid, shift, state):
        features = _features(phi, valid, shift, block)
        return block_criteria(x, features, state.weights, state.means, state.covariances,
                              state.active, covariance, map_is_nearest=map_is_nearest,
                              axis_name=axis)

    run = map_shards(per_shard, mesh, 3, (P(), P(axis), P(axis)))
    return run(*data, shift, state)
