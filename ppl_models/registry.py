"""The zoo's one registry: every model program and every family's plug-in.

A model family is added to the zoo in two files of its own:

* its program, ``ppl_models/<name>.py``: the NumPyro program, its data generator and
  a :class:`ModelInfo` passed to :func:`register` (the program's sites, the contract
  tests' settings, and the name of the inference family that fits it);
* its plug-in, ``inference/<family>/plugin.py``: a :class:`Family` passed to
  :func:`register_family`, naming in one place its fits, result classes, NumPyro
  baselines, comparisons, bad-input cases and paper experiments.

Everything that lists models reads this module: saving and loading results
(:mod:`inference.engine.persistence`), ``ppl-zoo list`` / ``compare`` /
``reproduce``, the contract tests, the bad-input coverage test and the docs. The
model modules are listed once, in :data:`ppl_models.MODEL_MODULES`; importing
``inference`` imports the plug-in of every family that a registered model names.

This module imports nothing of the zoo, so that both packages can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["BadInput", "FAMILIES", "Family", "ModelInfo", "REGISTRY", "Selection", "register",
           "register_family"]


@dataclass(frozen=True)
class ModelInfo:
    """What a model program is, for tools that handle every model alike.

    Attributes
    ----------
    name : str
        Registry key, also the name used on the command line.
    model : callable
        The NumPyro program ``model(x=None, **kwargs)``.
    generate : callable
        Data generator ``generate(rng_key, ...)``.
    observed_site : str
        Name of the observed site (the data).
    latent_sites : mapping of str to str
        Latent site name -> shape and meaning.
    algorithms : tuple of str
        The inference that applies, each entry resolved as ``inference.<entry>``: a bare
        name is one of ``inference.__all__`` (``"fit_gvq"``), a dotted one a function of
        a family's module (``"clipped.fit.morph"``, ``"gvq.baselines.fit_gvq_svi"``). A
        test resolves every entry; the documentation links each to its API page.
    reference : str
        The paper and section the program restates, short form (authors and year from
        :data:`ppl_models.references.REFERENCES`, e.g. ``REFERENCES["gvq"].short``).
    family : str
        The inference family whose plug-in fits this program
        (``inference/<family>/plugin.py``); empty for a program without one.
    contract : mapping, optional
        Settings of the program contract tests: ``generate`` (keyword arguments of
        the generator for a tiny data set), ``data`` (what the generator returns ->
        the observed data), ``fixed`` (-> the program's keyword arguments that fix
        its parameters) and ``unobserved`` (-> keyword arguments for sampling
        without data).
    story : str, optional
        The generative story in LaTeX: the rows of an ``aligned`` environment (``&``
        before the relation, LaTeX's double backslash between rows), shown on the
        model's card in the documentation.
    deviations : tuple of str, optional
        Where the program knowingly departs from the paper (one sentence each), shown
        on the model's card beside the reproduction's findings.
    figure : str, optional
        The paper experiment (``ppl-zoo reproduce`` name) whose figure the model's card
        shows.
    """

    name: str
    model: Callable
    generate: Callable
    observed_site: str
    latent_sites: Mapping[str, str] = field(default_factory=dict)
    algorithms: tuple[str, ...] = ()
    reference: str = ""
    family: str = ""
    contract: Mapping[str, Any] | None = None
    story: str = ""
    deviations: tuple[str, ...] = ()
    figure: str = ""


class BadInput(NamedTuple):
    """One bad-input case: ``call()`` must raise ``error`` with a message matching
    ``pattern`` (a regular expression) that names ``argument``."""

    entry: str
    argument: str
    call: Callable
    error: type
    pattern: str


@dataclass(frozen=True)
class Selection:
    """How a family's size parameter is chosen by ``inference.model_selection``.

    Attributes
    ----------
    label : str
        The candidates' column header in tables (``"k"``, ``"(K, J)"``, ``"q"``).
    size : str
        What a candidate is, in words (``"number of components"``).
    criteria : tuple of str
        The criteria the family computes (names of ``inference.app.selection.CRITERIA``).
    default_criteria : tuple of str
        Those computed when the caller names none.
    scorer : callable
        ``scorer(x, *, num_restarts, fit_options, vb_options, **options)`` -> an
        :class:`inference.engine.selection.Scorer` that checks the data and fits and
        scores one candidate at a time.
    candidates : callable
        ``candidates(values, num, dim)`` -> the checked candidates as a tuple (the
        family's defaults when ``values`` is None); bad values raise errors naming
        ``candidates``.
    contains : callable, optional
        ``contains(candidates, size)`` -> the smallest candidate that contains a size
        surviving a pruning VB run (criterion ``"vb"``), or None.
    options : tuple of str
        Keyword arguments of ``model_selection`` that only this family takes (passed
        to ``scorer``).
    """

    label: str
    size: str
    criteria: tuple[str, ...]
    default_criteria: tuple[str, ...]
    scorer: Callable
    candidates: Callable
    contains: Callable | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    """A model family's plug-in: everything the zoo's tools need to know about it.

    Attributes
    ----------
    name : str
        The family's name (its subpackage ``inference/<name>``).
    paper : str
        Full citation of the paper the family restates.
    description : str
        One line: what the family is.
    fits : mapping of str to callable
        The public fits, association and selection functions (exported from
        ``inference`` under these names).
    results : tuple of type
        The result classes these return (they gain ``save``; ``inference.load``
        reads them back).
    baselines : mapping of str to callable
        NumPyro's generic inference on the family's programs (SVI, MCMC, ...).
    comparisons : mapping of str to callable
        ``ppl-zoo compare NAME``: ``fn(rng_key, *, quick, progress_bar, **settings)
        -> ComparisonResult``.
    experiments : tuple
        The paper's experiments that ``ppl-zoo reproduce`` runs
        (:class:`inference.engine.reporting.Experiment`).
    bad_inputs : callable, optional
        ``() -> sequence of BadInput``: the cases of the bad-input table for the
        family's entry points (built lazily: they may need small data).
    selection : Selection, optional
        How ``inference.model_selection`` and ``ppl-zoo select`` choose the family's
        size parameter; None for a family without one.
    """

    name: str
    paper: str
    description: str = ""
    fits: Mapping[str, Callable] = field(default_factory=dict)
    results: tuple[type, ...] = ()
    baselines: Mapping[str, Callable] = field(default_factory=dict)
    comparisons: Mapping[str, Callable] = field(default_factory=dict)
    experiments: tuple = ()
    bad_inputs: Callable[[], Any] | None = None
    selection: Selection | None = None

    @property
    def models(self) -> tuple[str, ...]:
        """The registered programs this family fits."""
        return tuple(name for name, info in REGISTRY.items() if info.family == self.name)


#: Model name -> :class:`ModelInfo`.
REGISTRY: dict[str, ModelInfo] = {}
#: Family name -> :class:`Family`.
FAMILIES: dict[str, Family] = {}


def register(info: ModelInfo) -> ModelInfo:
    """Add ``info`` to :data:`REGISTRY` under ``info.name`` and return it."""
    if not isinstance(info, ModelInfo):
        raise TypeError(f"register expects a ModelInfo; got {type(info).__name__}")
    REGISTRY[info.name] = info
    return info


def register_family(family: Family) -> Family:
    """Add ``family`` to :data:`FAMILIES` under ``family.name`` and return it.

    Names must be unique across families: a fit, baseline or comparison name that
    another family has already registered raises ``ValueError``.
    """
    if not isinstance(family, Family):
        raise TypeError(f"register_family expects a Family; got {type(family).__name__}")
    for other in FAMILIES.values():
        if other.name == family.name:
            continue
        for what in ("fits", "baselines", "comparisons"):
            clash = set(getattr(other, what)) & set(getattr(family, what))
            if clash:
                raise ValueError(f"family {family.name!r}: {what} {sorted(clash)} are already "
                                 f"registered by family {other.name!r}")
    FAMILIES[family.name] = family
    return family
