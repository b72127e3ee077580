"""The learned coarse spaces as coarse-space families of the two-level PC (the protocol:
:mod:`ddlearn.classical.coarse_space`): ``learned`` (the local model trained once on
coefficient families) and ``learned_insitu`` (a basis correction trained on one matrix)."""
