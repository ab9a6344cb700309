"""The fitted mixture's criteria (L_stocha, L_map, L_NN, J) over the data."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from inference.engine.sharding import (
    psum,
)
from inference.mixture import sweep
from inference.mixture.features import (
    component_log_joint,
    kind_of,
    log_joint_parameters,
    quadratic_features,
    trace_components,
)
from inference.mixture.sweep import block_features, first_argmax


def criteria(x, weights, means, covariances, covariance="full"):
    """L_stocha, L_map, L_NN and J of a mixture on data x (module docstring), as floats.

    With :data:`inference.mixture.sweep.BUCKET_ROWS` on, x is padded to its bucket
    (:func:`inference.mixture.sweep.bucket_rows`) and the program serves every
    number of examples in it (held-out folds of several sizes compile once)."""
    x = jnp.asarray(x)
    if sweep.BUCKET_ROWS:
        num = x.shape[0]
        values = _criteria_padded(sweep.pad_rows(x, sweep.bucket_rows(num)),
                                  jnp.asarray(num, jnp.int32), weights, means, covariances,
                                  covariance)
    else:
        values, _, _ = _criteria(x, weights, means, covariances, covariance)
    return {name: float(value) for name, value in values.items()}


@functools.partial(jax.jit, static_argnums=5)
def _criteria_padded(x, num, weights, means, covariances, covariance):
    """:func:`criteria`'s values on x padded past its first ``num`` (traced) rows."""
    valid = jnp.arange(x.shape[0]) < num
    shift = jnp.sum(jnp.where(valid[:, None], x, 0.0), axis=0) / num.astype(x.dtype)
    features = block_features(x, kind_of(covariance), shift=shift, valid=valid)
    values, _, _ = block_criteria(x, features, weights, means, covariances,
                                  jnp.ones(means.shape[0], bool), covariance, masked=True)
    return values


@functools.partial(jax.jit, static_argnums=4)
def _criteria(x, weights, means, covariances, covariance):
    """:func:`criteria` as arrays, with the MAP labels and the nearest-mean labels."""
    features = block_features(x, kind_of(covariance))
    return block_criteria(x, features, weights, means, covariances,
                           jnp.ones(means.shape[0], bool), covariance)


def block_criteria(x, features, weights, means, covariances, active, covariance,
                    map_is_nearest=False, axis_name=None, masked=False):
    """:func:`criteria` of the ``active`` components from the data's blocked features.

    ``features`` are :func:`block_features` of x for the covariance family (the
    sweep's, reused by the fit). Inactive components take no part: no probability,
    no nearest mean, and k in J and L_NN counts the active ones only. Returns the
    values, the MAP labels and the nearest-mean labels (indices among all
    components). ``map_is_nearest`` (static): the mixture has equal weights and one
    shared spherical covariance, as every k-means fit ends with, so its most
    probable component is the nearest mean and the energies need no second product.
    ``axis_name`` (the sharded fit, inside ``shard_map``): x and ``features`` are one
    device's rows, ``features.valid`` False on padded ones; the means over examples
    are summed over the devices, the labels are the device's rows. ``masked`` (static;
    one device): x and ``features`` are rows padded past the examples, ``features.valid``
    False on the padding; the means are over the valid rows (their number traced, so
    one program serves every number of examples in a bucket), the labels are every
    row's.
    """
    num, dim = x.shape
    k = means.shape[0]
    shift = features.shift
    eye = jnp.broadcast_to(jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    kind = kind_of(covariance)
    equal = jnp.where(active, 1.0, 0.0).astype(x.dtype) / jnp.maximum(jnp.sum(active), 1)

    def parameters(w, m, c, family, limit):
        """The program's eta (k, p) for one block's features, or None (evaluate sites)."""
        trace = trace_components(x[:1], w, m, c, family, None, limit)
        eta = log_joint_parameters(trace, k, kind_of(family), shift, limit)
        return None if eta is None else eta.astype(x.dtype)

    # The natural parameters once, not per block (a Cholesky per component for "full").
    eta_joint = parameters(weights, means, covariances, covariance, False)
    eta_energy = parameters(equal, means, eye, "spherical", True)

    centres = means - shift  # the means in the features' coordinates z = x - shift

    def per_block(phi):  # one block of examples: the features stay in cache
        # The block's z = x - shift, read from its features (the last d columns before
        # the constant) rather than from a padded copy of x, which a loop over blocks
        # inside this jit would copy once per block.
        z = phi[:, -1 - dim:-1]
        if eta_joint is None:
            log_joint = component_log_joint(z + shift, weights, means, covariances,
                                            covariance=covariance, features=(shift, phi))
        else:
            log_joint = phi @ eta_joint.T
        log_joint = jnp.where(active, log_joint, -jnp.inf)
        labels, top = first_argmax(log_joint)
        # Nearest means from the noiseless program's energies; E_MSE exactly from them.
        if map_is_nearest:
            nearest = labels
        else:
            spherical = (phi if kind == "spherical"
                         else quadratic_features(z, "spherical", jnp.zeros_like(shift))[1])
            if eta_energy is None:
                minus_energy = component_log_joint(z + shift, equal, means, eye,
                                                   covariance="spherical", limit=True,
                                                   features=(shift, spherical))
            else:
                minus_energy = spherical @ eta_energy.T
            nearest, _ = first_argmax(jnp.where(active, minus_energy, -jnp.inf))
        residual = z - centres[nearest]
        return (jax.nn.logsumexp(log_joint, axis=1), labels, top, nearest,
                jnp.sum(residual * residual, axis=1))

    log_px, labels, top, nearest, squared = (
        value.reshape(-1)[:num] for value in jax.lax.map(per_block, features.blocks))
    log_weights = jnp.log(jnp.where(weights > 0, weights, 1.0))
    if axis_name is None and not masked:
        l_stocha = -jnp.mean(log_px)
        hard = jnp.bincount(labels, length=k) / num
        map_term = jnp.mean(top - log_weights[labels])
        e_mse = jnp.mean(squared)
    else:  # padded rows (one device's, or masked): sums over the valid ones, added over
        # the devices at once
        valid = features.valid.reshape(-1)[:num]

        def total(value):
            return jnp.sum(jnp.where(valid, value, 0.0))

        sums = (jnp.sum(valid).astype(x.dtype), total(log_px), total(top - log_weights[labels]),
                total(squared), jnp.bincount(labels, weights=valid.astype(x.dtype), length=k))
        count, log_px, map_term, squared, hard = (sums if axis_name is None
                                                  else psum(sums, axis_name))
        l_stocha, map_term, e_mse, hard = -log_px / count, map_term / count, squared / count, \
            hard / count
    l_map = (-map_term
             - jnp.sum(jnp.where(hard > 0, hard * jnp.log(jnp.where(hard > 0, hard, 1.0)), 0.0)))
    b0 = 0.5 * dim * math.log(2 * math.pi)
    log_k = jnp.log(jnp.maximum(jnp.sum(active), 1).astype(x.dtype))
    l_nn = 0.5 * dim + log_k + 0.5 * dim * jnp.log(e_mse / dim) + b0
    j = log_k + 0.5 * dim * jnp.log(e_mse)
    values = {"L_stocha": l_stocha, "L_map": l_map, "L_NN": l_nn, "J": j, "E_MSE": e_mse}
    return values, labels.astype(jnp.int32), nearest.astype(jnp.int32)


