"""Association in GVQ: the most probable binary state of every example.

Exhaustive search, annealed belief propagation, belief revision, annealed mean
field, Gibbs sampling, and directed BP / BR, all reading the quadratic energy
that the NumPyro program defines (:mod:`inference.program.energy`).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001.
"""
