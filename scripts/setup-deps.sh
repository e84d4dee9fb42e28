#!/usr/bin/env bash
# Installs what building and testing yued needs on a fresh Debian machine: cmake and
# libclang (ggml is compiled from source by llama-cpp-sys-2, its headers go through
# bindgen; libopus is built with cmake too) and, for the tests only, ffmpeg (an independent
# reader of every audio container yued writes), Chromium (the WebUI's browser test), and
# python3 and npm where missing (the test command's helpers).
# `--build-only` skips the test tools.
# Idempotent: does nothing when everything is present.
set -euo pipefail
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
# What bindgen (clang-sys) loads: libclang.so, libclang-N.so, libclang.so.N, libclang-N.so.N,
# never libclang-cpp (a different library that a machine may have without libclang: the
# glob libclang*.so* took it for libclang and the build died in bindgen).
has_libclang() {
  local f
  for f in /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*-linux-gnu/libclang*.so* /usr/lib/libclang*.so*; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in
      libclang-cpp*) ;;
      libclang.so | libclang-*.so | libclang.so.* | libclang-*.so.*) return 0 ;;
    esac
  done
  return 1
}
has_libclang || missing+=(libclang-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
if [ "${1:-}" != "--build-only" ]; then
  # Test tools, without their recommends: ffmpeg (the independent reader of every
  # container) and Chromium (the WebUI test's browser).
  tools=()
  command -v ffprobe >/dev/null 2>&1 || tools+=(ffmpeg)
  # The test command's own helpers: python3's pip fetches the Qwen ranks file, npm installs the
  # browser test's driver (a minimal Debian has neither).
  python3 -m pip --version >/dev/null 2>&1 || tools+=(python3 python3-pip)
  # ... and a venv holds the official client SDKs the front-door tests drive.
  python3 -c "import ensurepip, venv" >/dev/null 2>&1 || tools+=(python3-venv)
  command -v npm >/dev/null 2>&1 || tools+=(nodejs npm)
  [ -x /usr/bin/chromium ] || tools+=(chromium fonts-liberation)
  if [ ${#tools[@]} -gt 0 ]; then
    bash "$(dirname "$0")/apt-install.sh" --no-recommends "setup-deps (test tools)" "${tools[@]}"
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  bash "$(dirname "$0")/apt-install.sh" setup-deps "${missing[@]}"
fi
