"""Figures read well: constrained layout, no text over other text, nothing cut off.

:func:`layout_problems` is the reusable check: it draws a figure and lists every pair
of overlapping texts (suptitle, axes titles, axis labels, visible tick labels, legend
entries, annotations) and every text that leaves the canvas. :func:`saved_figures`
catches the figures a plotting function saves, so that the check runs on the figure
as it was written. The plotting functions of ``ppl-zoo compare`` are fed small
synthetic results here.
"""

import contextlib
import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from inference.clipped.compare import plot_clipped  # noqa: E402
from inference.engine.figures import DPI, empty_figure, new_figure, save_figure  # noqa: E402
from inference.engine.reporting import ComparisonResult, ComparisonRow  # noqa: E402
from inference.gvq.compare import plot_gvq  # noqa: E402
from inference.gvq.compare_association import plot_gvq_association  # noqa: E402
from inference.gvq.compare_learning import plot_gvq_learning  # noqa: E402
from inference.mcvq.compare import plot_mcvq  # noqa: E402
from inference.mixture.compare import plot_mixture  # noqa: E402
from inference.ppca.compare import plot_ppca  # noqa: E402

#: Overlaps of at most this many pixels (in both directions) are tolerated.
TOLERANCE_PX = 1.0


def _visible_tick_labels(axis):
    """The tick labels matplotlib draws: visible, non-empty, at a tick inside the view."""
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(low), abs(high), 1.0)
    out = []
    for locations, ticks in ((axis.get_majorticklocs(), axis.get_major_ticks),
                             (axis.get_minorticklocs(), axis.get_minor_ticks)):
        for location, tick in zip(locations, ticks(len(locations)), strict=True):
            if not low - slack <= location <= high + slack:
                continue
            out += [label for label in (tick.label1, tick.label2)
                    if label.get_visible() and label.get_text().strip()]
    return out


def figure_texts(fig):
    """``(description, Text)`` of every visible, non-empty text of ``fig``."""
    found, seen = [], set()

    def add(what, text):
        if (text is not None and id(text) not in seen and text.get_visible()
                and text.get_text().strip()):
            seen.add(id(text))
            found.append((what, text))

    figures = [fig]
    for parent in figures:  # the figure and its subfigures, at any depth
        figures.extend(parent.subfigs)
    for number, part in enumerate(figures):
        name = "figure" if number == 0 else f"subfigure {number}"
        for what in ("suptitle", "supxlabel", "supylabel"):
            add(f"{name} {what}", getattr(part, f"_{what}", None))
        for text in part.texts:
            add(f"{name} text", text)
        for legend in part.legends:
            add(f"{name} legend title", legend.get_title())
            for text in legend.get_texts():
                add(f"{name} legend", text)
    for number, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        name = f"axes {number}"
        for loc in ("left", "center", "right"):
            title = {"left": ax._left_title, "center": ax.title, "right": ax._right_title}[loc]
            add(f"{name} title", title)
        if ax.axison:  # axis("off") draws neither ticks nor axis labels
            add(f"{name} x label", ax.xaxis.label)
            add(f"{name} y label", ax.yaxis.label)
            add(f"{name} x offset", ax.xaxis.get_offset_text())
            add(f"{name} y offset", ax.yaxis.get_offset_text())
            for label in _visible_tick_labels(ax.xaxis):
                add(f"{name} x tick {label.get_text()!r}", label)
            for label in _visible_tick_labels(ax.yaxis):
                add(f"{name} y tick {label.get_text()!r}", label)
        for text in ax.texts:
            add(f"{name} text", text)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            add(f"{name} legend title", legend.get_title())
            for text in legend.get_texts():
                add(f"{name} legend", text)
    return found


def layout_problems(fig, tolerance=TOLERANCE_PX):
    """Overlapping texts and texts outside the canvas of ``fig``, as readable strings.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        A figure (drawn here with its layout engine).
    tolerance : float
        Overlaps up to this many pixels in both directions are ignored.

    Returns
    -------
    list of str
        Empty when the figure has no such problem.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    canvas = fig.bbox
    boxes = [(what, text, text.get_window_extent(renderer)) for what, text in figure_texts(fig)]
    problems = []
    for what, text, box in boxes:
        if (box.x0 < canvas.x0 - tolerance or box.y0 < canvas.y0 - tolerance
                or box.x1 > canvas.x1 + tolerance or box.y1 > canvas.y1 + tolerance):
            problems.append(f"{what} ({text.get_text()[:40]!r}) leaves the figure")
    for (what_a, text_a, a), (what_b, text_b, b) in itertools.combinations(boxes, 2):
        width = min(a.x1, b.x1) - max(a.x0, b.x0)
        height = min(a.y1, b.y1) - max(a.y0, b.y0)
        if width > tolerance and height > tolerance:
            problems.append(f"{what_a} ({text_a.get_text()[:30]!r}) overlaps "
                            f"{what_b} ({text_b.get_text()[:30]!r})")
    return problems


@contextlib.contextmanager
def saved_figures():
    """Collect every figure that is saved inside the block, checked as it was saved.

    Yields a list that fills with ``(figure, layout problems)`` pairs; the problems are
    computed right after ``savefig``, before the plotting code closes the figure.
    """
    saved = []
    original = Figure.savefig

    def savefig(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        saved.append((self, layout_problems(self)))
        return out

    Figure.savefig = savefig
    try:
        yield saved
    finally:
        Figure.savefig = original


def assert_reads_well(plot, *args, expected=1):
    """Call ``plot(*args)``; each figure it saves must use constrained layout and read well."""
    with saved_figures() as saved:
        plot(*args)
    assert len(saved) == expected
    for fig, problems in saved:
        assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine"
        assert not problems, "\n".join(problems)
        plt.close(fig)


# --------------------------------------------------------------------------- the helper


def test_new_figure_uses_constrained_layout_and_save_figure_writes_and_closes(tmp_path):
    fig, axes = new_figure(1, 2, figsize=(4, 2))
    assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine"
    assert axes.shape == (2,)
    assert empty_figure((2, 2)).get_layout_engine().__class__.__name__ == \
        "ConstrainedLayoutEngine"
    plt.close("all")
    fig, ax = new_figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    path = save_figure(fig, tmp_path / "f.png")
    assert path.stat().st_size > 1000 and not plt.fignum_exists(fig.number)
    assert DPI >= 100


def test_the_check_finds_a_suptitle_over_the_panel_titles():
    """Without a layout engine the suptitle is drawn over the titles: the check sees it."""
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.5))
    for ax in axes:
        ax.set_title("a panel title")
        ax.set_xlabel("dimension")
    fig.suptitle("a suptitle that the panels' titles run into", y=0.97)
    fig.subplots_adjust(top=0.9, bottom=0.02)
    problems = layout_problems(fig)
    plt.close(fig)
    assert any("suptitle" in p and "title" in p for p in problems)
    assert any("leaves the figure" in p for p in problems)
    fig, axes = new_figure(1, 3, figsize=(9, 2.5))
    for ax in axes:
        ax.set_title("a panel title")
        ax.set_xlabel("dimension")
    fig.suptitle("a suptitle that the panels' titles run into")
    assert layout_problems(fig) == []
    plt.close(fig)


def test_every_figure_goes_through_the_shared_helper():
    """No plotting code makes or saves a figure by itself, or calls tight_layout."""
    root = Path(__file__).resolve().parent.parent
    helper = root / "inference" / "engine" / "figures.py"
    forbidden = ("plt.subplots(", "plt.figure(", ".savefig(", "tight_layout(", "subplots_adjust(")
    offenders = []
    for folder in ("inference", "ppl_models", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == helper:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if any(call in line for call in forbidden):
                    offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not offenders, "use inference.engine.figures:\n" + "\n".join(offenders)


# ---------------------------------------------------------------- ppl-zoo compare figures


def _row(task, algorithm, implementation, time_s=0.1, **extra):
    return ComparisonRow(task, algorithm, implementation, "objective", 1.0, time_s, 2 * time_s,
                         True, extra)


def test_compare_gvq_figure(tmp_path):
    rng = np.random.default_rng(0)
    planted = rng.normal(2.0, 1.0, (6, 16))
    result = ComparisonResult("gvq", [], {}, {"planted": planted, "em": planted + 0.1,
                                               "svi": planted - 0.1})
    assert_reads_well(plot_gvq, result, tmp_path / "gvq.png")


def test_compare_gvq_association_figure(tmp_path):
    rows = []
    for task in ("random features, N(0, 1)", "planted features, N(2, 1), noise 0.1"):
        rows += [_row(task, "exhaustive search (quadratic form)", "ours", energy_gap=0.0),
                 _row(task, "mean field, annealed, restarts", "ours", 0.02, energy_gap=0.05),
                 _row(task, "infer_discrete(temperature=0)", "numpyro", 1.5, energy_gap=0.0),
                 _row(task, "Gibbs sampling, program energies", "numpyro", 3.0,
                      energy_gap=None)]
    result = ComparisonResult("gvq_association", rows, {})
    assert_reads_well(plot_gvq_association, result, tmp_path / "a.png")


def test_compare_gvq_learning_figure(tmp_path):
    rows = [_row("learning", "EM, exact association, sigma -> 0", "ours", 0.5,
                 gap_to_planted=0.001),
            _row("learning", "EM, mean field association", "ours", 0.3, gap_to_planted=0.02),
            _row("learning", "SVI TraceEnum_ELBO, MAP F, sigma=0.1", "numpyro", 9.0,
                 gap_to_planted=0.4),
            _row("learning", "NUTS over F, states summed out", "numpyro", 40.0,
                 gap_to_planted=-0.001),
            _row("learning", "planted features", "reference", 0.0, gap_to_planted=0.0)]
    result = ComparisonResult("gvq_learning", rows, {})
    assert_reads_well(plot_gvq_learning, result, tmp_path / "l.png")


def test_compare_clipped_figure(tmp_path):
    rng = np.random.default_rng(1)
    heldout = rng.uniform(-1, 1, 120)
    arrays = {"heldout": heldout}
    for key in ("arcsine", "svi", "nuts", "planted"):
        arrays[key] = np.clip(heldout + rng.normal(0, 0.1, heldout.shape), -1, 1)
    result = ComparisonResult("clipped", [], {}, arrays)
    assert_reads_well(plot_clipped, result, tmp_path / "c.png")


def test_compare_ppca_figure(tmp_path):
    sigma2 = {"EM for PPCA (Tipping and Bishop 1999)": 0.1, "closed form (eigendecomposition)":
              0.1, "SVI: AutoDelta W, mu, sigma": 0.12, "NUTS over W, mu, sigma": 0.11,
              "scikit-learn PCA (SVD)": 0.1}
    angles = {"em_limit": 1.0, "em_ml": 1.0, "svi": 3.0, "nuts": 4.0, "sklearn": 1.0}
    arrays = {"eigenvalues": np.sort(np.r_[[5.0, 3.0, 2.0], np.full(9, 0.1)])[::-1],
              "angles_deg": angles, "sigma2": sigma2}
    result = ComparisonResult("ppca", [], {}, arrays)
    assert_reads_well(plot_ppca, result, tmp_path / "p.png")


def test_compare_mixture_figure(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 2))
    params = (np.array([0.5, 0.3, 0.2]), rng.normal(size=(3, 2)), np.stack([np.eye(2)] * 3))
    arrays = {"x": x, **{key: params for key in ("em", "map", "nearest", "svi", "nuts",
                                                  "planted")}}
    result = ComparisonResult("mixture", [], {}, arrays)
    assert_reads_well(plot_mixture, result, tmp_path / "m.png")


def test_compare_mcvq_figure(tmp_path):
    rng = np.random.default_rng(3)
    arrays = {}
    for key in ("em", "em_n", "svi", "svi_meanfield", "planted"):
        trace = -np.logspace(2, 1, 60) if key != "planted" else np.zeros(0)
        arrays[key] = {"trace": trace, "g": rng.dirichlet(np.ones(3), size=12)}
    result = ComparisonResult("mcvq", [], {}, arrays)
    assert_reads_well(plot_mcvq, result, tmp_path / "v.png")


# ----------------------------------------------------------------------- example figures


def test_gvq_planted_figure(load_example, tmp_path):
    example = load_example("gvq_planted")
    rng = np.random.default_rng(4)
    traces = [np.geomspace(20.0, 0.16, 6 + seed) for seed in range(10)]
    planted = rng.normal(2.0, 1.0, (6, 16))
    assert_reads_well(example._plot, tmp_path / "p.png", traces, (planted, planted), 0.16)


def test_your_own_program_figure(load_example, tmp_path):
    example = load_example("your_own_program")
    methods = ("exact", "bp", "br", "br+mf", "dbp", "dbr", "gibbs", "mf", "numpyro")
    rows = [dict(variant=variant, method=method, agreement=0.5 + 0.05 * i)
            for variant in ("chain prior", "independent units") for i, method in
            enumerate(methods)]
    rows[3]["error"] = "not applicable"
    assert_reads_well(example.figure, rows, tmp_path / "y.png")


def test_em_your_program_figure(load_example, tmp_path):
    example = load_example("em_your_program")
    rng = np.random.default_rng(6)
    methods = ("planted parameters", "soft EM", "annealed EM (T from 10)", "mean-field EM",
               "hard EM", "SVI, TraceEnum_ELBO", "NUTS", "NUTS from soft EM")
    rows = [dict(program=program, method=method, log_likelihood=-200.0 - 300.0 * (i == 2))
            for program in ("regressions", "causes") for i, method in enumerate(methods)]
    t = rng.uniform(-2.0, 2.0, 60)
    truth = dict(intercepts=np.array([-2.0, 0.0, 2.0]), slopes=np.array([1.0, -1.0, 0.5]))
    fit = SimpleNamespace(params=truth, posteriors={"c": rng.dirichlet(np.ones(3), 60)})
    assert_reads_well(example.figure, rows, ((t, t), truth), fit, tmp_path / "e.png")


def test_mcvq_text_figure(load_example, tmp_path):
    example = load_example("mcvq_text")
    g = np.random.default_rng(5).dirichlet(np.ones(8), size=400)
    results = {"free_energy_trace": list(-np.geomspace(1e6, 5e5, 40))}
    assert_reads_well(example._plot, g, results, tmp_path)


def test_mcvq_ratings_figure(load_example, tmp_path):
    example = load_example("mcvq_ratings")
    methods = [example.ITEM, example.USER, example.OFFSET, example.ASPECT, example.MCVQ]
    counts = [5, 10, 15]
    results = {"observed_counts": counts, "methods": methods,
               "mae": {n: {name: 0.8 - 0.01 * i - 0.005 * n for i, name in enumerate(methods)}
                       for n in counts},
               "mcvq": {"free_energy_trace": list(-np.geomspace(1e5, 6e4, 40))},
               "aspect": {"log_likelihood_trace": list(-np.geomspace(1e5, 7e4, 40))}}
    assert_reads_well(example._plot, results, tmp_path)


def test_yingyang_selection_figure(load_example, tmp_path):
    example = load_example("yingyang_selection")
    rng = np.random.default_rng(6)
    rules = [f"criterion {i}" for i in range(12)]
    rows = [{"true_k": k, "found": {rule: int(k + rng.integers(-1, 2)) for rule in rules}}
            for k in (2, 3, 4, 5) for _ in range(5)]
    traces = {"YY pruning": np.r_[np.full(5, 10), np.full(20, 4)],
              "VB pruning": np.r_[np.full(8, 10), np.full(30, 3)]}
    assert_reads_well(example._plot, rows, rules, traces, tmp_path)


def test_gvq_association_example_figure(load_example, tmp_path):
    example = load_example("gvq_association")
    results = {}
    for name, xs in (("fig4a", [1 / 12, 1 / 3, 7 / 12, 1.0]), ("fig4b", [2 / 15, 8 / 15, 2.0]),
                     ("fig5", [0.0, 4.0, 8.0])):
        methods = list(example.FIGURE_METHODS[name])
        summary = {m: {"error": list(0.3 + 0.1 * np.arange(len(xs)) + 0.01 * i),
                       "se": [0.01] * len(xs)} for i, m in enumerate(["exact", *methods])}
        results[name] = {"x": xs, "methods": methods, "summary": summary}
    assert_reads_well(example._plot, results, tmp_path / "a.png")


def test_clipped_counterexample_figure(load_example, tmp_path):
    example = load_example("clipped_counterexample")
    rows = []
    for n in (3, 4, 6, 8, 12, 16):
        sums = np.zeros(2 * n + 1)
        sums[n - 2:n + 3] = (1, 4, 6, 4, 1)
        rows.append({"N": n, "min_eigenvalue": -0.1 * n, "css_offdiag": -1 / (n - 1),
                     "model_second": 2 / np.pi * np.arcsin(-1 / (n - 1)), "sums": sums})
    assert_reads_well(example._plot, tmp_path / "c.png", rows)


def test_clipped_entropy_figure(load_example, tmp_path):
    example = load_example("clipped_entropy")
    sizes = [8, 16, 32]
    counts = {variant: {p: {"rows": [{"N": n, "exact": 10.0 * n**p if n < 20 else None,
                                      "sampled": 8.0 * n**p} for n in sizes],
                            "slope_formula": float(p), "slope_sampled": p - 0.1}
                        for p in example.HIDDEN} for variant in example.VARIANTS}
    assert_reads_well(example._plot, tmp_path / "e.png", counts, sizes, 4000)


def test_mcvq_shapes_rms_figure(load_example, tmp_path):
    example = load_example("mcvq_shapes")
    curves = {m: [{"bits": b, "rms": 0.5 / np.log10(b)} for b in (1e3, 3e3, 1e4, 3e4)]
              for m in ("pca", "nmf", "vq")}
    matched = {m: {"bits": 5e3, "rms": 0.15} for m in curves}
    assert_reads_well(example._plot_rms, tmp_path / "r.png", curves,
                      {"bits": 5e3, "rms": 0.12}, matched)
