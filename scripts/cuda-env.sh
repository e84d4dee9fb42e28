#!/usr/bin/env bash
# Sourced by the CUDA build scripts: assembles a CUDA toolkit from NVIDIA's PyPI wheels (nvcc,
# cicc/nvvm, the crt and runtime headers, cudart, cuBLAS, CCCL) on a machine without a GPU or a
# CUDA install, unless CUDA_ROOT names a toolkit already there, and exports what ggml's CMake
# build needs for one architecture.
#
#   . scripts/cuda-env.sh [ARCH=90-real]   # 90: H100/H200
#
# ARCH is CMake's CUDA architecture list: `90-real` is the machine code of sm_90 alone; `90`
# adds its PTX, which only a card of a later architecture compiles at start and which doubles
# libggml-cuda (36 MB of fatbin, 19 of them PTX).
#
# Environment: YUED_CUDA_VENV (default target/cuda-venv) holds the wheels.
#
# CUDA 13.0: the oldest 13.x, so the build runs on every driver of the 13 series (580 and later,
# what the H100/H200 machines this project is lent have); a newer toolkit's runtime asks for a
# newer driver where the machine has an older one.
#
# How it links: the pip wheels ship cuBLAS only as shared libraries, so ggml is built as shared
# libraries (LLAMA_BUILD_SHARED_LIBS=1) that link cudart and cuBLAS dynamically, and without the
# CUDA driver's virtual-memory pool (GGML_CUDA_NO_VMM=ON: the wheels have no libcuda stub to link
# at build time; the driver is still loaded at run time).
CUDA_ARCH=${1:-${CUDA_ARCH:-90-real}}
if [ -z "${CUDA_ROOT:-}" ]; then
  venv=${YUED_CUDA_VENV:-target/cuda-venv}
  if [ ! -x "$venv/bin/pip" ]; then python3 -m venv "$venv"; fi
  # Pinned: the versions these scripts were last run with.
  "$venv/bin/pip" install -q --no-deps \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cublas==13.0.2.14 nvidia-cuda-cccl==13.0.85 cmake==3.31.6
  CUDA_ROOT=$(cd "$venv"/lib/python3*/site-packages/nvidia/cu13 && pwd)
  PATH="$(cd "$venv/bin" && pwd):$PATH"   # this cmake (CUDA 13 support) first
  # Link-time names for the versioned libraries of the wheels.
  for l in "$CUDA_ROOT"/lib/lib*.so.*; do
    base=${l%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$l")" "$base"
  done
  # nvcc 13.0 looks for cudart_static and cudadevrt under lib64; the wheels put them in lib.
  [ -e "$CUDA_ROOT/lib64" ] || ln -s lib "$CUDA_ROOT/lib64"
  # CCCL (cub, thrust, libcu++) where nvcc looks for the toolkit's headers.
  if [ -d "$CUDA_ROOT/cccl/include" ]; then
    for d in "$CUDA_ROOT"/cccl/include/*; do
      [ -e "$CUDA_ROOT/include/$(basename "$d")" ] || ln -s "$d" "$CUDA_ROOT/include/$(basename "$d")"
    done
  fi
fi
[ -x "$CUDA_ROOT/bin/nvcc" ] || { echo "cuda-env.sh: no nvcc under $CUDA_ROOT" >&2; return 2 2>/dev/null || exit 2; }
echo "cuda-env.sh: $("$CUDA_ROOT/bin/nvcc" --version | grep -m1 release), CUDA architectures $CUDA_ARCH," \
  "$(cmake --version | head -1)" >&2
export CUDA_ROOT CUDA_ARCH CUDA_PATH="$CUDA_ROOT" CUDAToolkit_ROOT="$CUDA_ROOT"
export PATH="$CUDA_ROOT/bin:$PATH"
export CMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" CMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"
export LLAMA_BUILD_SHARED_LIBS=1 GGML_CUDA_NO_VMM=ON
export CARGO_INCREMENTAL=0
# Call before each cargo command on a CUDA target folder (target/cuda):
# - llama-cpp-sys-2's build script hard-links the shared libraries' symlinks (libggml.so ->
#   libggml.so.0) into the target folder, where they dangle, and panics ("File exists") the next
#   time it runs there (another feature set of its build dependencies, a rebuild);
# - it does not rerun when CMAKE_CUDA_ARCHITECTURES changes, so a new ARCH cleans it.
cuda_prepare() {
  find "$1/release" -maxdepth 2 -xtype l -name 'lib*.so*' -delete 2>/dev/null || true
  if [ "$(cat "$1/cuda-arch" 2>/dev/null)" != "$CUDA_ARCH" ]; then
    [ -d "$1/release" ] && cargo clean --release --target-dir "$1" -p llama-cpp-sys-2
    mkdir -p "$1" && echo "$CUDA_ARCH" >"$1/cuda-arch"
  fi
}
# The folder of the ggml libraries a cargo build linked, from its `--message-format=json*` output
# (the target folder can hold other builds' copies).
cuda_ggml_libs() {
  python3 -c 'import json, sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m.get("reason") == "build-script-executed" and "#llama-cpp-sys-2@" in m["package_id"]:
        print(m["out_dir"] + "/lib")' "$1"
}
