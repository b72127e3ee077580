"""Layer 2 — learned operators and their training: global and Schwarz attention, FLARE, data,
training loops, checkpoints, the distributed operator and the learned coarse basis.

Imports :mod:`ddlearn.decomposition` and :mod:`ddlearn.classical`, never :mod:`ddlearn.pc`.
"""
