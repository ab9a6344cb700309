"""Model metadata and the registry every model module adds itself to.

A model module (``ppl_models/<name>.py``) defines a NumPyro program, its data
generators and a :class:`ModelInfo`, and calls :func:`register` at import. The
comparison layer (``inference.app.compare``) and the contract tests iterate over
:data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["ModelInfo", "REGISTRY", "register"]


@dataclass(frozen=True)
class ModelInfo:
    """What a model is, for tools that handle every model alike.

    Attributes
    ----------
    name : str
        Registry key, also the name used on the command line (``ppl-zoo compare NAME``).
    model : callable
        The NumPyro program ``model(x=None, **kwargs)``.
    generate : callable
        Data generator ``generate(rng_key, ...)``.
    observed_site : str
        Name of the observed site (the data).
    latent_sites : mapping of str to str
        Latent site name -> shape and meaning.
    algorithms : tuple of str
        Custom inference that applies (names of ``inference`` functions/methods).
    reference : str
        The paper and section the program restates.
    """

    name: str
    model: Callable
    generate: Callable
    observed_site: str
    latent_sites: Mapping[str, str] = field(default_factory=dict)
    algorithms: tuple[str, ...] = ()
    reference: str = ""


REGISTRY: dict[str, ModelInfo] = {}


def register(info: ModelInfo) -> ModelInfo:
    """Add ``info`` to :data:`REGISTRY` under ``info.name`` and return it."""
    if not isinstance(info, ModelInfo):
        raise TypeError(f"register expects a ModelInfo; got {type(info).__name__}")
    REGISTRY[info.name] = info
    return info
