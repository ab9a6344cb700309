"""QUBO peers for GVQ association: D-Wave's classical samplers, tuned to equal quality.

Association in GVQ minimises, per example, E_x(s) = ||x - s F||^2 over binary s in
{0, 1}^n, a quadratic unconstrained binary optimisation (QUBO) problem: the library
reads it as :class:`inference.program.energy.QuadraticEnergy`, E = c + h . s +
1/2 s W s^T, i.e. linear biases h, quadratic biases W[i, j] (i < j) and offset c.
This module hands the same problems to general-purpose QUBO heuristics of D-Wave
Systems, dwave-samplers, open-source classical samplers (``pip install
dwave-samplers``, the ``bench`` extra):

* ``"sa"``: ``dwave.samplers.SimulatedAnnealingSampler`` (single-flip Metropolis
  annealing over a geometric schedule of inverse temperatures);
* ``"tabu"``: ``dwave.samplers.TabuSampler`` (multistart one-flip tabu search).

What is timed, and why
----------------------
* One example per call, or a block of examples per call (SA). These samplers take one
  binary quadratic model (BQM) per call and run their reads on it; there is no
  batched entry point, so by default the examples are solved one after the other, as
  a user of the package would. The time is the wall time of all calls, each
  comprising the BQM's construction, the sampling call and the reading of the
  lowest-energy read (:func:`run_sampler`). The per-call overhead (the construction,
  and a call with one read of one sweep) is reported beside it (:func:`overhead`),
  so that the cost of the search itself can be told from that of the Python layer.
  For SA that overhead can be shared: with ``batch=B`` a call anneals one
  block-diagonal BQM of B examples (:func:`block_bqm`). Single-flip Metropolis
  sweeps never couple two blocks, so each read anneals every example independently
  under one schedule, and the best read of each block is what a call on that example
  alone would return with that schedule; the schedule's range is the package's default
  for the block BQM (:func:`block_beta_range`: the hottest and coldest ends of the
  examples' own). At n = 12 and 16, blocks of 100 examples took 2.3x and 1.4x less
  time per example than one call each at the same reads and sweeps and the same
  quality. Tabu has no such form (its moves choose the best flip over the whole
  BQM, so a block BQM is one search, not B searches).
* Arrays, not dicts. The BQM is built from the arrays of the quadratic form
  (:func:`build_bqm`), never from Python dicts of biases. The couplings J are shared
  by all examples, so a BQM holding J alone is built once per run and each example's
  BQM is its copy plus ``add_linear_from_array`` (about 4 us at n = 32, against 10-20
  us for ``BinaryQuadraticModel(n)`` + ``add_quadratic_from_dense``, the array-taking
  constructor ``BinaryQuadraticModel(h, J, c, "BINARY")`` or ``from_numpy_vectors``;
  :func:`constructor_timings`), negligible beside the sampling call's own overhead
  (0.6-0.8 ms for one read of one sweep).
* Each sampler at its best. SA's default inverse-temperature range is computed by
  the package in a pure-Python loop over the couplings, which at n = 32 costs about
  as much as the rest of a short call; :func:`default_beta_range` computes the same
  range with numpy and passes it as ``beta_range`` (the same schedule, so the same
  samples; other ranges, hotter or colder ends by 10x and 100x, were not measurably
  better). Tabu's effort is fixed by moves, not milliseconds: ``lower_bound_z``
  (500,000 moves per search by default) is set to 0 so that ``coefficient_z_first``
  x n moves bound the first search (a quarter of it each restart), and the time limit
  is off (``timeout=None``), so that results do not depend on the machine's load;
  the tenure is the package's min(20, n / 4) but at least 4 (:func:`default_tenure`).
* Fewest reads and sweeps reaching the compared quality. :func:`calibrate` runs a
  grid of settings from the cheapest to the most expensive on calibration examples
  and keeps the first whose quality reaches the target: the fraction of examples
  at the reference energy (``target_ok``) and the mean relative gap to it
  (``target_gap``). A setting's run stops at the first example that makes
  ``target_ok`` unreachable, so failing settings cost little. Speed at unequal
  quality is not a result.

Qualities are always recomputed from the returned states in float64 numpy (here
||x - s F||^2), never taken from the samplers' reported energies, which use the
float32-derived biases and a large offset.

Run::

    python benchmarks/qubo_peers.py --n 32 --dim 16 --examples 200
    python benchmarks/qubo_peers.py --n 24 --dim 12 --examples 60 --output peers.json

The reference is the exact optimum (``inference.associate(method="exact")``) for
n <= 24, else the planted states (whose energy only bounds the optimum from above).

References
----------
D-Wave Systems, dwave-samplers, open-source classical samplers (simulated annealing,
tabu search, steepest descent, tree decomposition), https://github.com/dwavesystems/dwave-samplers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

__all__ = ["SAMPLERS", "bqm_arrays", "build_bqm", "block_bqm", "quadratic_energies",
           "default_beta_range", "block_beta_range", "default_tenure", "check_batch",
           "run_sampler", "default_grid", "setting_cost", "is_dominated", "calibrate",
           "overhead", "constructor_timings", "quality"]

#: The samplers: name -> dwave.samplers class name.
SAMPLERS = {"sa": "SimulatedAnnealingSampler", "tabu": "TabuSampler"}
#: Keys whose larger values mean more search (the dominance rule of :func:`calibrate`).
EFFORT_KEYS = {"sa": ("num_reads", "num_sweeps"),
               "tabu": ("num_reads", "num_restarts", "coefficient_z_first")}
#: Settings added to every tabu call unless the setting gives them (see the docstring).
TABU_DEFAULTS = {"timeout": None, "lower_bound_z": 0}
#: An example is at the reference when E <= E_ref * (1 + OK_RTOL) + OK_ATOL.
OK_RTOL, OK_ATOL = 1e-6, 1e-9


# -- the problem as arrays -------------------------------------------------------------------

def bqm_arrays(energy):
    """The QUBO arrays of a quadratic energy, in float64.

    Parameters
    ----------
    energy : QuadraticEnergy
        ``linear`` h (num_examples, n), ``couplings`` W (n, n), ``constant`` c
        (num_examples,), with E(s) = c + h . s + 1/2 s W s^T.

    Returns
    -------
    h : ndarray (num_examples, n)
        Linear biases (half the diagonal of W folded in; it is zero for the library's
        energies).
    J : ndarray (n, n)
        Quadratic biases, strictly upper triangular: J[i, j] = (W[i, j] + W[j, i]) / 2.
    offset : ndarray (num_examples,)
        The constant c.

    Examples
    --------
    >>> import numpy as np
    >>> from inference.program.energy import QuadraticEnergy
    >>> W = np.array([[0.0, 2.0], [2.0, 0.0]])
    >>> h, J, c = bqm_arrays(QuadraticEnergy(np.array([[1.0, -1.0]]), W, np.array([3.0])))
    >>> J.tolist(), quadratic_energies(h, J, c, np.array([[1, 1]])).tolist()
    ([[0.0, 2.0], [0.0, 0.0]], [5.0])
    """
    W = np.asarray(energy.couplings, np.float64)
    h = np.asarray(energy.linear, np.float64) + 0.5 * np.diag(W)
    J = np.triu(0.5 * (W + W.T), 1)
    return h, J, np.asarray(energy.constant, np.float64).reshape(h.shape[0])


def quadratic_energies(h, J, offset, states) -> np.ndarray:
    """E = offset + h . s + s J s^T per example, in float64 (J upper triangular)."""
    s = np.asarray(states, np.float64)
    return offset + np.sum(h * s, axis=-1) + np.einsum("...i,ij,...j->...", s, J, s)


def build_bqm(h_row, J, offset, *, template=None):
    """One example's ``dimod.BinaryQuadraticModel`` (BINARY, variables 0..n-1) from arrays.

    Without ``template``: an empty BQM of n variables filled by ``add_linear_from_array``
    and ``add_quadratic_from_dense`` (which skips zero entries; J upper triangular), the
    fastest of dimod 0.12's array constructors. With ``template``, a BQM holding only J
    (built so once per J): its copy plus ``add_linear_from_array``, faster still, as J
    is shared by all examples (:func:`constructor_timings`).
    """
    import dimod

    if template is None:
        bqm = dimod.BinaryQuadraticModel(len(h_row), dimod.BINARY)
        bqm.add_quadratic_from_dense(J)
    else:
        bqm = template.copy()
    bqm.add_linear_from_array(h_row)
    bqm.offset = float(offset)
    return bqm


def block_bqm(h_rows, J, offsets=None):
    """One ``dimod.BinaryQuadraticModel`` holding ``m`` examples as independent blocks.

    Example k's unit i is variable k n + i; every block has the couplings J (upper
    triangular) and its own linear biases ``h_rows[k]``; the offset is the sum of
    ``offsets`` (the energy of a state is the sum of the examples' energies). Built
    with ``from_numpy_vectors`` (one call for all blocks).
    """
    import dimod

    h_rows = np.asarray(h_rows, np.float64)
    m, n = h_rows.shape
    rows, cols = np.nonzero(np.triu(J, 1))
    base = (n * np.arange(m))[:, None]
    quadratic = ((rows[None] + base).ravel(), (cols[None] + base).ravel(),
                 np.tile(J[rows, cols], m))
    offset = 0.0 if offsets is None else float(np.sum(offsets))
    return dimod.BinaryQuadraticModel.from_numpy_vectors(h_rows.ravel(), quadratic, offset,
                                                         dimod.BINARY)


def constructor_timings(h_row, J, offset, *, repeats=200) -> dict:
    """Milliseconds per BQM built by each of dimod's array paths (best of 3 x ``repeats``)."""
    import dimod

    n = len(h_row)
    iu = np.triu_indices(n, 1)
    template = dimod.BinaryQuadraticModel(n, dimod.BINARY)
    template.add_quadratic_from_dense(J)
    paths = {
        "BinaryQuadraticModel(h, J, c, BINARY)": lambda: dimod.BinaryQuadraticModel(
            h_row, J, float(offset), dimod.BINARY),
        "from_numpy_vectors": lambda: dimod.BinaryQuadraticModel.from_numpy_vectors(
            h_row, (iu[0], iu[1], J[iu]), float(offset), dimod.BINARY),
        "BinaryQuadraticModel(n) + add_*_from_array/dense": lambda: build_bqm(h_row, J, offset),
        "template.copy() + add_linear_from_array": lambda: build_bqm(h_row, J, offset,
                                                                     template=template),
    }
    return {name: _best_ms(build, repeats) for name, build in paths.items()}


def _best_ms(fn, repeats, rounds=3):
    fn()
    best = np.inf
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return 1e3 * best


def _beta_pieces(h_rows, J):
    """Per example of ``h_rows`` (m, n): the hot end of SA's default range, and per unit
    its smallest nonzero |bias| in the Ising form (inf where it has none): (m,), (m, n)."""
    Js = 0.25 * (J + J.T)
    hs = 0.5 * np.asarray(h_rows, np.float64) + Js.sum(axis=1)
    abs_h, abs_j = np.abs(hs), np.abs(Js)
    hot = np.log(2.0) / (2.0 * (abs_h + abs_j.sum(axis=1)).max(axis=1))
    smallest_j = np.where(abs_j > 0, abs_j, np.inf).min(axis=1)
    smallest = np.minimum(np.where(abs_h > 0, abs_h, np.inf), smallest_j)
    return hot, smallest


def _beta_range(hot, smallest) -> tuple[float, float]:
    smallest = smallest[np.isfinite(smallest)]
    if smallest.size == 0:
        return 0.1, 1.0
    g = smallest.min()
    return float(hot), float(np.log(np.sum(smallest == g) / 0.01) / (2.0 * g))


def default_beta_range(h_row, J) -> tuple[float, float]:
    """SimulatedAnnealingSampler's default (hot, cold) inverse temperatures, vectorised.

    The package derives them from the Ising form of the BQM (s = 2 x - 1): hot =
    log 2 / (2 max_i (|h_i| + sum_j |J_ij|)), cold = log(m / 0.01) / (2 g) with g the
    smallest nonzero |bias| and m how many units have g as their smallest, in a Python
    loop over the couplings; this is the same computation in numpy.
    """
    hot, smallest = _beta_pieces(np.asarray(h_row)[None], J)
    return _beta_range(hot[0], smallest[0])


def block_beta_range(h_rows, J) -> tuple[float, float]:
    """The package's default (hot, cold) range for the block BQM of ``h_rows`` (m, n).

    The same rule as :func:`default_beta_range` over all units of all blocks: the
    hottest example's hot end, and the cold end of the smallest bias of any block
    (counted over all blocks), without building the (m n) x (m n) couplings.
    """
    hot, smallest = _beta_pieces(h_rows, J)
    return _beta_range(hot.min(), smallest.ravel())


def default_tenure(num_features) -> int:
    """Tabu tenure used unless a setting gives one: the package's min(20, n / 4), at least 4.

    The package's default, n // 4, is too short on small problems: at n = 10 (tenure 2)
    one read of 10 restarts of 200 n moves found the optimum of 75% of 40 planted
    examples, 90% with tenure 4 (and the package's defaults, 500,000 moves per search,
    missed some that tenure 4 finds). From n = 16 on this is the package's default.
    """
    return int(min(num_features - 1, max(4, min(20, num_features // 4))))


# -- sampling --------------------------------------------------------------------------------

def _sampler(name):
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; one of {sorted(SAMPLERS)}")
    import dwave.samplers

    return getattr(dwave.samplers, SAMPLERS[name])()


def _solve(name, h, J, offset, setting, seed, batch=None):
    """Yield ``(index, best state, seconds)`` per example, timing only the sampler's work."""
    import dimod

    h, J, offset = np.asarray(h, np.float64), np.asarray(J, np.float64), np.asarray(offset)
    if batch is not None:
        check_batch(name, batch)
        if batch > 1:
            yield from _solve_blocks(h, J, offset, setting, seed, batch)
            return
    sampler = _sampler(name)
    kwargs = dict(setting)
    if name == "tabu":
        kwargs = {**TABU_DEFAULTS, "tenure": default_tenure(h.shape[1]), **kwargs}
    auto_beta = name == "sa" and "beta_range" not in kwargs and "beta_schedule" not in kwargs
    seeds = np.random.default_rng(seed).integers(2**31 - 1, size=h.shape[0])
    start = time.perf_counter()
    template = dimod.BinaryQuadraticModel(h.shape[1], dimod.BINARY)  # J, shared by all
    template.add_quadratic_from_dense(J)
    seconds = time.perf_counter() - start
    for i in range(h.shape[0]):
        start = time.perf_counter()
        bqm = build_bqm(h[i], J, offset[i], template=template)
        if auto_beta:
            kwargs["beta_range"] = default_beta_range(h[i], J)
        sampleset = sampler.sample(bqm, seed=int(seeds[i]), **kwargs)
        record = sampleset.record
        best = record.sample[np.argmin(record.energy)]
        if not sampleset.variables.is_range:
            best = best[np.argsort(np.fromiter(sampleset.variables, int, len(best)))]
        yield i, best, seconds + time.perf_counter() - start
        seconds = 0.0


def check_batch(name, batch):
    """``batch`` must be a positive integer, and above 1 only for SA."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be a positive integer (examples per call); got {batch!r}")
    if batch > 1 and name != "sa":
        raise ValueError(f"batch > 1 is for SA only: {name!r} on a block BQM would run one "
                         f"search over all blocks, not one per example; got batch={batch}")


def _solve_blocks(h, J, offset, setting, seed, batch):
    """SA on block-diagonal BQMs of ``batch`` examples: per example, its best read."""
    sampler = _sampler("sa")
    kwargs = dict(setting)
    auto_beta = "beta_range" not in kwargs and "beta_schedule" not in kwargs
    num_examples, n = h.shape
    seeds = np.random.default_rng(seed).integers(2**31 - 1, size=-(-num_examples // batch))
    for call, first in enumerate(range(0, num_examples, batch)):
        start = time.perf_counter()
        rows = slice(first, min(num_examples, first + batch))
        block = h[rows]
        m = block.shape[0]
        if auto_beta:
            kwargs["beta_range"] = block_beta_range(block, J)
        sampleset = sampler.sample(block_bqm(block, J, offset[rows]), seed=int(seeds[call]),
                                   **kwargs)
        samples = sampleset.record.sample
        if not sampleset.variables.is_range:
            samples = samples[:, np.argsort(np.fromiter(sampleset.variables, int, m * n))]
        samples = samples.reshape(-1, m, n)  # (reads, examples, n)
        energies = quadratic_energies(block, J, 0.0, samples)  # (reads, examples)
        best = samples[np.argmin(energies, axis=0), np.arange(m)]
        seconds = (time.perf_counter() - start) / m  # the call's time, shared
        for k in range(m):
            yield first + k, best[k], seconds


def run_sampler(name, h, J, offset, *, setting: dict, seed=0, batch=None):
    """Run a dwave-samplers sampler on every example, one call per example (or per block).

    Parameters
    ----------
    name : {"sa", "tabu"}
        ``SimulatedAnnealingSampler`` or ``TabuSampler``.
    h, J, offset : ndarray
        :func:`bqm_arrays` of the examples: (num_examples, n), (n, n), (num_examples,).
    setting : dict
        Keyword arguments of the sampler's ``sample`` (SA: ``num_reads``,
        ``num_sweeps``, ...; tabu: ``num_reads``, ``num_restarts``,
        ``coefficient_z_first``, ``tenure``, ``timeout`` in ms per read, ...). SA gets
        ``beta_range=`` :func:`default_beta_range` unless the setting has one; tabu gets
        :data:`TABU_DEFAULTS` and ``tenure=`` :func:`default_tenure` for the keys the
        setting lacks.
    seed : int
        Seeds the per-example (per-call) seeds.
    batch : int, optional
        SA only: examples per call, annealed as one block-diagonal BQM (module
        docstring); default one call per example.

    Returns
    -------
    states : ndarray int8 (num_examples, n)
        The lowest-energy read of each example.
    seconds : float
        Wall time of all calls: BQM construction (the shared couplings once, then each
        example's copy), sampling, reading the best read.
    """
    states = np.empty(np.shape(h), np.int8)
    total = 0.0
    for i, best, seconds in _solve(name, h, J, offset, setting, seed, batch):
        states[i] = best
        total += seconds
    return states, total


# -- calibration -----------------------------------------------------------------------------

def default_grid(name) -> list[dict]:
    """The default settings tried by :func:`calibrate`, cheapest first.

    SA: ``num_reads`` in 1, 2, 5, ..., 1000 x ``num_sweeps`` in 5, 10, 20, ..., 2000
    (many short anneals were the cheapest way to the optimum on overcomplete GVQ).
    Tabu: ``num_reads`` in 1, 2, 5, ..., 50 x ``num_restarts`` in 0, 1, 2, 5, ..., 100
    x ``coefficient_z_first`` (moves per unit of the first search; restarts get a
    quarter) in 20, 50, ..., 2000, at :func:`default_tenure` (at n = 24, dim = 12,
    tenures 3, 10 and 16 did worse than its 6). Independent reads matter: one search, restarted or
    not, often stays in one basin (at n = 10, 1 read of 10 restarts found the optimum of
    85-90% of the examples, 20 reads of 20 n moves of all).
    """
    if name == "sa":
        grid = [{"num_reads": r, "num_sweeps": s}
                for r in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
                for s in (5, 10, 20, 50, 100, 200, 500, 1000, 2000)]
    elif name == "tabu":
        grid = [{"num_reads": r, "num_restarts": k, "coefficient_z_first": z}
                for r in (1, 2, 5, 10, 20, 50) for k in (0, 1, 2, 5, 10, 20, 50, 100)
                for z in (20, 50, 100, 200, 500, 1000, 2000)]
    else:
        raise ValueError(f"unknown sampler {name!r}; one of {sorted(SAMPLERS)}")
    return sorted(grid, key=lambda s: (setting_cost(name, s), s.get("num_reads", 1)))


def setting_cost(name, setting) -> float:
    """Search effort of a setting (the grid's order): single-unit updates per example, / n.

    SA: reads x sweeps. Tabu: reads x (first search + restarts x a quarter of it), in
    units of ``coefficient_z_first`` (the moves per unit of one search).
    """
    reads = setting.get("num_reads", 1)
    if name == "sa":
        return float(reads * setting.get("num_sweeps", 1000))
    z = setting.get("coefficient_z_first", 10000)
    restart = setting.get("coefficient_z_restart", z / 4)
    return float(reads * (z + setting.get("num_restarts", 1000000) * restart))


def quality(energies, reference) -> tuple[float, float]:
    """(fraction of examples at the reference, mean relative gap (E - E_ref) / E_ref)."""
    energies, reference = np.asarray(energies, np.float64), np.asarray(reference, np.float64)
    ok = energies <= reference * (1 + OK_RTOL) + OK_ATOL
    return float(np.mean(ok)), float(np.mean((energies - reference) / np.abs(reference)))


def is_dominated(name, setting, failed) -> bool:
    """True when ``setting`` has no more effort than a failed one (and the same rest)."""
    keys = EFFORT_KEYS[name]
    rest = {k: v for k, v in setting.items() if k not in keys}
    for other in failed:
        if {k: v for k, v in other.items() if k not in keys} != rest:
            continue
        if all(setting.get(k, 1) <= other.get(k, 1) for k in keys if k in setting or k in other):
            return True
    return False


def calibrate(name, h, J, offset, energy_of=None, reference=None, *, target_ok=0.99,
              target_gap=1e-3, grid=None, max_seconds=60.0, seed=0,
              early_stop=True, batch=None) -> dict:
    """The cheapest setting of the grid whose quality reaches the target.

    Parameters
    ----------
    name : {"sa", "tabu"}
        The sampler.
    h, J, offset : ndarray
        :func:`bqm_arrays` of the calibration examples.
    energy_of : callable, optional
        ``energy_of(states) -> float64 energies`` of all examples (states (num_examples,
        n)); default the quadratic form in float64 (:func:`quadratic_energies`). Use the
        same function for ``reference``: for GVQ, ||x - s F||^2 in float64, as h, J, c
        derived from float32 energies differ from it by ~1e-6 relative to ||x||^2,
        more than the tolerance of ``ok``.
    reference : ndarray (num_examples,)
        The reference energies (the exact optimum, or the planted states' energies).
    target_ok : float
        Least fraction of examples with E <= E_ref (1 + 1e-6) + 1e-9.
    target_gap : float
        Largest mean relative gap mean((E - E_ref) / E_ref).
    grid : list of dict, optional
        Settings to try; default :func:`default_grid`. Tried in order of
        :func:`setting_cost`; a setting with no more effort (every key of
        :data:`EFFORT_KEYS` at most, the rest equal) than one that failed is skipped.
    max_seconds : float
        Stop before a setting whose projected time on these examples exceeds it (the
        time per example is projected linearly in the cost from the settings tried).
    seed : int
        Seeds the samplers (as :func:`run_sampler`).
    early_stop : bool
        Stop a setting's run at the first example that makes ``target_ok`` unreachable
        (more than (1 - target_ok) x num_examples examples above the reference): a
        failing setting then costs a few examples, not all. Its ``ok`` and ``gap`` are
        those of the examples it ran (``examples`` in its entry).

    Returns
    -------
    dict
        ``setting`` (the first that reached the target, else the best tried: most
        examples run before the early stop, then highest ok, then lowest gap),
        ``reached`` (bool), ``ok``, ``gap``, ``seconds_per_example`` of that setting,
        ``tried`` (every setting run, in order, with its ``ok``, ``gap``,
        ``seconds_per_example``, ``examples``, ``cost``), ``skipped`` (how many were
        dominated) and ``stopped`` (why the search ended early, or None).
    """
    if reference is None:
        raise ValueError("calibrate needs the reference energies")
    if batch is not None:
        check_batch(name, batch)
    if energy_of is None:
        def energy_of(states):
            return quadratic_energies(h, J, offset, states)
    reference = np.asarray(reference, np.float64)
    num_examples = h.shape[0]
    grid = default_grid(name) if grid is None else list(grid)
    order = sorted(range(len(grid)),
                   key=lambda i: (setting_cost(name, grid[i]), grid[i].get("num_reads", 1)))
    tried, failed, skipped, stopped, found = [], [], 0, None, None
    allowed_misses = int(np.floor((1.0 - target_ok) * num_examples + 1e-9))
    for index in order:
        setting = grid[index]
        cost = setting_cost(name, setting)
        if is_dominated(name, setting, failed):
            skipped += 1
            continue
        projected = _project(tried, cost) * num_examples
        if tried and projected > max_seconds:
            stopped = (f"{setting} projected at {projected:.1f} s > max_seconds "
                       f"{max_seconds:g}")
            break
        entry = _evaluate(name, h, J, offset, setting, seed, energy_of, reference,
                          allowed_misses if early_stop else None, batch)
        entry["cost"] = cost
        tried.append(entry)
        ok, gap = entry["ok"], entry["gap"]
        if entry["examples"] == num_examples and ok >= target_ok and gap <= target_gap:
            found = entry
            break
        failed.append(setting)
    reached = found is not None
    if found is None:
        found = max(tried, key=lambda e: (e["examples"], e["ok"], -e["gap"])) if tried else None
    result = {"sampler": name, "reached": reached, "target_ok": target_ok,
              "target_gap": target_gap, "tried": tried, "skipped": skipped, "stopped": stopped}
    if found is not None:
        result.update(setting=found["setting"], ok=found["ok"], gap=found["gap"],
                      seconds_per_example=found["seconds_per_example"])
    else:
        result.update(setting=None, ok=None, gap=None, seconds_per_example=None)
    return result


def _evaluate(name, h, J, offset, setting, seed, energy_of, reference, allowed_misses,
              batch=None):
    """Run ``setting`` example by example; stop after ``allowed_misses`` + 1 misses."""
    states = np.zeros(np.shape(h), np.int8)  # energy_of takes all examples' states
    misses, total, done = 0, 0.0, 0
    for i, best, seconds in _solve(name, h, J, offset, setting, seed, batch):
        states[i] = best
        total += seconds
        done = i + 1
        if allowed_misses is not None:
            energy = np.asarray(energy_of(states), np.float64)[i]
            misses += not energy <= reference[i] * (1 + OK_RTOL) + OK_ATOL
            if misses > allowed_misses:
                break
    energies = np.asarray(energy_of(states), np.float64)[:done]
    ok, gap = quality(energies, reference[:done])
    return {"setting": dict(setting), "ok": ok, "gap": gap, "examples": done,
            "seconds_per_example": total / done}


def _project(tried, cost) -> float:
    """Seconds per example at ``cost``: linear through the cheapest and dearest tried."""
    if not tried:
        return 0.0
    low = min(tried, key=lambda e: e["cost"])
    high = max(tried, key=lambda e: e["cost"])
    if high["cost"] > 1.5 * low["cost"]:
        slope = max(0.0, (high["seconds_per_example"] - low["seconds_per_example"])
                    / (high["cost"] - low["cost"]))
        return low["seconds_per_example"] + slope * (cost - low["cost"])
    return high["seconds_per_example"] * cost / max(high["cost"], 1e-12)


def overhead(h, J, offset, *, repeats=100) -> dict:
    """Per-call overhead in ms on the first example, as :func:`run_sampler` calls.

    ``build_ms``: one example's BQM (:func:`build_bqm` from the shared J's template);
    ``beta_range_ms``: :func:`default_beta_range`; ``sa_call_ms``: SA with one read of
    one sweep; ``tabu_call_ms``: tabu with one read, no restart, one move per unit. Each
    call includes its BQM's construction (and SA's its beta range).
    """
    sa, tabu = _sampler("sa"), _sampler("tabu")
    template = build_bqm(np.zeros(h.shape[1]), J, 0.0)
    tabu_defaults = {**TABU_DEFAULTS, "tenure": default_tenure(h.shape[1])}

    def build():
        return build_bqm(h[0], J, offset[0], template=template)

    return {
        "build_ms": _best_ms(build, repeats),
        "beta_range_ms": _best_ms(lambda: default_beta_range(h[0], J), repeats),
        "sa_call_ms": _best_ms(lambda: sa.sample(
            build(), num_reads=1, num_sweeps=1, beta_range=default_beta_range(h[0], J),
            seed=0), repeats),
        "tabu_call_ms": _best_ms(lambda: tabu.sample(
            build(), num_reads=1, num_restarts=0, coefficient_z_first=1, seed=0,
            **tabu_defaults), repeats),
    }


# -- command line ----------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32, help="number of features (default 32)")
    parser.add_argument("--dim", type=int, default=16, help="data dimension (default 16)")
    parser.add_argument("--examples", type=int, default=200,
                        help="calibration examples (default 200)")
    parser.add_argument("--noise", type=float, default=0.3, help="planted noise (default 0.3)")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--target-ok", type=float, default=0.99,
                        help="least fraction of examples at the reference (default 0.99)")
    parser.add_argument("--target-gap", type=float, default=1e-3,
                        help="largest mean relative gap to the reference (default 1e-3)")
    parser.add_argument("--max-seconds", type=float, default=120.0,
                        help="skip settings projected to take longer on all examples (120)")
    parser.add_argument("--exact-max-features", type=int, default=24,
                        help="exact reference up to this n, planted states beyond (24)")
    parser.add_argument("--batch", type=int, default=None,
                        help="SA: also calibrate and time it with this many examples per "
                             "call, as one block-diagonal BQM (e.g. 100; default: no)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="60 examples")
    parser.add_argument("--output", type=Path, default=None,
                        help="write the results as JSON to this file (default: nothing)")
    args = parser.parse_args(argv)
    if args.quick:
        args.examples = min(args.examples, 60)
    if args.batch is not None and args.batch < 2:
        parser.error(f"--batch must be at least 2; got {args.batch}")
    return args


def planted_problem(n, dim, num_examples, *, noise=0.3, seed=0, exact_max_features=24):
    """Planted GVQ data, its QUBO arrays and the reference energies (float64).

    Returns ``(h, J, offset, reference, reference_kind, (x, F))``; the reference is
    ||x - s F||^2 of the exact optimum for n <= ``exact_max_features``, else of the
    planted states.
    """
    import jax

    from inference import associate
    from inference.association.core import association_problem
    from ppl_models import gvq

    data = gvq.generate_planted(jax.random.key(seed), num_examples, n, dim,
                                feature_mean=0.0, noise_scale=noise)
    problem = association_problem(gvq.model, data.x, {"features": data.features},
                                  num_features=n)
    h, J, offset = bqm_arrays(problem.energy)
    if n <= exact_max_features:
        states, kind = associate(data.features, data.x, method="exact", check=False).states, \
            "exact"
    else:
        states, kind = data.states, "planted"
    x = np.asarray(data.x, np.float64)
    F = np.asarray(data.features, np.float64)
    reference = np.sum((x - np.asarray(states, np.float64) @ F) ** 2, axis=1)
    return h, J, offset, reference, kind, (x, F)


def main(argv=None) -> dict:
    args = parse_args(argv)
    try:
        import dimod
        import dwave.samplers
    except ImportError:
        print("dwave-samplers is not installed (pip install dwave-samplers, or the bench "
              "extra): nothing to compare")
        return {}
    start = time.perf_counter()
    h, J, offset, reference, kind, (x, F) = planted_problem(
        args.n, args.dim, args.examples, noise=args.noise, seed=args.seed,
        exact_max_features=args.exact_max_features)

    def energy_of(states):  # ||x - s F||^2 in float64, the compared quality
        return np.sum((x - np.asarray(states, np.float64) @ F) ** 2, axis=1)

    print(f"n = {args.n}, dim = {args.dim}, {args.examples} examples, noise {args.noise}; "
          f"reference: {kind}; target: ok >= {args.target_ok:g}, gap <= {args.target_gap:g}")
    costs = overhead(h, J, offset)
    builds = constructor_timings(h[0], J, offset[0])
    rows = []
    runs = [(name, None) for name in args.samplers]
    if args.batch is not None and "sa" in args.samplers:
        runs.append(("sa", args.batch))
    for name, batch in runs:
        begin = time.perf_counter()
        result = calibrate(name, h, J, offset, energy_of, reference, target_ok=args.target_ok,
                           target_gap=args.target_gap, max_seconds=args.max_seconds,
                           seed=args.seed, batch=batch)
        result["calibration_s"] = time.perf_counter() - begin
        rows.append({"method": f"dwave-samplers {SAMPLERS[name]}"
                               + ("" if batch is None else f", {batch} examples per call"),
                     "size": f"n={args.n}, dim={args.dim}, N={args.examples}",
                     "time_s": result["seconds_per_example"], **result,
                     "sampler": name if batch is None else f"{name} x{batch}", "batch": batch})
    print(format_table(rows, costs))
    print("BQM construction (ms): "
          + ", ".join(f"{k} {v:.4f}" for k, v in builds.items()))
    record = {"config": {**{k: v for k, v in vars(args).items() if k != "output"},
                         "reference": kind},
              "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(),
                          "dimod": dimod.__version__,
                          "dwave_samplers": dwave.samplers.__version__},
              "overhead_ms": costs, "constructors_ms": builds, "rows": rows,
              "seconds": time.perf_counter() - start}
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(record, indent=1, default=str))
        print(f"wrote {args.output}")
    return record


def format_table(rows, costs) -> str:
    """The calibration results as text."""
    lines = [f"{'sampler':8} {'setting':58} {'reached':7} {'ok':>6} {'gap':>9} "
             f"{'ms/ex':>8} {'tried':>5} {'calib s':>7}"]
    for r in rows:
        setting = ", ".join(f"{k}={v}" for k, v in (r["setting"] or {}).items())
        lines.append(f"{r['sampler']:8} {setting:58} {str(r['reached']):7} "
                     f"{r['ok'] if r['ok'] is None else format(r['ok'], '.3f'):>6} "
                     f"{r['gap'] if r['gap'] is None else format(r['gap'], '.2e'):>9} "
                     f"{1e3 * (r['seconds_per_example'] or 0):8.3f} {len(r['tried']):5d} "
                     f"{r.get('calibration_s', 0):7.1f}")
        if r["stopped"]:
            lines.append(f"         stopped: {r['stopped']}")
    lines.append("per-call overhead (ms): " + ", ".join(f"{k[:-3]} {v:.3f}"
                                                       for k, v in costs.items())
                 + " (SA: 1 read x 1 sweep; tabu: 1 read, n moves)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
