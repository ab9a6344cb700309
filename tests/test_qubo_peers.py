"""``benchmarks/qubo_peers.py``: D-Wave's dwave-samplers on the association QUBO.

dwave-samplers is a peer that only the benchmarks run (the ``bench`` extra), so the
module is skipped where it is not installed.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("dwave.samplers")

from inference.association.core import association_problem  # noqa: E402
from ppl_models import gvq  # noqa: E402

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "qubo_peers.py"
spec = importlib.util.spec_from_file_location("qubo_peers", PATH)
qubo_peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(qubo_peers)


@functools.cache
def _problem(num_examples, n, dim, seed=0):
    """Planted GVQ data drawn in numpy (F ~ N(0, 1), s ~ Bernoulli(1/2), noise 0.3), the
    library's quadratic energy of its association, and the exact optimum's ||x - s F||^2
    by enumeration of the 2^n states."""
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, dim))
    x = rng.integers(0, 2, size=(num_examples, n)) @ F + 0.3 * rng.normal(
        size=(num_examples, dim))
    problem = association_problem(gvq.model, jnp.asarray(x, jnp.float32),
                                  {"features": jnp.asarray(F, jnp.float32)}, num_features=n)
    every = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    reference = np.min(np.sum((x[:, None] - (every @ F)[None]) ** 2, axis=-1), axis=1)
    return problem.energy, reference, (x, F)


def test_bqm_energies_match_the_quadratic_energy():
    energy, _, _ = _problem(20, 10, 5)
    h, J, offset = qubo_peers.bqm_arrays(energy)
    assert h.dtype == J.dtype == offset.dtype == np.float64
    assert np.allclose(J, np.triu(J, 1))
    states = np.random.default_rng(0).integers(0, 2, size=(5, 20, 10))  # 5 draws x 20 ex.
    ours = np.stack([np.asarray(energy(states[k]), np.float64) for k in range(5)], axis=1)
    template = qubo_peers.build_bqm(np.zeros(10), J, 0.0)
    for i in range(6):
        for bqm in (qubo_peers.build_bqm(h[i], J, offset[i]),
                    qubo_peers.build_bqm(h[i], J, offset[i], template=template)):
            assert bqm.num_variables == 10 and bqm.vartype.name == "BINARY"
            np.testing.assert_allclose(bqm.energies((states[:, i], range(10))), ours[i],
                                       rtol=1e-5)
        np.testing.assert_allclose(
            qubo_peers.quadratic_energies(h[i], J, offset[i], states[:, i]), ours[i], rtol=1e-5)


def test_beta_range_is_the_samplers_default():
    from dwave.samplers import SimulatedAnnealingSampler

    energy, _, _ = _problem(20, 10, 5)
    h, J, offset = qubo_peers.bqm_arrays(energy)
    for i in range(3):
        info = SimulatedAnnealingSampler().sample(
            qubo_peers.build_bqm(h[i], J, offset[i]), num_reads=1, num_sweeps=1, seed=0).info
        np.testing.assert_allclose(qubo_peers.default_beta_range(h[i], J), info["beta_range"],
                                   rtol=1e-12)


def test_generous_settings_find_the_exact_optimum():
    energy, reference, (x, F) = _problem(20, 10, 5)
    h, J, offset = qubo_peers.bqm_arrays(energy)
    for name, setting in (("sa", {"num_reads": 50, "num_sweeps": 200}),
                          ("tabu", {"num_reads": 20, "num_restarts": 5,
                                    "coefficient_z_first": 50})):
        states, seconds = qubo_peers.run_sampler(name, h, J, offset, setting=setting, seed=1)
        assert states.dtype == np.int8 and states.shape == (20, 10) and seconds > 0
        found = np.sum((x - states.astype(np.float64) @ F) ** 2, axis=1)
        np.testing.assert_allclose(found, reference, rtol=1e-9, err_msg=name)


def test_calibrate_returns_the_cheapest_setting_that_reaches_the_target():
    energy, reference, (x, F) = _problem(20, 12, 6)
    h, J, offset = qubo_peers.bqm_arrays(energy)

    def energy_of(states):  # the reference's energy, ||x - s F||^2 in float64
        return np.sum((x - states.astype(np.float64) @ F) ** 2, axis=1)

    grid = [{"num_reads": 100, "num_sweeps": 200}, {"num_reads": 1, "num_sweeps": 1},
            {"num_reads": 20, "num_sweeps": 100}, {"num_reads": 1, "num_sweeps": 2}]
    result = qubo_peers.calibrate("sa", h, J, offset, energy_of, reference, target_ok=1.0,
                                  target_gap=1e-9, grid=grid, seed=0)
    assert result["reached"] and result["ok"] == 1.0 and result["gap"] <= 1e-9
    tried = [entry["setting"] for entry in result["tried"]]
    assert tried[0] == {"num_reads": 1, "num_sweeps": 1}  # cheapest first: it fails
    assert result["setting"] != {"num_reads": 1, "num_sweeps": 1}
    assert result["setting"] == tried[-1]
    # every cheaper setting was run (or skipped as dominated) and failed
    assert all(entry["ok"] < 1.0 for entry in result["tried"][:-1])
    assert len(tried) + result["skipped"] <= len(grid)
    costs = [entry["cost"] for entry in result["tried"]]
    assert costs == sorted(costs)
    for entry in result["tried"][:-1]:  # stopped at the first miss (target_ok = 1)
        assert entry["examples"] < 20 and entry["ok"] == (entry["examples"] - 1) / entry[
            "examples"]
    # a grid that cannot reach the target says so and returns its best try
    hopeless = qubo_peers.calibrate("sa", h, J, offset, energy_of, reference, target_ok=1.0,
                                    target_gap=1e-9, grid=grid[1:2], seed=0)
    assert not hopeless["reached"] and hopeless["setting"] == grid[1]


def test_dominated_settings_are_skipped():
    failed = [{"num_reads": 10, "num_sweeps": 100}]
    assert qubo_peers.is_dominated("sa", {"num_reads": 5, "num_sweeps": 100}, failed)
    assert not qubo_peers.is_dominated("sa", {"num_reads": 5, "num_sweeps": 200}, failed)
    assert not qubo_peers.is_dominated(
        "sa", {"num_reads": 5, "num_sweeps": 50, "beta_range": (0.1, 1.0)}, failed)
    grid = qubo_peers.default_grid("tabu")
    costs = [qubo_peers.setting_cost("tabu", s) for s in grid]
    assert costs == sorted(costs)


def test_block_bqm_holds_the_examples_as_independent_blocks():
    from dwave.samplers import SimulatedAnnealingSampler

    energy, _, _ = _problem(20, 10, 5)
    h, J, offset = qubo_peers.bqm_arrays(energy)
    bqm = qubo_peers.block_bqm(h[:7], J, offset[:7])
    assert bqm.num_variables == 70 and bqm.num_interactions == 7 * np.count_nonzero(J)
    states = np.random.default_rng(1).integers(0, 2, size=(4, 7, 10))
    per_example = qubo_peers.quadratic_energies(h[:7], J, offset[:7], states)  # (4, 7)
    np.testing.assert_allclose(bqm.energies((states.reshape(4, 70), range(70))),
                               per_example.sum(axis=1), rtol=1e-9)
    # its beta range is the one the sampler computes for the block BQM itself
    info = SimulatedAnnealingSampler().sample(bqm, num_reads=1, num_sweeps=1, seed=0).info
    np.testing.assert_allclose(qubo_peers.block_beta_range(h[:7], J), info["beta_range"],
                               rtol=1e-12)
    np.testing.assert_allclose(qubo_peers.block_beta_range(h[3:4], J),
                               qubo_peers.default_beta_range(h[3], J), rtol=1e-12)


def test_sa_in_blocks_finds_the_optimum_and_rejects_bad_batches():
    energy, reference, (x, F) = _problem(20, 10, 5)
    h, J, offset = qubo_peers.bqm_arrays(energy)
    setting = {"num_reads": 50, "num_sweeps": 200}
    for batch in (1, 6, 20, 64):  # 6: a short last block
        states, seconds = qubo_peers.run_sampler("sa", h, J, offset, setting=setting, seed=1,
                                                 batch=batch)
        assert states.dtype == np.int8 and states.shape == (20, 10) and seconds > 0
        found = np.sum((x - states.astype(np.float64) @ F) ** 2, axis=1)
        np.testing.assert_allclose(found, reference, rtol=1e-9, err_msg=f"batch {batch}")
    # one read of one sweep per block leaves most examples above the optimum
    states, _ = qubo_peers.run_sampler("sa", h, J, offset, batch=10, seed=0,
                                       setting={"num_reads": 1, "num_sweeps": 1})
    assert np.mean(np.sum((x - states @ F) ** 2, axis=1) > reference * (1 + 1e-6)) > 0.3
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="batch must be a positive integer"):
            qubo_peers.run_sampler("sa", h, J, offset, setting=setting, batch=bad)
    with pytest.raises(ValueError, match="for SA only"):
        qubo_peers.run_sampler("tabu", h, J, offset, setting={"num_reads": 1}, batch=4)
    with pytest.raises(ValueError, match="for SA only"):
        qubo_peers.calibrate("tabu", h, J, offset, reference=reference, batch=4)
    result = qubo_peers.calibrate("sa", h, J, offset, reference=reference * 0 + 1e9,
                                  grid=[{"num_reads": 1, "num_sweeps": 5}], batch=8)
    assert result["reached"] and result["tried"][0]["examples"] == 20
