"""The application layer: the command line, the comparison harness and the reproduction.

``ppl-zoo`` (:mod:`inference.app.cli`) lists the registered models, runs a model's
side-by-side comparison of the papers' inference with NumPyro's generic inference
(:mod:`inference.app.compare`), and reruns the papers' experiments into a report
(:mod:`inference.app.reproduce`, :mod:`inference.app.experiments`).
:mod:`inference.app.selection` chooses model sizes across families. Nothing below
this layer imports it.
"""
