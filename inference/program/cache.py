"""What a fit works out from a program's structure, kept per call signature.

Tracing a NumPyro program to find its sites, checking its energy and choosing how to
solve it costs several eager runs of the program, more than the compiled solve of a
small problem. :class:`SignatureCache` keeps that work per *signature*: the program,
its static arguments, the structure, shapes and dtypes of its array arguments and the
call's settings. Values are not part of it, so a caller keeping a plan must check it
again at every call's values (cheaply, inside its compiled call) and work it out
afresh where it no longer holds.
"""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["SignatureCache", "sites_key"]


def sites_key(sites):
    """A ``sites=`` argument (None, a name or a sequence of names) as a hashable value."""
    if sites is None or isinstance(sites, str):
        return sites
    return tuple(sites) if isinstance(sites, list | tuple) else sites


class SignatureCache:
    """A bounded, least-recently-used map from call signatures to kept plans."""

    def __init__(self, size: int = 64):
        self.size = size
        self._entries: OrderedDict = OrderedDict()

    @staticmethod
    def signature(model, arrays, static, settings):
        """The key of a call: ``arrays`` a pytree of the traced arguments (by structure,
        shape and dtype), ``static`` and ``settings`` hashable values. None when some
        part cannot be hashed (the call is then planned afresh every time)."""
        leaves, treedef = jax.tree.flatten(arrays)
        shapes = tuple((np.shape(leaf), jnp.result_type(leaf)) for leaf in leaves)
        key = (model, static, treedef, shapes, settings)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get(self, key):
        return None if key is None else self._entries.get(key)

    def put(self, key, value) -> None:
        if key is None:
            return
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def items(self):
        return list(self._entries.items())

    def clear(self) -> None:
        self._entries.clear()
