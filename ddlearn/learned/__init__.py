"""Layer 2 — learned operators and learned coarse spaces, two products on one small shared
module (``common``: payload reader, best state, progress bar, cosine schedule):

- ``operators``: global and Schwarz attention, FLARE, data, training loops, checkpoints, the
  fair-comparison protocol and the distributed operator;
- ``coarse``: the learned coarse spaces as coarse-space families of the two-level PC —
  ``learned`` (the subdomains' inputs in ``patches``, the network in ``network``, its start
  vectors and the classical ones in ``starts``, the block Krylov Rayleigh–Ritz refinement in
  ``refinement``, the model file in ``model_file``, the set-up in ``serving``; trained once on
  coefficient families by ``local_training``; the pretrained models ship in ``pretrained/``)
  and ``learned_insitu`` (the basis correction of ``coarse.basis``, trained inside CG by
  ``coarse.pc_training``).

Imports :mod:`ddlearn.decomposition` and :mod:`ddlearn.classical`, never :mod:`ddlearn.pc`.
"""
