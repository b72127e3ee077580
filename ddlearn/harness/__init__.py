"""The comparison harness, above every layer of the package: the preconditioners compared by
name (:mod:`.methods`, one registry; :mod:`.learned`), the main job's
tables and plots (:mod:`.report`), the one benchmark command line with stamped atomic
results, tables, peak memory and collective timers (:mod:`.bench`), the studies' resumable run
loop (:mod:`.study`), the systems the benchmarks solve and the one solve loop
(:mod:`.systems`), and the finite-element elasticity assembly of the elasticity program and
studies (:mod:`.fem`). Nothing in the library imports it."""
