"""Checkpoint and resume for the iterative fits: the chunked driver.

An iterative fit (EM, variational EM, SVI) is a loop ``while not done and it <
num_iterations``. Its jitted loop takes one more bound, ``stop_at`` (a traced
int: run until done or ``it == stop_at``), so that the same compiled loop runs
the whole fit in one call (``stop_at = num_iterations``) or in chunks of
``checkpoint_every`` iterations. :func:`run_chunks` is the driver: it calls the
fit's ``advance(carry, stop_at)`` and, after every chunk, writes the whole loop
carry (state, iteration counts, done flags, traces, keys) and the fit's options
to a checkpoint file (:func:`inference.engine.persistence.save_tree`, written to a
temporary file in the same directory and moved into place with ``os.replace``,
so that a process killed while writing leaves the previous checkpoint intact).

A fit resumed from a checkpoint (``resume_from=``) reloads the carry and goes on
from the iteration it had reached; the result is bit-identical to the
uninterrupted fit with the same ``rng_key``, because

* every chunk runs the same compiled program on the carry the previous one left
  (the carry makes an exact round trip through the file), whatever the chunk
  size; an uninterrupted fit with ``checkpoint_every=None`` is the one-chunk
  case of the same program;
* every per-iteration random key is derived from the iteration index
  (``jax.random.fold_in``) or carried in the state, never from the chunk.

A checkpoint belongs to one fit (its ``kind``) and one set of options; resuming
checks both, and the data (its SHA-256), and names the first option that differs.

References
----------
The chunked loop follows the pattern of NumPyro's ``SVI.run`` / BlackJAX's
``run_inference_algorithm``: a pure, jittable step driven from Python.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import numpy as np

__all__ = ["Checkpointing", "checkpointing", "check_checkpoint_options", "data_digest",
           "prepare", "flatten_carry", "jsonable", "load_checkpoint", "run_chunks",
           "save_checkpoint", "unflatten_carry"]

logger = logging.getLogger(__name__)

#: Arrays in the options with at most this many entries are stored as lists (so that
#: an error message can show both values); bigger ones by their SHA-256.
_MAX_LISTED = 16


def check_checkpoint_options(checkpoint_path, checkpoint_every, resume_from):
    """Validate the three checkpoint options of a fit.

    Parameters
    ----------
    checkpoint_path : str or os.PathLike or None
        Where to write the checkpoints (``.npz`` is appended when missing).
    checkpoint_every : int or None
        Iterations per chunk (a positive int); needs ``checkpoint_path``.
    resume_from : str or os.PathLike or None
        An existing checkpoint to continue from (``.npz`` appended if that is the
        file that exists).

    Returns
    -------
    (pathlib.Path or None, int or None, pathlib.Path or None)

    Raises
    ------
    ValueError, TypeError
        Naming the argument: ``checkpoint_every`` without ``checkpoint_path``, a
        ``checkpoint_every`` that is not a positive int, a path that is not a path, a
        ``resume_from`` that does not exist.
    """
    path = _as_path(checkpoint_path, "checkpoint_path")
    resume = _as_path(resume_from, "resume_from")
    if checkpoint_every is not None:
        if isinstance(checkpoint_every, bool) or not isinstance(
                checkpoint_every, int | np.integer):
            raise TypeError("checkpoint_every must be a positive int (iterations per "
                            f"checkpoint) or None; got {checkpoint_every!r}")
        if checkpoint_every < 1:
            raise ValueError("checkpoint_every must be a positive int (iterations per "
                             f"checkpoint); got {checkpoint_every!r}")
        if path is None:
            raise ValueError(f"checkpoint_every={int(checkpoint_every)} needs checkpoint_path "
                             "(the file to write the checkpoints to); got checkpoint_path=None")
        checkpoint_every = int(checkpoint_every)
    if path is not None and checkpoint_every is None:
        raise ValueError(f"checkpoint_path={str(path)!r} needs checkpoint_every (iterations "
                         "per checkpoint, a positive int); got checkpoint_every=None")
    if path is not None and path.is_dir():
        raise ValueError(f"checkpoint_path must be a file path; {str(path)!r} is a directory")
    if path is not None and path.suffix != ".npz":  # as persistence.save_tree names it
        path = path.with_name(path.name + ".npz")
    if resume is not None and not resume.is_file():
        with_suffix = resume.with_name(resume.name + ".npz")
        if resume.suffix == ".npz" or not with_suffix.is_file():
            raise ValueError(f"resume_from: no checkpoint file at {str(resume)!r}")
        resume = with_suffix
    return path, checkpoint_every, resume


def prepare(checkpoint_path, checkpoint_every, resume_from, options: dict, *, data,
            **digests):
    """The checkpoint options of a fit, checked, and the options to save with them.

    Parameters
    ----------
    checkpoint_path, checkpoint_every, resume_from
        The fit's three options (:func:`check_checkpoint_options`).
    options : dict
        What determines the fit's result (JSON-able through :func:`jsonable`).
    data : tuple of arrays
        The data (x first; a mask after it, say): saved as x's shape and dtype and
        the SHA-256 of all of them (``data_sha256``).
    **digests : array or tuple of arrays
        Further inputs saved by their SHA-256 as ``<name>_sha256`` (the starts, a
        temperature schedule, a prior).

    Returns
    -------
    (path, every, resume, saved)
        ``saved`` is ``{}`` when neither ``checkpoint_path`` nor ``resume_from`` is
        given (no checkpoint: nothing is hashed).
    """
    path, every, resume = check_checkpoint_options(checkpoint_path, checkpoint_every,
                                                   resume_from)
    if path is None and resume is None:
        return path, every, resume, {}
    x = data[0]
    saved = dict(options, x_shape=tuple(np.shape(x)), dtype=str(x.dtype))
    for name, arrays in digests.items():
        arrays = arrays if isinstance(arrays, tuple | list) else (arrays,)
        saved[f"{name}_sha256"] = data_digest(*arrays)
    saved["data_sha256"] = data_digest(*data)
    return path, every, resume, saved


class Checkpointing(NamedTuple):
    """A fit's checkpoint settings, as :func:`inference.engine.loop.run` takes them.

    Attributes
    ----------
    path, every, resume
        As :func:`check_checkpoint_options` returns them.
    options : dict
        What determines the fit's result, saved with the checkpoint and checked on
        resume (:func:`prepare`'s ``saved``).
    resumed : dict, optional
        A checkpoint the fit has loaded already (for fits whose checkpoints hold more
        than one loop, e.g. the phases of the VB-MCVQ fit).
    extra : dict, optional
        Entries saved beside the loop carry (e.g. the phase of a fit).
    """

    path: pathlib.Path | None
    every: int | None
    resume: pathlib.Path | None
    options: dict
    resumed: dict | None = None
    extra: dict | None = None

    def chunk_arguments(self, kind: str) -> dict:
        """The keyword arguments of :func:`run_chunks` for a fit named ``kind``."""
        return dict(kind=kind, options=self.options, checkpoint_path=self.path,
                    checkpoint_every=self.every, resume_from=self.resume,
                    resumed=self.resumed, extra=self.extra)


def checkpointing(checkpoint_path, checkpoint_every, resume_from, options: dict, *, data,
                  **digests) -> Checkpointing | None:
    """:func:`prepare` as a :class:`Checkpointing` for the engine, or None without
    checkpoint options (nothing is hashed then)."""
    path, every, resume, saved = prepare(checkpoint_path, checkpoint_every, resume_from,
                                         options, data=data, **digests)
    if path is None and resume is None:
        return None
    return Checkpointing(path, every, resume, saved)


def _as_path(value, name):
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise TypeError(f"{name} must be a path (str or os.PathLike) or None; got "
                        f"{type(value).__name__}")
    return pathlib.Path(value)


def data_digest(*arrays) -> str:
    """SHA-256 (hex) of the arrays' dtypes, shapes and bytes, in order (None allowed).

    >>> import numpy as np
    >>> data_digest(np.zeros(3)) == data_digest(np.zeros(3))
    True
    >>> data_digest(np.zeros(3)) == data_digest(np.zeros(3, np.float32))
    False
    """
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            digest.update(b"None;")
            continue
        if _is_key(array):
            array = jax.random.key_data(array)
        arr = np.ascontiguousarray(np.asarray(array))
        digest.update(f"{arr.dtype.str}{arr.shape};".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def _is_key(value) -> bool:
    return isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype,
                                                                  jax.dtypes.prng_key)


def jsonable(value):
    """A JSON-serialisable form of an option value, equal for equal options.

    Python scalars and strings stay; numpy scalars become Python ones; tuples
    become lists; dicts keep str keys; typed PRNG keys become their key data;
    arrays become lists (up to 16 entries) or ``{"sha256", "shape", "dtype"}``;
    callables their ``module.qualname``; anything else its ``repr``.

    >>> jsonable((1, np.float32(0.5), {"a": np.arange(2)}))
    [1, 0.5, {'a': [0, 1]}]
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in sorted(value.items(),
                                                                   key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if _is_key(value):
        value = jax.random.key_data(value)
    if isinstance(value, np.ndarray | jax.Array):
        arr = np.asarray(value)
        if arr.size <= _MAX_LISTED:
            return arr.tolist()
        return {"sha256": data_digest(arr), "shape": list(arr.shape), "dtype": arr.dtype.str}
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def _normalise(options: dict) -> dict:
    return json.loads(json.dumps(jsonable(options)))


def save_checkpoint(path, tree: dict, *, kind: str, options: dict) -> pathlib.Path:
    """Write a checkpoint ``tree`` of the fit ``kind`` with its ``options`` (atomically).

    Parameters
    ----------
    path : path
    tree : dict
        What to save (str keys; NamedTuples of the project, lists, arrays, keys, ...):
        :func:`run_chunks` saves ``{"carry": flatten_carry(carry), "stop_at": int}``
        and any extra entries of the fit.
    kind : str
        The fit, e.g. ``"fit_mcvq"``.
    options : dict
        Everything that determines the result (:func:`jsonable` values), the
        data's SHA-256 included.

    Returns
    -------
    pathlib.Path
    """
    from inference.engine import persistence  # the file format

    return persistence.save_tree(path, tree, kind=kind, options=_normalise(options))


def load_checkpoint(path, *, kind: str, options: dict) -> dict:
    """Read a checkpoint of the fit ``kind`` written with the same ``options``.

    Returns
    -------
    dict
        The tree :func:`save_checkpoint` wrote.

    Raises
    ------
    ValueError
        The file is not a checkpoint of ``kind`` (``persistence.PersistenceError``,
        a ValueError: another kind, truncated, changed), or an option differs: the
        message names it with both values (``x differs from the data``: the data's
        SHA-256 differs).
    """
    from inference.engine import persistence

    try:
        tree, metadata = persistence.load_tree(path, kind=kind)
    except persistence.PersistenceError as error:
        raise ValueError(f"resume_from: {str(path)!r} is not a usable checkpoint of {kind}: "
                         f"{error}") from error
    saved = metadata.get("options") or {}
    current = _normalise(options)
    # The options in the caller's order, the digests (``*_sha256``) last.
    names = list(current) + [name for name in saved if name not in current]
    names.sort(key=lambda name: name.endswith("sha256"))
    for name in names:
        if saved.get(name) != current.get(name):
            if name.endswith("sha256"):
                what = ("x differs from the data" if name == "data_sha256" else
                        f"{name[:-len('_sha256')]} differs from the one")
                raise ValueError(f"resume_from: {what} the checkpoint "
                                 f"{str(path)!r} was written with (SHA-256 "
                                 f"{str(saved.get(name))[:12]}... there, "
                                 f"{str(current.get(name))[:12]}... here)")
            raise ValueError(f"resume_from: option {name} differs from the checkpoint "
                             f"{str(path)!r}: {name}={saved.get(name)!r} there, "
                             f"{name}={current.get(name)!r} here")
    if not isinstance(tree, dict):
        raise ValueError(f"resume_from: {str(path)!r} holds no checkpoint of {kind}")
    return tree


def flatten_carry(carry) -> list:
    """The leaves of a loop carry (any pytree: optimiser states included), as saved."""
    return jax.tree.leaves(carry)


def unflatten_carry(leaves, like, path=None):
    """The carry with the structure of ``like`` (a carry or ``jax.eval_shape`` of one)
    from saved ``leaves``; raises ``ValueError`` if their number, shapes or dtypes differ."""
    expected, treedef = jax.tree.flatten(like)
    where = f"resume_from: {str(path)!r}" if path is not None else "resume_from"
    if not isinstance(leaves, list) or len(leaves) != len(expected):
        raise ValueError(f"{where} holds a loop carry of another structure "
                         f"({len(leaves) if isinstance(leaves, list) else '?'} arrays, "
                         f"{len(expected)} expected)")
    out = []
    for i, (leaf, spec) in enumerate(zip(leaves, expected, strict=True)):
        shape, dtype = np.shape(leaf), getattr(leaf, "dtype", None)
        if shape != tuple(spec.shape) or dtype != spec.dtype:
            raise ValueError(f"{where}: array {i} of the loop carry is {dtype} {shape}; "
                             f"this fit needs {spec.dtype} {tuple(spec.shape)}")
        out.append(jax.numpy.asarray(leaf) if not _is_key(leaf) else leaf)
    return jax.tree.unflatten(treedef, out)


def run_chunks(advance: Callable, start: Callable, *, total: int, finished: Callable,
               kind: str, options: dict, checkpoint_path=None, checkpoint_every=None,
               resume_from=None, resumed: dict | None = None, extra: dict | None = None):
    """Run ``advance`` to ``total`` iterations, in chunks with checkpoints if asked.

    Parameters
    ----------
    advance : callable
        ``advance(carry, stop_at) -> carry``: the fit's jitted loop, run until every
        start is done or at iteration ``stop_at`` (a traced int).
    start : callable
        ``start() -> carry``: the initial carry. When resuming it is only traced
        (``jax.eval_shape``) for the carry's structure.
    total : int
        The fit's number of iterations (the last ``stop_at``).
    finished : callable
        ``finished(carry) -> bool``: every start is done (host side).
    kind, options
        The fit's name and what determines its result (:func:`save_checkpoint`).
    checkpoint_path, checkpoint_every, resume_from
        As validated by :func:`check_checkpoint_options`. Without
        ``checkpoint_every`` the rest of the fit runs as one chunk.
    resumed : dict, optional
        A checkpoint the caller has loaded already (:func:`load_checkpoint`),
        instead of ``resume_from`` (for fits whose checkpoints hold more than this loop).
    extra : dict, optional
        Entries saved beside the carry (e.g. the phase of a fit).

    Returns
    -------
    carry
        The carry after the last chunk. A checkpoint of a finished fit is returned
        as loaded, without running anything.
    """
    if resumed is None and resume_from is not None:
        resumed = load_checkpoint(resume_from, kind=kind, options=options)
    if resumed is not None:
        if "carry" not in resumed or "stop_at" not in resumed:
            raise ValueError(f"resume_from: {str(resume_from)!r} holds no loop carry")
        carry = unflatten_carry(resumed["carry"], jax.eval_shape(start), resume_from)
        reached = int(resumed["stop_at"])
        logger.info("%s: resuming from %s at iteration %d", kind, resume_from, reached)
        if checkpoint_every is None and reached < total and not finished(carry):
            carry = advance(carry, total)
    elif checkpoint_every is None:
        return advance(start(), total)
    else:
        carry, reached = start(), 0
    while checkpoint_every is not None and reached < total and not finished(carry):
        reached = min(reached + checkpoint_every, total)
        carry = jax.block_until_ready(advance(carry, reached))
        save_checkpoint(checkpoint_path,
                        {**(extra or {}), "carry": flatten_carry(carry), "stop_at": reached},
                        kind=kind, options=options)
        logger.debug("%s: checkpoint at iteration %d written to %s", kind, reached,
                     checkpoint_path)
    return carry


def svi_start(svi_state, num_steps: int, dtype):
    """The carry of an SVI run before its first step: (SVI state, loss trace, step).

    The SVI state carries its own random key (NumPyro's ``SVIState.rng_key``, split
    at every step) and the optimiser's step count (which drives a learning-rate
    schedule), so a run continued from a saved carry draws exactly what it would
    have drawn without the interruption.
    """
    # Weakly typed leaves (NumPyro's step counter) made strong: a reloaded carry is strong,
    # and a carry of the same types as the start reuses the compiled chunk.
    svi_state = jax.tree.map(lambda leaf: leaf if _is_key(leaf) else leaf.astype(leaf.dtype),
                             svi_state)
    return svi_state, jax.numpy.zeros(num_steps, dtype), jax.numpy.zeros((), jax.numpy.int32)


def svi_ready(svi, svi_state, *args, **kwargs):
    """``svi`` after ``svi.init`` (traced only: it sets the parameters' constraint maps and
    an autoguide's prototype, which ``update`` and ``get_params`` need), for a chunk that
    continues from a saved ``svi_state``. Inside ``jit`` the unused init is dropped."""
    svi.init(svi_state.rng_key, *args, **kwargs)
    return svi
