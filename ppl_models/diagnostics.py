"""Warning classes of the zoo.

Numerical trouble is reported as a warning *and* a flag on the result, never
as a silent NaN. All project warnings derive from :class:`ZooWarning`, so
users can filter them together and the test suite turns them into errors.
"""

__all__ = ["ZooWarning", "ConvergenceWarning", "NumericalWarning", "CompilationCacheWarning"]


class ZooWarning(UserWarning):
    """Base class of every warning the zoo issues."""


class ConvergenceWarning(ZooWarning):
    """An iterative algorithm stopped before its convergence criterion was met."""


class NumericalWarning(ZooWarning):
    """Non-finite values, negative eigenvalues, collapsed components and the like."""


class CompilationCacheWarning(ZooWarning):
    """The persistent compilation cache could not be used (a folder that cannot be
    created or written); programs are compiled as usual, only not kept on disk."""
