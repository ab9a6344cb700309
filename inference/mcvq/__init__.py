"""Multiple cause vector quantization: variational EM, its VB version and baselines.

References
----------
D. A. Ross, R. S. Zemel, "Multiple cause vector quantization", NIPS 2002.
"""
