# Source on the GPU machine from anywhere in the repository (it does not exit the shell):
#     source bench/cutlass_env.sh && python3 -m bench.cutlass_peer --probe
# Installs the carried wheels (.whl/*.whl: nvidia-cutlass) into $CUTLASS_SITE (default
# /tmp/site), puts that first on PYTHONPATH, and exports what CUTLASS's Python interface
# reads: CUDA_INSTALL_PATH (the toolkit nvcc belongs to), PATH with that nvcc first (CUTLASS
# also runs a bare `nvcc --version`), LD_LIBRARY_PATH with its lib64 (the host-side .so that
# CUTLASS builds for each kernel links libcudart) and CUTLASS_PEER_CACHE (compiled kernels).
# Returns non-zero, saying why, when a piece is missing.

_cutlass_env() {
    local root site nvcc top
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || return 1
    site=${CUTLASS_SITE:-/tmp/site}
    if ! compgen -G "$root/.whl/*.whl" >/dev/null; then
        echo "cutlass_env: no wheels in $root/.whl (carry .whl; it holds nvidia_cutlass-*.whl)" >&2
        return 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$root"/.whl/*.whl || { echo "cutlass_env: pip install into $site failed" >&2; return 1; }
    case ":${PYTHONPATH:-}:" in
        *":$site:"*) ;;
        *) export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" ;;
    esac

    nvcc=$(command -v nvcc || true)
    for top in "${CUDA_INSTALL_PATH:-}" "${CUDA_HOME:-}" /usr/local/cuda; do
        [ -n "$nvcc" ] && break
        [ -n "$top" ] && [ -x "$top/bin/nvcc" ] && nvcc=$top/bin/nvcc
    done
    if [ -z "$nvcc" ]; then
        echo "cutlass_env: nvcc not found on PATH, in \$CUDA_INSTALL_PATH, \$CUDA_HOME or /usr/local/cuda" >&2
        return 1
    fi
    # nvcc's own idea of its root (an nvcc on PATH may be a wrapper script elsewhere).
    top=$("$nvcc" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1)
    top=$(readlink -f "${top:-$(dirname "$(dirname "$(readlink -f "$nvcc")")")}")
    export CUDA_INSTALL_PATH=$top
    export PATH="$top/bin:$PATH"
    export LD_LIBRARY_PATH="$top/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CUTLASS_PEER_CACHE=${CUTLASS_PEER_CACHE:-$root/build/cutlass_peer}
    echo "cutlass_env: wheels in $site; CUDA_INSTALL_PATH=$top ($("$top/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')); cache $CUTLASS_PEER_CACHE"
}
_cutlass_env
