"""Files written by earlier versions: where their classes moved and how their fields were renamed.

A saved result names its class by module and class name and lists its fields
(:mod:`inference.engine.persistence`). When a class moves to another module
(:data:`MOVED_MODULES`, the split of the flat 0.1 package into subpackages) or a
result's fields are renamed (:func:`register_renamed_fields`, called by each family
for its own results), loading maps the old names to the new ones, so a file saved by
an earlier version still loads as the current class.
"""

from __future__ import annotations

__all__ = ["CONVERTERS", "MOVED_CLASSES", "MOVED_MODULES", "RENAMED_FIELDS", "moved_kind",
           "moved_module", "register_renamed_fields", "wrap_trace"]

#: Modules of the classes in files written by version 0.1 (one flat package), and where
#: those classes live now (``inference.<family>.<module>``). Loading maps the first to
#: the second, so a file saved by an earlier version still loads.
MOVED_MODULES = {
    "inference._jit": "inference.program.kwargs",
    "inference._progress": "inference.engine.progress",
    "inference._sweeps": "inference.association.sweeps",
    "inference.annealing": "inference.association.annealing",
    "inference.association": "inference.association.core",
    "inference.checkpoint": "inference.engine.checkpoint",
    "inference.cli": "inference.app.cli",
    "inference.clipped_baselines": "inference.clipped.baselines",
    "inference.clipped_gaussian": "inference.clipped.fit",
    "inference.compare": "inference.app.compare",
    "inference.compare_clipped": "inference.clipped.compare",
    "inference.compare_gvq": "inference.gvq.compare",
    "inference.compare_gvq_association": "inference.gvq.compare_association",
    "inference.compare_gvq_learning": "inference.gvq.compare_learning",
    "inference.compare_mcvq": "inference.mcvq.compare",
    "inference.compare_mixture": "inference.mixture.compare",
    "inference.description_length": "inference.gvq.description_length",
    "inference.directed": "inference.association.directed",
    "inference.energy": "inference.program.energy",
    "inference.gvq": "inference.gvq.em",
    "inference.gvq_constraints": "inference.gvq.constraints",
    "inference.handlers": "inference.program.handlers",
    "inference.mcvq": "inference.mcvq.em",
    "inference.mcvq_baselines": "inference.mcvq.baselines",
    "inference.message_passing": "inference.association.message_passing",
    "inference.mixture": "inference.mixture.em",
    "inference.mixture_baselines": "inference.mixture.baselines",
    "inference.mixture_online": "inference.mixture.online",
    "inference.mixture_selection": "inference.mixture.selection",
    "inference.mixture_sharded": "inference.mixture.em",
    "inference.model_selection": "inference.app.selection",
    "inference.model_selection_mcvq": "inference.mcvq.selection",
    "inference.numpyro_baselines": "inference.gvq.baselines",
    "inference.optimize": "inference.program.optimize",
    "inference.orthant": "inference.clipped.orthant",
    "inference.persistence": "inference.engine.persistence",
    "inference.reproduce": "inference.app.reproduce",
    "inference.reproduce_registry": "inference.app.experiments",
    "inference.sharding": "inference.engine.sharding",
    "inference.streaming": "inference.mixture.stream",
    "inference.vb_mcvq": "inference.mcvq.vb",
    "inference.vb_mcvq_moves": "inference.mcvq.vb_moves",
    "inference.vb_mixture": "inference.mixture.vb",
}


#: Result fields renamed since a file was written: class qualname -> {old: new}
#: (:func:`register_renamed_fields`); filled by the families for their own results.
RENAMED_FIELDS: dict[str, dict[str, str]] = {}
#: Optional converters of old field values: class qualname -> fn(fields dict) -> dict.
CONVERTERS: dict = {}


def register_renamed_fields(cls, renamed: dict, convert=None) -> None:
    """Let files saved before ``cls``'s fields were renamed load as the current ``cls``.

    ``renamed`` maps old field names to new ones; ``convert(fields) -> fields``
    (optional) then adjusts values (say, a trace padded past convergence cut at
    ``num_iterations``, or a bare array wrapped in a trace NamedTuple). Fields the
    old file lacks and the class has keep their NamedTuple defaults.
    """
    RENAMED_FIELDS[cls.__qualname__] = dict(renamed)
    if convert is not None:
        CONVERTERS[cls.__qualname__] = convert


def wrap_trace(trace_cls):
    """A ``convert`` for :func:`register_renamed_fields`: a ``trace`` field saved as a bare
    array of per-iteration objectives (an old ``loss_trace``) becomes ``trace_cls(array)``."""
    def convert(fields: dict) -> dict:
        trace = fields.get("trace")
        if trace is not None and not isinstance(trace, trace_cls):
            fields = dict(fields, trace=trace_cls(trace))
        return fields

    return convert


#: Classes that left the module their old module became: (0.1 module, class) -> module.
MOVED_CLASSES = {
    ("inference.streaming", "OnlineStreamResult"): "inference.mixture.online_stream",
    ("inference.vb_mcvq", "VBMCVQResult"): "inference.mcvq.vb_result",
    ("inference.mcvq.vb", "VBMCVQResult"): "inference.mcvq.vb_result",
    ("inference.mcvq_baselines", "MCVQSVIResult"): "inference.mcvq.baselines_svi",
    ("inference.mcvq.baselines", "MCVQSVIResult"): "inference.mcvq.baselines_svi",
    ("inference.mcvq_baselines", "MCVQScore"): "inference.mcvq.scoring",
    ("inference.mcvq.baselines", "MCVQScore"): "inference.mcvq.scoring",
}


def moved_module(module_name: str, class_name: str | None = None) -> str:
    """The module a saved class name refers to in this version (see :data:`MOVED_MODULES`
    and :data:`MOVED_CLASSES`)."""
    if (module_name, class_name) in MOVED_CLASSES:
        return MOVED_CLASSES[module_name, class_name]
    return MOVED_MODULES.get(module_name) or module_name


def moved_kind(kind: str) -> str:
    """A file's ``result:<module>.<class>`` kind with the module as it is now."""
    if not kind.startswith("result:"):
        return kind
    module_name, _, class_name = kind[len("result:"):].rpartition(".")
    return f"result:{moved_module(module_name, class_name)}.{class_name}"
