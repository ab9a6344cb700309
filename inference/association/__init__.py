"""Association in GVQ: the most probable binary state of every example.

Exhaustive search, annealed belief propagation, belief revision, annealed mean
field, Gibbs sampling, and directed BP / BR, all reading the quadratic energy
that the NumPyro program defines (:mod:`inference.program.energy`).

References
----------
A. Westerdijk, D. Barber, W. Wiegerinck, "Generative vector quantisation",
ICANN 1999.
"""
