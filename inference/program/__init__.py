"""The program layer: what turns a NumPyro program into quantities to optimise.

Effect handlers that set or remove the observation noise
(:mod:`inference.program.handlers`), energies read from a traced program
(:mod:`inference.program.energy`), the split of a program's keyword arguments
into traced and static ones (:mod:`inference.program.kwargs`), and a jittable
L-BFGS (:mod:`inference.program.optimize`). It imports nothing else of ``inference``.
"""
