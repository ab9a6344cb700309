"""A study's rows: one per model entry, level of its data source and seed, each keyed.

A row's *recipe* holds everything that determines its numbers: the family (with the
package's version) or the user program (its file's SHA-256), the data source (the
generator, its own file's SHA-256, its arguments and the level's, or the data file's
SHA-256), the seed, the candidates, the criteria, the family's options and fit options,
and those settings that the criteria read (the folds only for ``cv``, the NUTS
iterations only for ``loo`` and ``waic``, the SMC settings only for ``evidence``). Its
key is the SHA-256 of the recipe's canonical JSON: a changed setting gives new keys to
the rows it affects and to no other.

A row's random key is derived as in the selection study: from the seed, folded with
the level's position in its source and with the family's (or function's) name, then
split into the key of the data and the key of the selection.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from inference.app.study.sources import file_sha256, load_function, resolve
from inference.app.study.spec import SETTINGS, FilesSource, ModelEntry, Study
from inference.engine.reporting import jsonable

__all__ = ["RowSpec", "plan_rows", "recipe_key", "resolved_settings"]


def recipe_key(recipe: dict) -> str:
    """The SHA-256 (hex) of a recipe's canonical JSON."""
    text = json.dumps(jsonable(recipe), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RowSpec:
    """One row to compute: what the worker needs, its recipe and its key."""

    key: str
    model: str
    source: str
    level: str
    level_index: int
    seed: int
    salt: str
    family: str | None
    program: str | None
    data: dict
    candidates: tuple | None
    criteria: tuple | None
    options: dict
    fit_options: dict
    settings: dict
    planted: object
    base_dir: str
    recipe: dict = field(repr=False)

    @property
    def label(self) -> str:
        """``model level seed N``: how reports and errors name the row."""
        return f"{self.model} {self.level} seed {self.seed}"


def resolved_settings(study: Study, entry: ModelEntry, criteria) -> dict:
    """The settings of one model entry (defaults, the study's, the entry's), keeping those
    its criteria read; ``criteria`` None (a user program) keeps none."""
    from inference.app.selection import EVIDENCE_OPTIONS

    merged = {**SETTINGS, **study.settings, **entry.settings}
    merged["evidence"] = {**EVIDENCE_OPTIONS, **dict(merged["evidence"])}
    if criteria is None:
        return {}
    criteria = set(criteria)
    keep = {"restarts"}
    if "cv" in criteria:
        keep.add("folds")
    if criteria & {"loo", "waic"}:
        keep |= {"num_warmup", "num_samples", "loo_max_size"}
    if "evidence" in criteria:
        keep |= {"evidence", "evidence_max_size"}
    return {k: v for k, v in merged.items() if k in keep}


def _version() -> str:
    from ppl_models import __version__

    return __version__


def _model_identity(study: Study, entry: ModelEntry):
    """(identity for the recipe, the name folded into the row's random key, criteria)."""
    if entry.family is not None:
        from inference.app.selection import selectable_families

        spec = selectable_families()[entry.family]
        criteria = tuple(entry.criteria) if entry.criteria is not None else \
            tuple(spec.default_criteria)
        return {"family": entry.family}, entry.family, criteria
    _, identity = load_function(entry.program, study.base_dir, "program")
    return {"program": identity}, identity["function"], \
        (tuple(entry.criteria) if entry.criteria is not None else None)


def _source_levels(study: Study, name: str):
    """[(level, its data description for the worker, its identity for the recipe)]."""
    source = study.data[name]
    out = []
    if isinstance(source, FilesSource):
        for i, (level, file) in enumerate(zip(source.level_names, source.files, strict=True)):
            path = resolve(file, study.base_dir)
            data = {"kind": "file", "path": str(path.resolve()),
                    "where": f"[data.{name}] files[{i}]", "standardise": source.standardise}
            identity = {"file": path.name, "sha256": file_sha256(path), "level": level,
                        "level_index": i, "standardise": source.standardise}
            out.append((level, data, identity))
        return out, source.seeds
    _, generator = load_function(source.generator, study.base_dir, f"[data.{name}] generator")
    for i, (level, args) in enumerate(source.levels.items()):
        data = {"kind": "generator", "generator": source.generator, "args": dict(source.args),
                "level_args": dict(args), "field": source.field,
                "standardise": source.standardise, "where": f"[data.{name}] level {level!r}"}
        identity = {"generator": generator, "args": source.args, "level": level,
                    "level_args": args, "level_index": i, "field": source.field,
                    "standardise": source.standardise}
        out.append((level, data, identity))
    return out, source.seeds


def plan_rows(study: Study) -> list[RowSpec]:
    """Every row of a study, in the study's order (models, then levels, then seeds)."""
    rows, version = [], _version()
    levels_of = {name: _source_levels(study, name) for name in study.data}
    for entry in study.models:
        identity, salt, criteria = _model_identity(study, entry)
        settings = resolved_settings(study, entry, criteria if entry.family else None)
        levels, seeds = levels_of[entry.data]
        for index, (level, data, data_identity) in enumerate(levels):
            for seed in seeds:
                recipe = {"version": version, "model": identity, "data": data_identity,
                          "seed": seed, "candidates": entry.candidates, "criteria": criteria,
                          "options": entry.options, "fit_options": entry.fit_options,
                          "settings": settings}
                rows.append(RowSpec(
                    key=recipe_key(recipe), model=entry.label, source=entry.data, level=level,
                    level_index=index, seed=seed, salt=salt, family=entry.family,
                    program=entry.program, data=data, candidates=entry.candidates,
                    criteria=criteria, options=dict(entry.options),
                    fit_options=dict(entry.fit_options), settings=settings,
                    planted=entry.planted, base_dir=str(study.base_dir),
                    recipe=jsonable(recipe)))
    return rows
