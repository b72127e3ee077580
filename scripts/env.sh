# Sourced by the entry points: the project's virtual environment and MPI settings.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$root/.venv/bin:$PATH"
# Oversubscribed MPICH ranks busy-poll; throttling the progress engine keeps 8 ranks on 2 cores
# usable. One BLAS/OpenMP thread per rank.
export MPIR_CVAR_CH4_PROGRESS_THROTTLE=${MPIR_CVAR_CH4_PROGRESS_THROTTLE:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPLBACKEND=${MPLBACKEND:-Agg}
# The project's PETSc. A C program that selects the Python PC (-python) needs PETSC_DIR set: this
# PETSc records its library directory as ${PETSC_DIR}/lib, which PETSc's Python start-up expands.
for petsc_dir in "$root"/.venv/lib/python3*/site-packages/petsc; do
    if [ -d "$petsc_dir" ]; then export PETSC_DIR="$petsc_dir"; fi
done
unset petsc_dir
cd "$root"
