"""EM for any NumPyro program with discrete latents: :func:`fit_em`.

Soft, annealed, mean-field and hard E-steps on a program's ``Bernoulli``,
``Categorical`` and one-hot categorical sites; M-steps on its ``numpyro.param`` sites
(:mod:`inference.em.fit`, :mod:`inference.em.steps`).
"""

from inference.em.fit import DEFAULT_RESTARTS, E_STEPS, annealing_schedule, fit_em
from inference.em.result import EMResult

__all__ = ["DEFAULT_RESTARTS", "E_STEPS", "EMResult", "annealing_schedule", "fit_em"]
