"""The comparison harness, above every layer of the package: the preconditioners compared by
name (:mod:`.methods`, :mod:`.learned`), PETSc option helpers (:mod:`.options`), the main job's
tables and plots (:mod:`.report`), and the one benchmark command line with stamped atomic
results, tables, peak memory and collective timers (:mod:`.bench`) with the systems the
benchmarks solve (:mod:`.systems`). Nothing in the library imports it."""
