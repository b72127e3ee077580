"""Layer 2 — learned operators and their training: global and Schwarz attention, FLARE, data,
training loops, checkpoints, the distributed operator, the in-situ learned coarse basis, and the
learned local coarse space trained once on coefficient families (``local_coarse``,
``local_training``; its pretrained model ships in ``pretrained/``).

Imports :mod:`ddlearn.decomposition` and :mod:`ddlearn.classical`, never :mod:`ddlearn.pc`.
"""
