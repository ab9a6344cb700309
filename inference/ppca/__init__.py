"""Probabilistic PCA: EM for the maximum-likelihood W and sigma, and its sigma -> 0 limit.

Custom inference for the program :func:`ppl_models.ppca.model`: :func:`fit_ppca`
(:mod:`inference.ppca.em`, Tipping & Bishop's EM and Roweis's EM for PCA written as
sufficient statistics for the engine), NumPyro's SVI and NUTS on the same program
(:mod:`inference.ppca.baselines`), ``ppl-zoo compare ppca`` (:mod:`inference.ppca.compare`)
and the plug-in that declares them (:mod:`inference.ppca.plugin`).

References
----------
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", Journal of
the Royal Statistical Society B 61(3), 611-622, 1999.
S. Roweis, "EM algorithms for PCA and SPCA", NIPS 1998.
"""
