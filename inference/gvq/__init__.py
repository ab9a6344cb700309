"""Generative vector quantisation: EM in the sigma -> 0 limit, its variants and baselines.

References
----------
A. Westerdijk, D. Barber, W. Wiegerinck, "Generative vector quantisation",
ICANN 1999.
"""
