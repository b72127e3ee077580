# Sourced by the entry points: the project's virtual environment and MPI settings.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$root/.venv/bin:$PATH"
# Oversubscribed MPICH ranks busy-poll; throttling the progress engine keeps 8 ranks on 2 cores
# usable. One BLAS/OpenMP thread per rank.
export MPIR_CVAR_CH4_PROGRESS_THROTTLE=${MPIR_CVAR_CH4_PROGRESS_THROTTLE:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export MPLBACKEND=${MPLBACKEND:-Agg}
cd "$root"
