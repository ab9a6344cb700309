"""Description length and the PCA / NMF / VQ baselines of the MCVQ experiments.

Ross and Zemel (2003; full citation under References) compare methods "with
similar description lengths" (sec. 5.1) and define (sec. 5.1, footnote) the
description length as "the number of bits required to represent the model, plus
the number of bits to encode all the test examples using the model". The paper
states no quantisation; ours, applied to every method alike, is:

* **Real numbers** (model parameters and per-example coefficients) cost
  ``bits_per_parameter`` and ``bits_per_coefficient`` bits each, default 8
  (:data:`BITS_PER_REAL`): 256 levels over the data's range [-1, 1], a step of
  2/255 whose uniform quantisation error (RMS step / sqrt(12) ~ 0.002) is
  two orders below the errors being compared (0.1 - 0.7). The reconstruction
  errors are those of the unquantised fits; at 8 bits the difference is
  negligible, and the bits are the cost of what a decoder would receive.
* **Discrete codes** cost log2 of the number of choices, not rounded up to
  whole bits (an arithmetic coder of uniform symbols reaches this for the
  whole test set up to a few bits): log2 J per VQ of MCVQ, log2 N_vq per
  example for VQ.
* **MCVQ** (``mcvq_bits``): g is sent as a hard partition, the VQ of each
  pixel, D log2 K bits (at the end of the annealing to T = 1 g is hard in
  practice: the examples report max_k g_dk); then only the means of the VQ
  that owns each pixel are used, D J reals; sigma is not sent (the decoder
  outputs the reconstruction sum_k g_dk mu_dk s_k, sec. 3, not a density;
  residuals are not coded by any method); every test example sends K codes,
  N_test K log2 J bits. Total D J b + D log2 K + N_test K log2 J.
* **PCA** (``pca_bits``): the mean and p components, (p + 1) D reals, and p
  coefficients per test example, N_test p reals.
* **NMF** (``nmf_bits``): p non-negative components, p D reals, and p
  coefficients per test example. NMF needs non-negative data: it factorises
  x + ``NMF_SHIFT`` (x + 1 in [0, 2] for data in [-1, 1]); the shift is a
  fixed constant of the method and costs nothing.
* **VQ** (``vq_bits``): N_vq codebook vectors, N_vq D reals, and log2 N_vq bits
  per test example.
* Not counted, for every method alike: the sizes (K, J, p, N_vq, D) and the
  quantiser's range, a few dozen bits.

**Does this reproduce the paper's 5.9e3 bits?** No. For MCVQ with K = 3,
J = 5, D = 121 and 629 test images it gives 605 b + 192 + 4381 bits: 9413 at
b = 8. The codes alone, 629 x 3 x log2 5 = 4381 bits, leave 1.5e3 bits for the
model, about 2.2 bits per used mean (b = 2.19 would give 5.9e3), or 0.84 bits
per mean if all D K J means were sent. No single b reproduces both the shapes
figure and the faces' 1.5e5 bits (K = 6, J = 12, D = 361, 629 test images:
b = 29 by the same formula), and at 5.9e3 bits PCA can afford about 7
components even at 1 bit per real, far too few for the paper's RMS 0.22. The
paper's numbers are therefore not reproducible from its definition by any
consistent quantisation we found; we keep one stated accounting and report
the matched sizes it gives.

The baselines fit on training data and reconstruct test data: PCA in JAX
(SVD of the centred training data, test data projected on the components),
NMF and VQ with scikit-learn (imported lazily): ``sklearn.decomposition.NMF``
(Frobenius loss, ``init="nndsvda"``; test coefficients by its ``transform``,
non-negative least squares with the components fixed) and
``sklearn.cluster.KMeans`` (k-means++, ``n_init=10``: VQ at its best; the
zoo's ``inference.fit_mixture(mode="nearest")`` compiles once per codebook
size, about 10 s each here, too slow for a sweep of sizes).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003: sec. 5.1 and its footnote
(description length), Fig. 3 (VQ, PCA, NMF).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.validation import check_data, check_positive_int

__all__ = ["BITS_PER_REAL", "NMF_SHIFT", "METHODS", "DescriptionLength", "mcvq_bits",
           "pca_bits", "nmf_bits", "vq_bits", "description_length", "rms_error", "fit_pca",
           "fit_nmf", "fit_vq", "baseline_curve", "baseline_curves", "match_description_length",
           "mcvq_decode"]

#: Bits per real number (parameter or coefficient), our choice (module docstring).
BITS_PER_REAL = 8
#: NMF factorises x + NMF_SHIFT (data in [-1, 1] -> [0, 2]).
NMF_SHIFT = 1.0
#: Methods of :func:`description_length` and :func:`baseline_curve`.
METHODS = ("mcvq", "pca", "nmf", "vq")


class DescriptionLength(NamedTuple):
    """Bits of one model at one size.

    Attributes
    ----------
    model_bits : float
        Bits to represent the model.
    encoding_bits : float
        Bits to encode all test examples with the model.
    total_bits : float
        Their sum, the description length (Ross and Zemel (2003), sec. 5.1, footnote).
    """

    model_bits: float
    encoding_bits: float
    total_bits: float


def _bits(model_bits, encoding_bits):
    return DescriptionLength(float(model_bits), float(encoding_bits),
                             float(model_bits + encoding_bits))


def _check_bits(value, name):
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a number of bits; got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite; got {value}")
    return float(value)


def mcvq_bits(num_test: int, dim: int, num_vqs: int, num_states: int, *,
              bits_per_parameter: float = BITS_PER_REAL) -> DescriptionLength:
    """MCVQ: D J means at b bits, a hard g (D log2 K), and N_test K log2 J bits of codes.

    >>> round(mcvq_bits(629, 121, 3, 5).total_bits)
    9413
    """
    num_test = check_positive_int(num_test, "num_test")
    dim = check_positive_int(dim, "dim")
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    b = _check_bits(bits_per_parameter, "bits_per_parameter")
    model = dim * num_states * b + dim * math.log2(num_vqs)
    return _bits(model, num_test * num_vqs * math.log2(num_states))


def pca_bits(num_test: int, dim: int, num_components: int, *,
             bits_per_parameter: float = BITS_PER_REAL,
             bits_per_coefficient: float = BITS_PER_REAL) -> DescriptionLength:
    """PCA: mean and p components, (p + 1) D reals, and p coefficients per test example.

    >>> pca_bits(629, 121, 2).total_bits == 8 * (3 * 121 + 2 * 629)
    True
    """
    num_test = check_positive_int(num_test, "num_test")
    dim = check_positive_int(dim, "dim")
    num_components = check_positive_int(num_components, "num_components")
    b = _check_bits(bits_per_parameter, "bits_per_parameter")
    c = _check_bits(bits_per_coefficient, "bits_per_coefficient")
    return _bits((num_components + 1) * dim * b, num_test * num_components * c)


def nmf_bits(num_test: int, dim: int, num_components: int, *,
             bits_per_parameter: float = BITS_PER_REAL,
             bits_per_coefficient: float = BITS_PER_REAL) -> DescriptionLength:
    """NMF: p components, p D reals, and p coefficients per test example (the shift is free)."""
    num_test = check_positive_int(num_test, "num_test")
    dim = check_positive_int(dim, "dim")
    num_components = check_positive_int(num_components, "num_components")
    b = _check_bits(bits_per_parameter, "bits_per_parameter")
    c = _check_bits(bits_per_coefficient, "bits_per_coefficient")
    return _bits(num_components * dim * b, num_test * num_components * c)


def vq_bits(num_test: int, dim: int, codebook_size: int, *,
            bits_per_parameter: float = BITS_PER_REAL) -> DescriptionLength:
    """VQ: N_vq codebook vectors, N_vq D reals, and log2 N_vq bits per test example.

    >>> vq_bits(629, 121, 8).total_bits == 8 * 8 * 121 + 629 * 3
    True
    """
    num_test = check_positive_int(num_test, "num_test")
    dim = check_positive_int(dim, "dim")
    codebook_size = check_positive_int(codebook_size, "codebook_size")
    b = _check_bits(bits_per_parameter, "bits_per_parameter")
    return _bits(codebook_size * dim * b, num_test * math.log2(codebook_size))


def description_length(method: str, size, num_test: int, dim: int, *,
                       bits_per_parameter: float = BITS_PER_REAL,
                       bits_per_coefficient: float = BITS_PER_REAL) -> DescriptionLength:
    """The description length of ``method`` at ``size`` (module docstring).

    Parameters
    ----------
    method : {"mcvq", "pca", "nmf", "vq"}
    size : int or (int, int)
        Components p (PCA, NMF), codebook size N_vq (VQ), or (K, J) (MCVQ).
    num_test, dim : int
        Test examples encoded and their dimension D.
    bits_per_parameter, bits_per_coefficient : float
        Bits per real model parameter and per real coefficient of a test example.

    Returns
    -------
    DescriptionLength
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if method == "mcvq":
        if not isinstance(size, tuple | list) or len(size) != 2:
            raise TypeError(f"size of 'mcvq' must be a pair (num_vqs, num_states); got {size!r}")
        return mcvq_bits(num_test, dim, size[0], size[1], bits_per_parameter=bits_per_parameter)
    if method == "vq":
        return vq_bits(num_test, dim, size, bits_per_parameter=bits_per_parameter)
    fn = pca_bits if method == "pca" else nmf_bits
    return fn(num_test, dim, size, bits_per_parameter=bits_per_parameter,
              bits_per_coefficient=bits_per_coefficient)


@jax.jit
def _decode(g, m, mu):
    owner = jnp.argmax(g, axis=1)  # (D,)
    state = jnp.argmax(m, axis=-1)  # (N, K)
    dims = jnp.arange(g.shape[0])
    return mu[dims, owner, state[:, owner]]  # (N, D)


def mcvq_decode(g, m, mu):
    """What the MCVQ decoder of :func:`mcvq_bits` outputs: hard g, hard states, (N, D).

    x_hat^c_d = mu[d, k_d, j^c_{k_d}] with k_d = argmax_k g_dk and j^c_k =
    argmax_j m^c_kj: the reconstruction sum_k g_dk sum_j m^c_kj mu_dkj of sec. 3
    with g and m rounded to the codes that the description length pays for.

    Parameters
    ----------
    g : array (D, K)
    m : array (N, K, J)
    mu : array (D, K, J)

    Returns
    -------
    array (N, D)
    """
    g, m, mu = jnp.asarray(g), jnp.asarray(m), jnp.asarray(mu)
    if g.ndim != 2 or m.ndim != 3 or mu.shape != (g.shape[0], g.shape[1], m.shape[2]) or (
            m.shape[1] != g.shape[1]):
        raise ValueError("g (D, K), m (N, K, J) and mu (D, K, J) must agree; got shapes "
                         f"{g.shape}, {m.shape}, {mu.shape}")
    return _decode(g, m, mu)


@jax.jit
def _rms(x, x_hat):
    return jnp.sqrt(jnp.mean((x - x_hat) ** 2))


def rms_error(x, x_hat) -> float:
    """Root mean square of x - x_hat over all entries (the paper's "average r.m.s." error)."""
    x = check_data(x, "x")
    x_hat = check_data(x_hat, "x_hat")
    if x.shape != x_hat.shape:
        raise ValueError(f"x_hat must have the shape of x, {x.shape}; got {x_hat.shape}")
    return float(_rms(x, x_hat))


def _check_pair(x_train, x_test):
    x_train = check_data(x_train, "x_train", min_examples=2)
    x_test = check_data(x_test, "x_test", dim=x_train.shape[1])
    return x_train, x_test


@jax.jit
def _pca_reconstruct(x_train, x_test, basis_mask):
    mean = jnp.mean(x_train, axis=0)
    _, _, vt = jnp.linalg.svd(x_train - mean, full_matrices=False)
    components = vt * basis_mask[:, None]  # the first p rows kept
    coefficients = (x_test - mean) @ components.T
    return coefficients @ components + mean


def fit_pca(x_train, x_test, num_components: int):
    """PCA fit on ``x_train`` reconstructing ``x_test`` from its first p components.

    The components are the leading right singular vectors of the centred
    training data; a test example is mean + its projection on them.

    Parameters
    ----------
    x_train : array (N_train, D)
    x_test : array (N_test, D)
    num_components : int
        p, at most min(N_train, D).

    Returns
    -------
    array (N_test, D)
    """
    x_train, x_test = _check_pair(x_train, x_test)
    limit = min(x_train.shape)
    num_components = check_positive_int(num_components, "num_components", maximum=limit,
                                        why=" (min(N_train, D))")
    mask = jnp.arange(limit) < num_components
    return _pca_reconstruct(x_train, x_test, mask.astype(x_train.dtype))


def _sklearn(what):
    try:
        if what == "NMF":
            from sklearn.decomposition import NMF as found
        else:
            from sklearn.cluster import KMeans as found
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(f"the {what} baseline needs scikit-learn: pip install scikit-learn "
                          '(or pip install -e ".[examples]")') from err
    return found


def fit_nmf(x_train, x_test, num_components: int, *, seed: int = 0, shift: float = NMF_SHIFT,
            max_iter: int = 2000):
    """NMF of x_train + ``shift``, reconstructing x_test: W_test H - ``shift``.

    scikit-learn's ``NMF`` (Frobenius loss, ``init="nndsvda"``, ``random_state=seed``);
    the test coefficients W_test come from its ``transform`` with H fixed.
    Non-convergence within ``max_iter`` is a ``ConvergenceWarning`` of the zoo.

    Returns
    -------
    array (N_test, D)
    """
    x_train, x_test = _check_pair(x_train, x_test)
    num_components = check_positive_int(num_components, "num_components")
    shifted_train = np.asarray(x_train, np.float64) + shift
    shifted_test = np.asarray(x_test, np.float64) + shift
    if shifted_train.min() < 0 or shifted_test.min() < 0:
        raise ValueError(f"x + shift must be non-negative for NMF; shift={shift} leaves a "
                         f"minimum of {min(shifted_train.min(), shifted_test.min()):.3g}")
    nmf_class = _sklearn("NMF")
    from sklearn.exceptions import ConvergenceWarning as SklearnConvergence

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SklearnConvergence)
        nmf = nmf_class(num_components, init="nndsvda", max_iter=max_iter, random_state=seed)
        nmf.fit(shifted_train)
        coefficients = nmf.transform(shifted_test)
    if any(issubclass(w.category, SklearnConvergence) for w in caught):
        warnings.warn(f"fit_nmf: NMF with {num_components} components did not converge in "
                      f"{max_iter} iterations", ConvergenceWarning, stacklevel=2)
    return jnp.asarray(coefficients @ nmf.components_ - shift, x_train.dtype)


def fit_vq(x_train, x_test, codebook_size: int, *, seed: int = 0, n_init: int = 10):
    """k-means codebook of ``codebook_size`` vectors on x_train; x_test to its nearest vector.

    scikit-learn's ``KMeans`` (k-means++, ``n_init`` starts, ``random_state=seed``).

    Returns
    -------
    array (N_test, D)
    """
    x_train, x_test = _check_pair(x_train, x_test)
    distinct = np.unique(np.asarray(x_train), axis=0).shape[0]
    codebook_size = check_positive_int(codebook_size, "codebook_size", maximum=distinct,
                                       why=" (distinct training examples)")
    kmeans = _sklearn("KMeans")(codebook_size, n_init=n_init, random_state=seed)
    kmeans.fit(np.asarray(x_train, np.float64))
    codebook = jnp.asarray(kmeans.cluster_centers_, x_train.dtype)
    return codebook[_nearest(x_test, codebook)]


@jax.jit
def _nearest(x, codebook):
    return jnp.argmin(jnp.sum(codebook**2, axis=1) - 2.0 * x @ codebook.T, axis=1)


def baseline_curve(method: str, x_train, x_test, sizes, *, seed: int = 0,
                   bits_per_parameter: float = BITS_PER_REAL,
                   bits_per_coefficient: float = BITS_PER_REAL):
    """Test RMS and description length of a baseline at every size.

    Parameters
    ----------
    method : {"pca", "nmf", "vq"}
    x_train, x_test : arrays (N, D)
    sizes : sequence of int
        Components (PCA, NMF) or codebook sizes (VQ).
    seed : int
        For NMF's and k-means' starts.
    bits_per_parameter, bits_per_coefficient : float
        See :func:`description_length`.

    Returns
    -------
    list of dict
        One per size: ``size``, ``rms`` (test), ``model_bits``, ``encoding_bits``,
        ``bits`` (total), and ``reconstruction`` (N_test, D) array.
    """
    if method not in METHODS[1:]:
        raise ValueError(f"method must be one of {METHODS[1:]}; got {method!r}")
    x_train, x_test = _check_pair(x_train, x_test)
    sizes = [check_positive_int(s, "sizes") for s in np.atleast_1d(sizes).tolist()]
    if not sizes:
        raise ValueError("sizes must hold at least one size; got none")
    rows = []
    for size in sizes:  # one fit per model size, not a loop over data
        if method == "pca":
            recon = fit_pca(x_train, x_test, size)
        elif method == "nmf":
            recon = fit_nmf(x_train, x_test, size, seed=seed)
        else:
            recon = fit_vq(x_train, x_test, size, seed=seed)
        bits = description_length(method, size, x_test.shape[0], x_test.shape[1],
                                  bits_per_parameter=bits_per_parameter,
                                  bits_per_coefficient=bits_per_coefficient)
        rows.append({"size": size, "rms": rms_error(x_test, recon),
                     "model_bits": bits.model_bits, "encoding_bits": bits.encoding_bits,
                     "bits": bits.total_bits, "reconstruction": recon})
    return rows


def baseline_curves(x_train, x_test, sizes, *, seed: int = 0,
                    bits_per_real: float = BITS_PER_REAL):
    """:func:`baseline_curve` of PCA, NMF and VQ, with their warnings gathered as text.

    ``sizes`` maps each method to its sizes. The project's warnings (an NMF
    size that did not converge) are returned, sorted and deduplicated, instead
    of raised, so that a sweep reports them in its table; other warnings pass on.

    Returns
    -------
    curves : dict
        Method -> rows of :func:`baseline_curve`.
    notes : list of str
    """
    from ppl_models.diagnostics import ZooWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        curves = {method: baseline_curve(method, x_train, x_test, sizes[method], seed=seed,
                                         bits_per_parameter=bits_per_real,
                                         bits_per_coefficient=bits_per_real)
                  for method in METHODS[1:]}
    for caught_warning in caught:
        if not issubclass(caught_warning.category, ZooWarning):
            warnings.showwarning(caught_warning.message, caught_warning.category,
                                 caught_warning.filename, caught_warning.lineno)
    return curves, sorted({str(w.message) for w in caught
                           if issubclass(w.category, ZooWarning)})


def match_description_length(rows, target_bits: float):
    """The row whose ``bits`` is closest to ``target_bits`` (ties: the smaller model).

    Parameters
    ----------
    rows : list of dict
        Each with a ``"bits"`` entry (as :func:`baseline_curve` returns).
    target_bits : float

    Returns
    -------
    dict
        The chosen row, with ``bits_ratio`` = bits / target added.

    >>> match_description_length([{"bits": 10.0}, {"bits": 30.0}, {"bits": 50.0}], 38.0)
    {'bits': 30.0, 'bits_ratio': 0.7894736842105263}
    """
    target = _check_bits(target_bits, "target_bits")
    rows = list(rows)
    if not rows:
        raise ValueError("rows must hold at least one row; got none")
    if not all(isinstance(r, dict) and "bits" in r for r in rows):
        raise TypeError("rows must be dicts with a 'bits' entry")
    distance = [abs(float(r["bits"]) - target) for r in rows]
    best = min(range(len(rows)), key=lambda i: (distance[i], float(rows[i]["bits"])))
    return {**rows[best], "bits_ratio": float(rows[best]["bits"]) / target}
