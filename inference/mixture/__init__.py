"""Gaussian mixtures as YING-YANG machines: EM, hard-cut EM, k-means, criteria,
pruning, online learning (CL, FSCL, RPCL, adaptive EM), the VB mixture and baselines.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", ICONIP 1995.
"""
