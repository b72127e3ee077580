"""The classical coarse spaces, one file per family (the protocol:
:mod:`ddlearn.classical.coarse_space`; the registry of every family, learned ones included:
:mod:`ddlearn.pc.registry`)."""
