"""The clipped-Gaussian model for binary data: arcsine-law learning and its baselines.

References
----------
D. D. Lee, H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", NIPS 1998.
"""
