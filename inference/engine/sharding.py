"""Data parallelism over JAX devices along the example axis (scaling to many devices).

Every data-parallel step of the zoo's algorithms (E-steps, sufficient statistics,
moments, association of many examples) is a sum over examples of a per-example
quantity. With several devices the examples are split over a one-dimensional
device mesh (:class:`jax.sharding.Mesh` with one axis, named ``"data"`` here):
each device runs the same per-shard function on its rows under
:func:`jax.shard_map`, and :func:`jax.lax.psum` adds the statistics over the
devices, so every device ends each step with the same (replicated) parameters.
The results equal the single-device ones up to the order of float additions.

The pieces the algorithms share:

* :func:`resolve_mesh` turns a function's ``devices=None, mesh=None`` keyword pair
  into a mesh, or ``None`` for the plain single-device path (the default with one
  device, which then runs exactly the code it ran before);
* :func:`pad_examples` pads the example axis to a multiple of the mesh size, with a
  validity mask: the padded rows are masked out of every sum, so any number of
  examples works on any number of devices;
* :func:`shard_examples` places arrays on the mesh, rows split over its data axis;
* :func:`map_shards` wraps a per-shard function in ``shard_map`` (example-axis
  arguments split, the others replicated) and :func:`sum_over_shards` runs one
  and adds its outputs over the devices; :func:`psum` is ``lax.psum`` that passes
  its value through when there is no axis (the single-device path).

Several hosts: call ``jax.distributed.initialize()`` in every process before
anything else (the user's job; this module never calls it); ``jax.devices()``
then lists the devices of all hosts and the default mesh spans them. One host
with one CPU can simulate devices for testing: set
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` before JAX initialises.
Simulated devices share the same cores, so they show correctness, not speed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["DATA_AXIS", "resolve_mesh", "mesh_axis", "mesh_size", "pad_examples",
           "shard_examples", "map_shards", "sum_over_shards", "psum"]

#: Name of the example axis of the meshes that :func:`resolve_mesh` builds.
DATA_AXIS = "data"


def mesh_axis(mesh: Mesh) -> str:
    """The mesh axis the examples are split along: its only axis, or the one named "data".

    >>> import numpy as np
    >>> mesh_axis(Mesh(np.array(jax.devices()[:1]), ("batch",)))
    'batch'
    """
    names = tuple(mesh.axis_names)
    if len(names) == 1:
        return names[0]
    if DATA_AXIS in names:
        return DATA_AXIS
    raise ValueError(f"mesh must have exactly one axis or an axis named {DATA_AXIS!r}; "
                     f"got a mesh with axes {names}")


def mesh_size(mesh: Mesh) -> int:
    """Number of devices along the mesh's example axis (:func:`mesh_axis`)."""
    return int(mesh.shape[mesh_axis(mesh)])


def resolve_mesh(devices=None, mesh=None) -> Mesh | None:
    """The device mesh for a function's ``devices=None, mesh=None`` keyword pair.

    Parameters
    ----------
    devices : None, int or sequence of jax.Device
        ``None``: all of ``jax.devices()`` when there is more than one, else no mesh.
        An int n >= 1: the first n devices (n = 1 gives a mesh of one device: the
        sharded code path on one device). A sequence: those devices, in that order.
    mesh : jax.sharding.Mesh, optional
        A mesh of the caller's: it must have exactly one axis, or an axis named
        ``"data"`` (the examples are split along it and replicated along the
        others). Exclusive with ``devices``.

    Returns
    -------
    Mesh or None
        ``None`` means the plain single-device path.

    >>> resolve_mesh() is None or len(jax.devices()) > 1
    True
    >>> resolve_mesh(devices=1).axis_names
    ('data',)
    """
    if mesh is not None:
        if devices is not None:
            raise ValueError(f"pass devices or mesh, not both; got devices={devices!r} and a "
                             "mesh")
        if not isinstance(mesh, Mesh):
            raise TypeError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}")
        mesh_axis(mesh)
        return mesh
    available = jax.devices()
    if devices is None:
        return Mesh(np.array(available), (DATA_AXIS,)) if len(available) > 1 else None
    if isinstance(devices, bool | float) or not isinstance(devices, int | Sequence):
        raise TypeError("devices must be None, an int or a sequence of jax devices; got "
                        f"{type(devices).__name__}")
    if isinstance(devices, int):
        if not 1 <= devices <= len(available):
            raise ValueError(f"devices must be between 1 and the {len(available)} available "
                             f"device(s); got {devices}")
        chosen = list(available[:devices])
    else:
        chosen = list(devices)
        if not chosen:
            raise ValueError("devices must not be an empty sequence")
        if not all(isinstance(d, jax.Device) for d in chosen):
            raise TypeError("devices must hold jax.Device objects (from jax.devices()); got "
                            f"{[type(d).__name__ for d in chosen]}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"devices must be distinct; got {chosen}")
    return Mesh(np.array(chosen), (DATA_AXIS,))


def pad_examples(x, multiple: int, fill=0):
    """Pad the example axis (axis 0) of ``x`` to a multiple of ``multiple``.

    Returns ``(padded, valid)``: the rows appended hold ``fill`` and ``valid``
    (bool, (padded rows,)) is False on them, so that sums over examples can mask them.

    >>> padded, valid = pad_examples(jnp.ones((5, 2)), 4)
    >>> padded.shape, int(valid.sum())
    ((8, 2), 5)
    """
    num = x.shape[0]
    total = -(-num // multiple) * multiple
    widths = [(0, total - num)] + [(0, 0)] * (jnp.ndim(x) - 1)
    return jnp.pad(x, widths, constant_values=fill), jnp.arange(total) < num


def shard_examples(mesh: Mesh, *arrays):
    """``arrays`` placed on ``mesh``, axis 0 split along its example axis (lengths a multiple)."""
    sharding = NamedSharding(mesh, P(mesh_axis(mesh)))
    placed = tuple(jax.device_put(a, sharding) for a in arrays)
    return placed[0] if len(placed) == 1 else placed


def psum(value, axis_name):
    """``lax.psum(value, axis_name)``, or ``value`` itself when ``axis_name`` is None.

    ``value`` may be a tuple of arrays: they are summed in ONE collective (raveled,
    concatenated in a common dtype, split back). Independent collectives issued
    separately may be started in different orders on different devices by XLA's
    CPU runtime, which runs independent operations concurrently, and then wait on
    each other for ever; sums needed at the same point go through one call.
    """
    if axis_name is None:
        return value
    if not isinstance(value, tuple):
        return jax.lax.psum(value, axis_name)
    arrays = [jnp.asarray(v) for v in value]
    dtype = jnp.result_type(*arrays)
    flat = jax.lax.psum(jnp.concatenate([a.astype(dtype).ravel() for a in arrays]), axis_name)
    out, start = [], 0
    for a in arrays:
        out.append(flat[start:start + a.size].reshape(a.shape).astype(a.dtype))
        start += a.size
    return tuple(out)


def map_shards(fn: Callable, mesh: Mesh, num_sharded: int, out_specs):
    """``fn`` under ``shard_map``: its first ``num_sharded`` arguments split by rows, the rest
    replicated. ``fn`` sees one shard and must ``psum`` (over :func:`mesh_axis`) whatever it
    returns replicated; ``out_specs`` is a pytree of ``PartitionSpec`` (``P()``:
    replicated, ``P(mesh_axis(mesh))``: rows split).

    The replication of the outputs is the caller's promise (``check_vma=False``): loop
    carries mix per-shard and summed values, which JAX's checker cannot follow.
    """
    axis = mesh_axis(mesh)

    def wrapped(*args):
        specs = tuple(P(axis) if i < num_sharded else P() for i in range(len(args)))
        return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=out_specs,
                             check_vma=False)(*args)

    return wrapped


def sum_over_shards(fn: Callable, mesh: Mesh, sharded: Sequence, replicated: Sequence = ()):
    """Run ``fn(*shards, *replicated)`` on every shard and add its outputs over the devices.

    ``sharded`` arrays are padded to a multiple of the mesh size first
    (:func:`pad_examples`, zeros) and ``fn`` receives the shard's validity mask as
    its last argument, so that it can leave the padded rows out of its sums.

    >>> import numpy as np
    >>> mesh = resolve_mesh(devices=1)
    >>> def moments(x, valid):
    ...     return jnp.sum(jnp.where(valid[:, None], x, 0.0), axis=0)
    >>> np.asarray(sum_over_shards(moments, mesh, [jnp.ones((3, 2))])).tolist()
    [3.0, 3.0]
    """
    size = mesh_size(mesh)
    padded = [pad_examples(jnp.asarray(a), size)[0] for a in sharded]
    valid = pad_examples(jnp.zeros(jnp.shape(sharded[0])[0]), size)[1]
    return _summed_over_shards(fn, mesh, len(padded))(*padded, valid, *replicated)


@functools.lru_cache(maxsize=64)
def _summed_over_shards(fn: Callable, mesh: Mesh, count: int):
    """The jitted program of :func:`sum_over_shards`, built once per (fn, mesh, count): a
    new ``jax.jit`` object per call would trace and compile again on every call (pass a
    module-level ``fn`` to benefit; a new closure per call still compiles anew)."""
    axis = mesh_axis(mesh)

    def per_shard(*args):  # the shards and their mask are split, the rest replicated
        shards, mask, rest = args[:count], args[count], args[count + 1:]
        out = fn(*shards, *rest, mask)
        return jax.tree_util.tree_map(lambda v: jax.lax.psum(v, axis), out)

    return jax.jit(map_shards(per_shard, mesh, count + 1, P()))
