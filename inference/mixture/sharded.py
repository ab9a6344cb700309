"""The Gaussian-mixture fit with its examples split over devices (issue 9).

:func:`inference.mixture.em.fit_mixture` with ``devices=`` or ``mesh=`` runs
:func:`_run_sharded`: the loop of :func:`inference.mixture.loop.fit_loop` under
``shard_map`` on a 1-D mesh (:mod:`inference.engine.sharding`). Every device sweeps its
own rows; the statistics R^T t(x), the objective, the count of changed labels
and the M-step's exact fallbacks are summed over the devices (``psum``), so the
parameters stay the same on every device and equal the single-device fit's up
to float rounding.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from inference.engine.sharding import map_shards, mesh_axis, psum
from inference.mixture.features import kind_of
from inference.mixture.loop import fit_loop
from inference.mixture.sweep import block_features


@functools.partial(jax.jit, static_argnames=("mode", "covariance", "max_iterations", "prune",
                                             "mesh"))
def run_sharded(x, valid, state, tol, reg_covar, min_count, variance_floor, weight_offset, *,
                 mode, covariance, max_iterations, prune, mesh):
    """``inference.mixture.loop.run_em`` with the examples split over ``mesh``.

    x and ``valid`` are padded to a multiple of the mesh size
    (:func:`inference.engine.sharding.pad_examples`) and split along its example axis.
    The features of every device's rows are taken about the whole data's mean.
    Returns what ``run_em`` returns, the labels padded like x.
    """
    axis = mesh_axis(mesh)

    def per_shard(x, valid, state, tol, reg_covar, min_count, variance_floor, weight_offset):
        num, total = psum((jnp.sum(valid).astype(x.dtype),
                           jnp.sum(jnp.where(valid[:, None], x, 0.0), axis=0)), axis)
        shift = total / num
        features = block_features(x, kind_of(covariance), shift, valid)
        return fit_loop(x, features, state, tol, reg_covar, min_count, variance_floor,
                         weight_offset, mode=mode, covariance=covariance,
                         max_iterations=max_iterations, prune=prune, valid=valid,
                         axis_name=axis, num=num)

    split, same = P(axis), P()
    run = map_shards(per_shard, mesh, 2, (same,) * 6 + (split, split))
    return run(x, valid, state, tol, reg_covar, min_count, variance_floor, weight_offset)
