"""The clipped-Gaussian model for binary data: arcsine-law learning and its baselines.

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999.
"""
