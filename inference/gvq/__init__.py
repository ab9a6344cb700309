"""Generative vector quantisation: EM in the sigma -> 0 limit, its variants and baselines.

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001.
"""
