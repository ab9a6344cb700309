"""Run every benchmark script of this folder and put their results into one table.

Each script (``benchmarks/*.py`` except this one) runs in its own subprocess as
``python benchmarks/NAME.py [--quick] --output RESULTS/NAME.json``; then its
JSON is read by an adapter that knows the script's layout and turns it into
rows of one common table:

    benchmark, method, peer, size, time (with its unit), ratio (peer / ours,
    ">" where it is a lower bound), memory peak (where the JSON has one),
    goal met (True / False / None where the row has no goal), note.

The layouts differ between scripts, so there is one small adapter per script
(:data:`ADAPTERS`), each tolerant of missing keys; a script without an adapter
(new ones, e.g. ``sharding.py``, ``streaming.py``) goes through
:func:`adapt_generic`, which reads common keys, and a layout that nothing can
read gives one row saying so instead of an error. The table is printed and
written, with the machine's description and each script's wall time and exit
status, to ``benchmarks/results/all.json`` (``--output``).

Timings are only comparable within one run of one machine: compare ratios.

Run: ``python benchmarks/run_all.py [--quick] [--only NAME ...] [--collect-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results"
COLUMNS = ("benchmark", "method", "peer", "size", "time", "unit", "ratio", "memory_peak",
           "goal_met", "note")


def row(benchmark, method=None, peer=None, size=None, time=None, unit="s", ratio=None,
        memory_peak=None, goal_met=None, note="") -> dict:
    """One row of the common table (every column present, None where unknown)."""
    return {"benchmark": benchmark, "method": method, "peer": peer, "size": size,
            "time": time, "unit": unit if time is not None else None, "ratio": ratio,
            "memory_peak": memory_peak, "goal_met": goal_met, "note": note}


def _get(data, *keys, default=None):
    """data[k1][k2]... or ``default`` where any level is missing or not a dict/list."""
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return default
    return default if data is None else data


def _memory(entry):
    """A memory peak from a dict: the first numeric key naming a peak or memory."""
    if not isinstance(entry, dict):
        return None
    for key, value in entry.items():
        name = key.lower()
        if ("peak" in name or "memory" in name or "rss" in name) and \
                isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value:g} ({key})"
    return None


# -- adapters, one per script ----------------------------------------------------------------

def adapt_association_exact(data):
    goal = _get(data, "goal_result", default={})
    rows = []
    for r in _get(data, "rows", default=[]):
        n = r.get("num_features")
        rows.append(row("association_exact", "associate exact (core)", "infer_discrete (core)",
                        f"n={n}, N={r.get('num_examples')}",
                        _get(r, "timing", "ours_core", "median_us"), "us/example",
                        r.get("ratio_core"), _memory(r),
                        goal.get("met") if goal.get("size") == n else None,
                        f"wrappers {r['ratio_peer_over_ours']:.2f}x"
                        if isinstance(r.get("ratio_peer_over_ours"), float) else ""))
    return rows


def adapt_association(data):
    goals = _get(data, "goal_results", default=[])
    rows = []
    for config in _get(data, "configurations", default=[]):
        n, dim = config.get("num_features"), config.get("dim")
        met = next((g.get("met") for g in goals if g.get("num_features") == n
                    and g.get("dim") == dim and g.get("measured")), None)
        for r in config.get("rows", []):
            if r.get("kind") == "peer" and r.get("method") == "infer_discrete":
                continue
            note = r.get("error") or r.get("note") or ""
            gap = r.get("gap")
            if isinstance(gap, float):
                note = f"gap {100 * gap:+.3f}%" + (f"; {note}" if note else "")
            rows.append(row("association", r.get("method"), "infer_discrete (core)",
                            f"n={n}, dim={dim}, N={config.get('num_examples')}",
                            _get(r, "core", "median_us"), "us/example",
                            r.get("speedup_vs_infer_discrete"), _memory(r), met, note))
    return rows


def adapt_association_choice(data):
    """One row per configuration: tabu, with BR+MF as the peer (no goal: a measurement)."""
    rows = []
    for r in _get(data, "rows", default=[]):
        tabu, brmf = _get(r, "methods", "tabu", default={}), _get(r, "methods", "br+mf",
                                                                   default={})
        ours, peer = tabu.get("us_per_example"), brmf.get("us_per_example")
        ratio = peer / ours if isinstance(ours, float) and isinstance(peer, float) and ours \
            else None
        note = "; ".join(f"{name} gap {m['gap_percent']:.3f}%, {m['above_percent']:.2f}% above "
                         f"the reference" for name, m in (("tabu", tabu), ("br+mf", brmf))
                         if isinstance(m.get("gap_percent"), float)
                         and isinstance(m.get("above_percent"), float))
        rows.append(row("association_choice", "tabu", "br+mf",
                        f"n={r.get('num_features')}, dim={r.get('dim')}, "
                        f"F mean {r.get('feature_mean')}", ours, "us/example", ratio, None,
                        None, note))
    return rows


def adapt_gvq_learning(data):
    goals = _get(data, "goal_result", default=[])
    rows = []
    for result in _get(data, "results", default=[]):
        n, problem = result.get("num_features"), result.get("problem")
        for r in result.get("rows", []):
            learner = r.get("learner", "")
            if not learner.startswith("EM"):
                continue
            met = next((g.get("met") for g in goals if g.get("num_features") == n
                        and g.get("problem") == problem and g.get("learner") == learner), None)
            ratio = r.get("speedup_over_svi")
            if ratio is None and r.get("speedup_lower_bound") is not None:
                ratio = f">{r['speedup_lower_bound']:.3g}"
            rows.append(row("gvq_learning", learner, "SVI", f"n={n}, dim={r.get('dim')}, "
                            f"{problem}", _get(r, "timing", "median_s"), "s", ratio, _memory(r),
                            met, "" if r.get("reached", True) else "does not reach the target"))
    return rows


def adapt_clipped(data):
    goals = {g.get("part"): g for g in _get(data, "goal_result", default=[])}
    ours = _get(data, "learning", "ours", default={})
    size = "N={}, P={}".format(_get(data, "config", "num_units"), _get(data, "config",
                                                                        "num_hidden"))
    rows = []
    for index, target in enumerate(_get(data, "learning", "targets", default=[])):
        reached = target.get("reached")
        rows.append(row("clipped", "arcsine fit", f"SVI to {target.get('target_name')}", size,
                        _get(ours, "timing", "median_s"), "s",
                        target.get("ratio") if reached else None, _memory(ours),
                        _get(goals, "a", "met") if index == 0 else None,
                        "" if reached else "SVI never reaches the target"))
    solve = _get(data, "solve", default={})
    if solve:
        rows.append(row("clipped", "solve_pair_correlations", None,
                        f"N={solve.get('num_units')}", _get(solve, "public", "median_s"), "s",
                        None, _memory(solve), _get(goals, "b", "met"),
                        f"goal < {_get(goals, 'b', 'required_s')} s"))
    return rows


def adapt_mcvq(data):
    rows = []
    size = _get(data, "race", "size", default={})
    text = ", ".join(f"{k}={v}" for k, v in size.items())
    for pair in _get(data, "race", "pairs", default=[]):
        ratio = pair.get("ratio")
        if ratio is None and pair.get("ratio_lower_bound") is not None:
            ratio = f">{pair['ratio_lower_bound']:.3g}"
        rows.append(row("mcvq", f"EM {pair.get('ours')}", pair.get("peer"), text,
                        _get(pair, "ours_s", "median"), "s", ratio, _memory(pair),
                        pair.get("goal_met"), f"on {pair.get('scale')}"))
    for r in _get(data, "scaling", "rows", default=[]):
        rows.append(row("mcvq", "EM iteration (jitted)", None,
                        f"N={r.get('N')}, D={r.get('D')}, K={r.get('K')}, J={r.get('J')}",
                        r.get("step_s"), "s", None, _memory(r), None,
                        f"{r['ns_per_unit']:.3g} ns per N D K J"
                        if isinstance(r.get("ns_per_unit"), float) else ""))
    return rows


def adapt_mixture(data):
    config = _get(data, "config", default={})
    size = (f"N={config.get('num_examples')}, k={config.get('num_components')}, "
            f"d={config.get('dim')}")
    return [row("mixture", f"{r.get('case')} {r.get('dtype')}", r.get("peer"), size,
                _get(r, "ours", "median_s"), "s", r.get("ratio"), _memory(r), r.get("met"),
                "" if r.get("available", True) else "peer not available")
            for r in _get(data, "rows", default=[])]


def adapt_model_selection(data):
    return [row("model_selection", "VB over-complete (best of restarts)", "CV grid",
                f"{r.get('data')} {tuple(r.get('shape', ()))}", _get(r, "vb_best_s", "median"),
                "s", r.get("ratio"), _memory(r), r.get("goal_met"),
                f"one VB run {r['ratio_one_run']:.2f}x"
                if isinstance(r.get("ratio_one_run"), float) else "")
            for r in _get(data, "rows", default=[])]


def adapt_compilation_cache(data):
    """One row per case: the warm first call (cache filled by an earlier process), with
    the cold one (empty cache) as the peer; ratio = cold / warm."""
    rows = []
    for r in _get(data, "rows", default=[]):
        cold, warm = _get(r, "cold", "median_s"), _get(r, "warm", "median_s")
        off = _get(r, "off", "median_s")
        ratio = cold / warm if isinstance(cold, float) and isinstance(warm, float) and warm \
            else None
        note = f"cold {cold:.2f} s" if isinstance(cold, float) else ""
        if isinstance(off, float):
            note += f"{'; ' if note else ''}no cache {off:.2f} s"
        if isinstance(r.get("entries"), int):
            note += f"{'; ' if note else ''}{r['entries']} entries"
        rows.append(row("compilation_cache", f"{r.get('case')} warm cache", "cold cache",
                        r.get("size"), warm, "s", ratio, None, None, note))
    return rows


def adapt_generic_em(data):
    """One row per comparison: fit_em against fit_mixture on the mixture program (ratio
    fit_mixture / fit_em, below 1 where the generic path is slower) and against SVI to the
    same log-likelihood (ratio SVI / fit_em; ">" where SVI never reaches it)."""
    rows = []
    for r in _get(data, "rows", default=[]):
        method = r.get("method")
        if r.get("part") == "svi":
            method = f"{method} on {r.get('program')}"
        elif r.get("case"):
            method = f"{method} ({r['case']})"
        rows.append(row("generic_em", method, r.get("peer"), r.get("size"),
                        _get(r, "ours", "median_s"), "s", r.get("ratio"), None, r.get("met"),
                        r.get("note") or ""))
    return rows


_TIME_KEYS = ("median_s", "time_s", "seconds", "time", "median", "ours", "sharded", "fit",
              "em_pass_s")
_RATIO_KEYS = ("ratio", "speedup", "ratio_core", "speedup_over_peer")


def _first(entry, keys):
    for key in keys:
        value = entry.get(key)
        if isinstance(value, dict):
            value = value.get("median_s", value.get("median"))
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def adapt_generic(data, name="?"):
    """Rows from a list of dicts under ``rows``, ``results`` or ``configurations``."""
    entries = next((data[k] for k in ("rows", "results", "configurations")
                    if isinstance(data, dict) and isinstance(data.get(k), list)), None)
    if not entries or not all(isinstance(e, dict) for e in entries):
        return [row(name, note="unknown JSON layout: no list of rows found")]
    out = []
    for e in entries:
        size = e.get("size") or ", ".join(f"{k}={e[k]}" for k in (
            "num_examples", "num_features", "dim", "devices", "num_devices", "N")
            if k in e) or None
        met = e.get("goal_met", e.get("met"))
        method = next((e[k] for k in ("method", "learner", "name", "case", "side", "mode")
                       if e.get(k)), None)
        out.append(row(name, method, e.get("peer"), size, _first(e, _TIME_KEYS), "s",
                       _first(e, _RATIO_KEYS), _memory(e),
                       met if isinstance(met, bool) else None, "generic adapter"))
    return out


#: Script name -> adapter(data) -> list of rows.
ADAPTERS = {"association_exact": adapt_association_exact, "association": adapt_association,
            "association_choice": adapt_association_choice,
            "gvq_learning": adapt_gvq_learning, "clipped": adapt_clipped, "mcvq": adapt_mcvq,
            "mixture": adapt_mixture, "model_selection": adapt_model_selection,
            "compilation_cache": adapt_compilation_cache, "generic_em": adapt_generic_em}


def adapt(name, data) -> list[dict]:
    """Rows of one script's JSON; never raises on an unexpected layout."""
    adapter = ADAPTERS.get(name)
    try:
        rows = adapter(data) if adapter is not None else adapt_generic(data, name)
    except Exception as error:  # a layout the adapter did not foresee
        rows = [row(name, note=f"could not read the JSON ({type(error).__name__}: {error})")]
    if not rows and adapter is not None:
        rows = adapt_generic(data, name)
    return rows


# -- running ---------------------------------------------------------------------------------

def scripts(folder=HERE) -> list[str]:
    """Benchmark script names in ``folder`` (every ``*.py`` but this one and private ones)."""
    return sorted(p.stem for p in Path(folder).glob("*.py")
                  if p.name != Path(__file__).name and not p.name.startswith("_"))


def run_script(name, *, quick, results_dir, timeout=None, folder=HERE) -> dict:
    """Run one script as a subprocess; returns its status, wall time and rows."""
    output = Path(results_dir) / f"{name}.json"
    command = [sys.executable, str(Path(folder) / f"{name}.py"), *(["--quick"] if quick else []),
               "--output", str(output)]
    log = Path(results_dir) / f"{name}.log"
    start = time.perf_counter()
    status = {"benchmark": name, "command": " ".join(command[1:]), "log": str(log)}
    with open(log, "w") as handle:
        try:
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
            status["returncode"] = done.returncode
        except subprocess.TimeoutExpired:
            status["returncode"] = None
            status["error"] = f"timed out after {timeout:g} s"
    status["seconds"] = time.perf_counter() - start
    if status.get("returncode") not in (0, None):
        status["error"] = f"exit status {status['returncode']}"
    return status


def collect(name, results_dir) -> list[dict]:
    """The rows of ``results_dir/NAME.json``, or one row saying why there are none."""
    path = Path(results_dir) / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return [row(name, note=f"no results: {path} missing")]
    except json.JSONDecodeError as error:
        return [row(name, note=f"unreadable JSON {path}: {error}")]
    return adapt(name, data)


def _fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "MET" if value else "NOT met"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def format_table(rows) -> str:
    """The common table as text."""
    header = ["benchmark", "method", "peer", "size", "time", "ratio", "memory", "goal", "note"]
    body = [[_fmt(r["benchmark"]), _fmt(r["method"]), _fmt(r["peer"]), _fmt(r["size"]),
             "-" if r["time"] is None else f"{_fmt(r['time'])} {r['unit']}", _fmt(r["ratio"]),
             _fmt(r["memory_peak"]), _fmt(r["goal_met"]), r["note"] or ""] for r in rows]
    widths = [min(40, max(len(h), *(len(b[i]) for b in body))) if body else len(h)
              for i, h in enumerate(header)]
    lines = [" ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("-" * len(lines[0]))
    lines += [" ".join(c[:w].ljust(w) if i < len(header) - 1 else c
                       for i, (c, w) in enumerate(zip(b, widths, strict=True))).rstrip()
              for b in body]
    return "\n".join(lines)


def machine() -> dict:
    """The machine: Python, platform, CPUs, load, and JAX's backend and devices if importable."""
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    try:
        import jax

        info.update(jax=jax.__version__, backend=jax.default_backend(),
                    devices=[str(d) for d in jax.devices()])
    except Exception as error:  # the table is still useful without JAX's description
        info["jax"] = f"unavailable ({error})"
    return info


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick to every script (smaller sizes, fewer repeats)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these scripts (names without .py)")
    parser.add_argument("--collect-only", action="store_true",
                        help="run nothing: tabulate the JSON already in --results-dir")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS,
                        help="where each script writes NAME.json and NAME.log "
                             "(default benchmarks/results)")
    parser.add_argument("--output", type=Path, default=None,
                        help="the combined JSON (default RESULTS_DIR/all.json)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds after which one script is stopped (default: none)")
    args = parser.parse_args(argv)
    available = scripts()
    if args.only:
        unknown = [n for n in args.only if n not in available]
        if unknown:
            parser.error(f"--only: unknown benchmark(s) {unknown}; choose from {available}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive; got {args.timeout}")
    return args


def main(argv=None) -> dict:
    """Run (or collect) the benchmarks, print the table, write the combined JSON."""
    args = parse_args(argv)
    names = args.only or scripts()
    if args.list:
        for name in names:
            print(f"{name:20s} {'own adapter' if name in ADAPTERS else 'generic adapter'}")
        return {}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    statuses, rows = [], []
    for index, name in enumerate(names, 1):
        if not args.collect_only:
            print(f"[{index}/{len(names)}] {name} ...", flush=True)
            status = run_script(name, quick=args.quick, results_dir=args.results_dir,
                                timeout=args.timeout)
            statuses.append(status)
            print(f"[{index}/{len(names)}] {name}: {status['seconds']:.0f} s"
                  + (f", {status['error']} (log {status['log']})" if "error" in status else ""),
                  flush=True)
            if "error" in status:
                rows.append(row(name, note=f"run failed: {status['error']}"))
                continue
        rows += collect(name, args.results_dir)
    print()
    print(format_table(rows))
    output = args.output or args.results_dir / "all.json"
    record = {"machine": machine(), "quick": args.quick, "collect_only": args.collect_only,
              "runs": statuses, "columns": list(COLUMNS), "rows": rows}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"\nwrote {output}")
    return record


if __name__ == "__main__":
    main()
