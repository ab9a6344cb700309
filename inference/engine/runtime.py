"""A known defect of some jaxlib releases that the zoo's batched runs can meet on CPU.

jaxlib 0.10.0 to 0.10.2 run a *batched* LAPACK kernel on the CPU backend (a Cholesky
factorisation, a triangular solve or a symmetric eigendecomposition over a batch of
matrices, as ``vmap`` makes of ``MultivariateNormal.log_prob``) by splitting the batch
over XLA's intra-op thread pool and waiting, on a thread of that same pool, for the
pieces. When as many such kernels
run at once as the pool has threads (two on a two-core machine), every thread waits for
work that no free thread can take: the process hangs, using no CPU, until it is killed.

Measured on two cores: tempered SMC on the PPCA program with ``z`` integrated out (one
multivariate normal likelihood per particle, 1,000 particles) hung in 2 of 2 runs with
jaxlib 0.10.2 -- also with ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` -- with every
thread of the pool parked inside the triangular solve; with jaxlib 0.9.2 the same run
took 84 s. The same happened to a full-covariance mixture fit split over two simulated
devices (3 of 3 runs hung, the pool threads inside the batched eigendecomposition; 5 s
with 0.9.2). The batched path is absent from 0.9.2 and, reportedly, compiled out of the
open-source builds from 0.11.1; 0.11.0 is excluded as a precaution.

The project's requirements exclude these releases. :func:`warn_if_lapack_deadlock_prone`
warns (once per process) where one is installed all the same.
"""

from __future__ import annotations

import warnings

import jax

from ppl_models.diagnostics import ZooWarning

__all__ = ["lapack_deadlock_prone", "warn_if_lapack_deadlock_prone"]

_warned = False


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def lapack_deadlock_prone(version: str | None = None, backend: str | None = None) -> bool:
    """Whether jaxlib ``version`` (default: the installed one) on ``backend`` (default:
    JAX's default backend) runs batched LAPACK kernels in the way that can hang (CPU
    backend, jaxlib 0.10.x or 0.11.0)."""
    if version is None:
        import jaxlib

        version = jaxlib.__version__
    if backend is None:
        backend = jax.default_backend()
    release = _release(version)
    return backend == "cpu" and (release[:2] == (0, 10) or release == (0, 11, 0))


def warn_if_lapack_deadlock_prone(what: str, *, stacklevel: int = 2) -> bool:
    """Warn :class:`~ppl_models.diagnostics.ZooWarning` once per process when
    :func:`lapack_deadlock_prone`; ``what`` names the run at risk. Returns whether the
    installed runtime is prone."""
    global _warned
    prone = lapack_deadlock_prone()
    if prone and not _warned:
        import jaxlib

        _warned = True
        warnings.warn(
            f"{what} on CPU with jaxlib {jaxlib.__version__}: this release can hang for good "
            "when a program batches Cholesky factorisations, triangular solves or "
            "eigendecompositions (a multivariate normal evaluated for many particles at "
            "once); install jax and jaxlib 0.9.x, or 0.11.1 or later", ZooWarning,
            stacklevel=stacklevel + 1)
    return prone
