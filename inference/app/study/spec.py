"""A study as data: its models, data sources and settings, from a TOML file or Python.

A *study* is a grid of independent model-selection rows: for every model entry, every
level of its data source and every seed, one call of
:func:`inference.model_selection` (or of a user's scoring function) whose result is one
row. :class:`Study` holds the description; :func:`load_study` reads it from a TOML file
(Python's ``tomllib``) and checks every entry, naming the entry in its errors; the
rows themselves, each with the SHA-256 key of everything that determines it, come from
:func:`inference.app.study.plan.plan_rows`.

The TOML layout (paths of data files, programs and generator files are relative to the
study file's folder)::

    name = "quick"
    output_dir = "zoo-study-quick"          # optional; relative to the working folder

    [settings]                              # model_selection's settings for every model
    folds = 3                               # (a model's own [models.settings] wins)
    restarts = 2

    [data.blobs]                            # a generator: levels x seeds
    generator = "ppl_models.mixture:generate"   # module:function or path/file.py:function
    args = { num_components = 3, dim = 2 }  # keyword arguments shared by the levels
    field = "x"                             # the data matrix: this attribute of the result
    standardise = true                      # zero mean, unit overall variance
    seeds = 3                               # seeds 0, 1, 2 (or a list of seeds)
    [data.blobs.levels]
    separated = { num_examples = 300, separation = 8.0 }

    [data.iris]                             # data files: one level per file
    files = ["iris.csv"]                    # .csv (header row optional) or .npy

    [[models]]
    family = "mixture"                      # a registry family, or
    # program = "my_scores.py:score"        # a user's scoring function
    data = "blobs"
    planted = 3                             # optional: the size the data were drawn with
    candidates = [1, 2, 3, 4, 5]
    criteria = ["train", "bic", "aic"]
    options = { prior_scale = 2.0 }         # the family's options (model_selection options=)

    [cluster]                               # optional defaults of `ppl-zoo study run`
    workers = 2
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from inference.app.study.sources import is_file, load_function, read_matrix, resolve, split_function

__all__ = ["SETTINGS", "FilesSource", "GeneratorSource", "ModelEntry", "Study", "StudyError",
           "load_study", "study_from_dict"]


class StudyError(ValueError):
    """A study file or description that cannot be run; the message names the entry."""


#: The settings a study may set and their defaults (those of ``model_selection``).
SETTINGS = {"folds": 5, "restarts": 3, "num_warmup": 500, "num_samples": 500,
            "evidence": {}, "evidence_max_size": 1 << 18, "loo_max_size": 1 << 19}
#: The keys of ``[cluster]``.
CLUSTER_KEYS = ("scheduler", "workers", "threads_per_worker", "jax_platforms",
                "single_thread", "retries")


@dataclass(frozen=True)
class GeneratorSource:
    """Data drawn by a generator: ``generator(key, **args, **levels[level])``, one data
    set per level and seed (the matrix is the result's attribute ``field``, or the
    result itself when ``field`` is None)."""

    generator: str
    levels: dict
    seeds: tuple = (0,)
    args: dict = field(default_factory=dict)
    field: str | None = "x"
    standardise: bool = False


@dataclass(frozen=True)
class FilesSource:
    """Data read from files (``.csv`` or ``.npy``): one level per file, named ``levels``
    (default: the files' stems); each seed is one row of every model on the file."""

    files: tuple
    seeds: tuple = (0,)
    levels: tuple | None = None
    standardise: bool = False

    @property
    def level_names(self) -> tuple:
        return self.levels or tuple(Path(f).stem for f in self.files)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the study: a registry ``family`` or a user ``program``
    (``path/to/file.py:function``) scored on the data source named ``data``."""

    data: str
    family: str | None = None
    program: str | None = None
    name: str | None = None
    planted: object = None
    candidates: tuple | None = None
    criteria: tuple | None = None
    options: dict = field(default_factory=dict)
    fit_options: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.family:
            return self.family
        return str(self.program).rpartition(":")[2]


@dataclass(frozen=True)
class Study:
    """A study: model entries, named data sources and settings (see the module's notes).

    ``base_dir`` is the folder that relative paths of data files, programs and
    generator files start from (a study file's own folder); ``output_dir`` is where
    its rows are kept unless the caller names another folder.
    """

    models: tuple
    data: dict
    name: str = "study"
    settings: dict = field(default_factory=dict)
    output_dir: str | None = None
    base_dir: str = "."
    cluster: dict = field(default_factory=dict)
    source: str | None = None

    def __post_init__(self):
        check_study(self)

    def default_output_dir(self) -> Path:
        return Path(self.output_dir or f"zoo-study-{self.name}")

    def replace(self, **changes) -> Study:
        """A copy with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)


def _where(study: Study, index: int, entry: ModelEntry) -> str:
    origin = f"{study.source}: " if study.source else ""
    what = entry.family or entry.program
    return f"{origin}[[models]] entry {index + 1} ({what!r})"


def _source_where(study: Study, name: str) -> str:
    return f"{study.source + ': ' if study.source else ''}[data.{name}]"


def _seeds(value, where):
    if isinstance(value, bool):
        raise StudyError(f"{where}: seeds must be a count or a list of integers; got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise StudyError(f"{where}: seeds must be at least 1; got {value}")
        return tuple(range(value))
    if isinstance(value, list | tuple) and value and all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        if len(set(value)) != len(value):
            raise StudyError(f"{where}: seeds repeat: {list(value)}")
        return tuple(value)
    raise StudyError(f"{where}: seeds must be a count or a non-empty list of non-negative "
                     f"integers; got {value!r}")


def _check_settings(settings, where):
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise StudyError(f"{where}: unknown setting(s) {unknown}; a study sets "
                         f"{list(SETTINGS)}")
    for name, value in settings.items():
        if name == "evidence":
            if not isinstance(value, dict):
                raise StudyError(f"{where}: evidence must be a table of log_evidence options "
                                 f"(num_particles, num_repeats, ...); got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StudyError(f"{where}: {name} must be a positive integer; got {value!r}")


def check_study(study: Study) -> None:
    """Check a study's entries without computing anything (raises :class:`StudyError`)."""
    from inference.app.selection import selectable_families

    if not isinstance(study.data, dict) or not study.data:
        raise StudyError(f"{study.source or 'study'}: no data source ([data.NAME] tables)")
    if not study.models:
        raise StudyError(f"{study.source or 'study'}: no model ([[models]] entries)")
    _check_settings(study.settings, f"{study.source + ': ' if study.source else ''}[settings]")
    unknown = sorted(set(study.cluster) - set(CLUSTER_KEYS))
    if unknown:
        raise StudyError(f"{study.source + ': ' if study.source else ''}[cluster]: unknown "
                         f"key(s) {unknown}; it takes {list(CLUSTER_KEYS)}")
    for name, source in study.data.items():
        check_source(source, study.base_dir, _source_where(study, name))
    families = selectable_families()
    labels = {}
    for index, entry in enumerate(study.models):
        where = _where(study, index, entry)
        if (entry.family is None) == (entry.program is None):
            raise StudyError(f"{where}: give either family = \"NAME\" (one of "
                             f"{sorted(families)}) or program = \"path/file.py:function\"")
        if entry.data not in study.data:
            raise StudyError(f"{where}: data = {entry.data!r} names no data source; the study "
                             f"has {sorted(study.data)}")
        _check_settings(entry.settings, f"{where}: settings")
        if entry.label in labels:
            raise StudyError(f"{where}: another entry is named {entry.label!r} (entry "
                             f"{labels[entry.label] + 1}); give each a distinct name = ...")
        labels[entry.label] = index
        if entry.program is not None:
            check_program(entry.program, study.base_dir, where)
            continue
        if entry.family not in families:
            raise StudyError(f"{where}: unknown family {entry.family!r}; the families whose "
                             f"size can be selected are {sorted(families)}")
        spec = families[entry.family]
        if entry.criteria is not None:
            wrong = [c for c in entry.criteria if c not in spec.criteria]
            if wrong or not entry.criteria or len(set(entry.criteria)) != len(entry.criteria):
                raise StudyError(f"{where}: criteria {list(entry.criteria)}: "
                                 + (f"{wrong} not among " if wrong else "need distinct names "
                                    "among ") + f"the family's {list(spec.criteria)}")
        options = set(entry.options) - set(spec.options)
        if options:
            raise StudyError(f"{where}: options {sorted(options)} are not options of family "
                             f"{entry.family!r} (it takes {list(spec.options)})")


def check_program(spec: str, base_dir, where: str) -> None:
    """A user program names a readable file and a function in it."""
    try:
        target, _ = split_function(spec, f"{where}: program")
        if not is_file(target):
            raise ValueError(f"{where}: program = {spec!r} must name a file: "
                             "path/to/file.py:function")
        load_function(spec, base_dir, f"{where}: program")
    except ValueError as error:
        raise StudyError(str(error)) from None


def check_source(source, base_dir, where: str) -> None:
    """A data source's files are readable data matrices, or its generator imports."""
    try:
        if isinstance(source, FilesSource):
            names = source.level_names
            if len(set(names)) != len(names):
                raise ValueError(f"{where}: two files have the same level name {list(names)}; "
                                 "name them: files = { name = \"path\", ... }")
            for i, file in enumerate(source.files):
                read_matrix(resolve(file, base_dir), f"{where} files[{i}]")
        elif isinstance(source, GeneratorSource):
            load_function(source.generator, base_dir, f"{where} generator")
        else:
            raise ValueError(f"{where}: a data source is a GeneratorSource or a FilesSource; "
                             f"got {type(source).__name__}")
    except ValueError as error:
        raise StudyError(str(error)) from None


def _candidates(value, where):
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value:
        raise StudyError(f"{where}: candidates must be a non-empty list (integers, or [K, J] "
                         f"pairs); got {value!r}")
    out = []
    for c in value:
        if isinstance(c, list | tuple):
            c = tuple(c)
        if not (isinstance(c, int) and not isinstance(c, bool)) and not (
                isinstance(c, tuple) and all(isinstance(v, int) for v in c)):
            raise StudyError(f"{where}: candidate {c!r} is neither an integer nor a list of "
                             "integers")
        out.append(c)
    return tuple(out)


def _table(data, key, where, kind=dict):
    value = data.get(key, kind())
    if not isinstance(value, kind):
        raise StudyError(f"{where}: {key} must be a {'table' if kind is dict else 'list'}; "
                         f"got {value!r}")
    return value


def _source_from_dict(name, data, where):
    data = dict(data)
    if ("generator" in data) == ("files" in data):
        raise StudyError(f"{where}: give either generator = \"module:function\" (with levels) "
                         "or files = [...]")
    seeds = _seeds(data.pop("seeds", 1), where)
    standardise = data.pop("standardise", False)
    if not isinstance(standardise, bool):
        raise StudyError(f"{where}: standardise must be true or false; got {standardise!r}")
    if "files" in data:
        files = data.pop("files")
        levels = None
        if isinstance(files, dict):
            levels, files = tuple(files), tuple(files.values())
        if isinstance(files, str):
            files = (files,)
        if not files or not all(isinstance(f, str) for f in files):
            raise StudyError(f"{where}: files must be a list of paths or a table name = path; "
                             f"got {files!r}")
        if data:
            raise StudyError(f"{where}: unknown key(s) {sorted(data)} of a files source "
                             "(files, seeds, standardise)")
        return FilesSource(tuple(files), seeds, levels, standardise)
    generator = data.pop("generator")
    levels = _table(data, "levels", where)
    data.pop("levels", None)
    args = _table(data, "args", where)
    data.pop("args", None)
    field_name = data.pop("field", "x")
    if data:
        raise StudyError(f"{where}: unknown key(s) {sorted(data)} of a generator source "
                         "(generator, levels, args, field, seeds, standardise)")
    if not levels or not all(isinstance(v, dict) for v in levels.values()):
        raise StudyError(f"{where}: levels must be a table of level = {{ keyword = value }} "
                         "tables (one level at least)")
    return GeneratorSource(generator, dict(levels), seeds, dict(args), field_name or None,
                           standardise)


_MODEL_KEYS = {f.name for f in dataclasses.fields(ModelEntry)}


def _model_from_dict(index, data, source):
    where = f"{source + ': ' if source else ''}[[models]] entry {index + 1}"
    if not isinstance(data, dict):
        raise StudyError(f"{where}: must be a table; got {data!r}")
    unknown = sorted(set(data) - _MODEL_KEYS)
    if unknown:
        raise StudyError(f"{where}: unknown key(s) {unknown}; an entry takes "
                         f"{sorted(_MODEL_KEYS)}")
    if "data" not in data:
        raise StudyError(f"{where}: no data = \"NAME\" (the data source it is scored on)")
    values = dict(data)
    values["candidates"] = _candidates(data.get("candidates"), where)
    if data.get("criteria") is not None:
        criteria = data["criteria"]
        if isinstance(criteria, str):
            criteria = [criteria]
        values["criteria"] = tuple(criteria)
    planted = data.get("planted")
    values["planted"] = tuple(planted) if isinstance(planted, list) else planted
    for key in ("options", "fit_options", "settings"):
        values[key] = dict(_table(data, key, where))
    return ModelEntry(**values)


def study_from_dict(data: dict, *, base_dir=".", source: str | None = None) -> Study:
    """A :class:`Study` from the tables of a study file (``tomllib.load``'s result)."""
    origin = f"{source}: " if source else ""
    unknown = sorted(set(data) - {"name", "description", "output_dir", "settings", "data",
                                  "models", "cluster"})
    if unknown:
        raise StudyError(f"{origin}unknown top-level key(s) {unknown}; a study file has name, "
                         "description, output_dir, [settings], [data.NAME], [[models]], "
                         "[cluster]")
    sources = _table(data, "data", f"{origin}[data]")
    models = _table(data, "models", f"{origin}[[models]]", list)
    return Study(
        models=tuple(_model_from_dict(i, m, source) for i, m in enumerate(models)),
        data={name: _source_from_dict(name, s, f"{origin}[data.{name}]") if isinstance(s, dict)
              else _bad_source(name, s, origin) for name, s in sources.items()},
        name=str(data.get("name", Path(source).stem if source else "study")),
        settings=dict(_table(data, "settings", f"{origin}[settings]")),
        output_dir=data.get("output_dir"), base_dir=str(base_dir),
        cluster=dict(_table(data, "cluster", f"{origin}[cluster]")), source=source)


def _bad_source(name, value, origin):
    raise StudyError(f"{origin}[data.{name}] must be a table; got {value!r}")


def load_study(path) -> Study:
    """Read and check a study file (TOML); relative paths in it start from its folder.

    Raises
    ------
    StudyError
        The file is missing or not TOML, or an entry is wrong (unknown family,
        criterion or option; a missing data file or program; ...): the message names
        the entry.
    """
    path = Path(path)
    try:
        text = path.read_bytes()
    except OSError as error:
        raise StudyError(f"cannot read the study file {str(path)!r}: {error.strerror}") from None
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise StudyError(f"{path}: not a valid TOML file ({error})") from None
    return study_from_dict(data, base_dir=path.resolve().parent, source=str(path))
