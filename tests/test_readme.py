"""The README's first code block is the two set-up commands, and the Python blocks of the
README and of the user guide (docs/user_guide.md) run."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
#: The README, then the user guide, where the tours of every family live.
TEXT = README + "\n" + (ROOT / "docs" / "user_guide.md").read_text()


def test_first_code_block_is_the_two_setup_commands():
    first = re.search(r"```[a-z]*\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first == ['pip install -e ".[examples]" && ppl-zoo compare gvq',
                     'pip install -e ".[test]" && pytest -n auto --dist loadfile']
    # CI runs exactly the README's test command, on its own line.
    command = first[1].split(" && ", 1)[1]
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text().splitlines()
    assert command in ci


@pytest.mark.slow
def test_python_tour_runs(capsys):
    tour = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    result, exact, peer = namespace["result"], namespace["exact"], namespace["peer"]
    assert (exact.states == peer.states).all()
    assert float(result.error) < 0.2  # the noise floor is 16 * 0.1^2 = 0.16


def _run_python_block(marker):
    """Run the README's Python block that mentions ``marker``; its namespace."""
    tours = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    tour = next(t for t in tours if marker in t)
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_clipped_gaussian_tour_runs():
    namespace = _run_python_block("fit_clipped_gaussian")
    score = namespace["score"]
    # Fitted on 2000 patterns, scored on 2000 others: within a few times the floor.
    assert score["corr_rmse"] < 4 * score["noise_floor_corr"]
    assert namespace["frames"].shape == (8, 20)


@pytest.mark.slow  # about a minute of compilations (every candidate k, every mode)
def test_mixture_tour_runs():
    tours = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    tour = next(t for t in tours if "fit_mixture" in t)
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    # The three limits order as the paper states, and J chooses the planted 4 clusters.
    em, hard, kmeans = namespace["em"], namespace["hard"], namespace["kmeans"]
    assert em.L_stocha <= hard.L_map <= kmeans.L_NN
    assert namespace["choice"].choice == 4
    assert namespace["svi"].log_likelihood <= -em.L_stocha + 1e-3


@pytest.mark.slow
def test_mcvq_tour_runs():
    tours = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    tour = next(t for t in tours if "fit_mcvq" in t)
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    # Each VQ owns one shape; the test RMS is near the 0.44 floor of J = 5 states for the
    # 9 positions of a shape (examples/mcvq_shapes.py), far below one VQ for everything.
    assert namespace["shapes"].purity(namespace["fit"].g)["purity"] > 0.95
    assert namespace["rms"] < 0.5


def test_save_and_load_block_runs(tmp_path):
    tours = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    tour = next(t for t in tours if "inference.load" in t)
    target = tmp_path / "mixture_fit.npz"
    namespace = {}
    exec(compile(tour.replace("/tmp/mixture_fit.npz", str(target)), "README.md", "exec"),
         namespace)
    assert namespace["path"] == target and target.is_file()
    assert type(namespace["again"]) is type(namespace["result"])


def test_checkpoint_block_runs(tmp_path):
    tours = re.findall(r"```python\n(.*?)```", TEXT, re.S)
    tour = next(t for t in tours if "resume_from=" in t)
    target = tmp_path / "mixture_checkpoint.npz"
    namespace = {}
    exec(compile(tour.replace("/tmp/mixture_checkpoint.npz", str(target)), "README.md",
                 "exec"), namespace)
    assert target.is_file()
    whole, resumed = namespace["whole"], namespace["resumed"]
    assert whole.num_iterations == resumed.num_iterations > 1  # more than one chunk ran


@pytest.mark.slow
def test_your_own_program_section_runs():
    namespace = _run_python_block("fit_map_em")
    fit, states = namespace["fit"], namespace["states"]
    assert fit.closed_form and fit.converged
    assert fit.objective < 2 * 8 * 0.1 ** 2  # near the noise floor of 8 * 0.1^2
    assert states.states["s"].shape == (200, 5)


@pytest.mark.slow
def test_em_on_your_own_program_section_runs():
    namespace = _run_python_block("fit_em(")
    fit, both, hard, log_p = (namespace[name] for name in ("fit", "both", "hard", "log_p"))
    assert (fit.objective_name, fit.direction) == ("log_likelihood", "max")
    assert fit.posteriors["c"].shape == (200, 3) and both.posteriors["s0"].shape == (200,)
    assert hard.states["c"].shape == (200,) and hard.objective_name == "mean_energy"
    # fit_em's objective is NumPyro's enumerated log-likelihood, at or above SVI's.
    assert abs(float(log_p["fit_em"]) - fit.objective) <= 1e-4 * abs(fit.objective)
    assert float(log_p["fit_em"]) >= float(log_p["SVI"]) - 0.5
    assert sorted(float(b) for b in fit.params["slopes"]) == pytest.approx([-1.0, 0.5, 1.0],
                                                                          abs=0.1)


def _page_blocks(name):
    """The Python blocks of a documentation page that run as written (a sketch with
    ``...`` placeholders is not meant to)."""
    text = (ROOT / "docs" / name).read_text()
    return [block for block in re.findall(r"```python\n(.*?)```", text, re.S)
            if not re.search(r"[,(]\s*\.\.\.", block)]


@pytest.mark.slow
@pytest.mark.parametrize("page", ["getting_started.md", "concepts.md", "index.md"])
def test_documentation_pages_python_blocks_run(page, tmp_path):
    blocks = _page_blocks(page)
    assert blocks, page
    namespace = {}
    for block in blocks:  # one namespace per page: later blocks use earlier names
        block = block.replace("/tmp/", f"{tmp_path}/")
        exec(compile(block, f"docs/{page}", "exec"), namespace)
