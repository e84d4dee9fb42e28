#!/usr/bin/env bash
# Runs the numeric parity tests and the daemon's end-to-end tests on a ggml device other
# than the CPU: the same committed fixtures, every graph on the device, a device's tolerances
# where its F16 kernels round apart from the CPU (docs/NUMERICS.md, "On a GPU backend").
#
#   scripts/test-device.sh            # Vulkan on Mesa's lavapipe (a Vulkan driver that runs
#                                     # on the CPU): no GPU needed, exercises every device code
#                                     # path (buffers off the host, uploads, read-backs, copies)
#   scripts/test-device.sh cuda       # CUDA0 (needs the CUDA toolkit and a card)
#   scripts/test-device.sh vulkan 1   # another Vulkan device index
#
# Not part of CI: ggml's Vulkan shaders take 7-15 min to build on 2 cores, and lavapipe's first
# run compiles their pipelines for ~11 min more (cached after). Installs the Vulkan build tools
# and lavapipe from Debian when missing (as root, or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-vulkan}
index=${2:-0}
bash scripts/setup-deps.sh --build-only
case "$kind" in
  vulkan)
    need=()
    command -v glslc >/dev/null || need+=(glslc)
    [ -f /usr/include/vulkan/vulkan.hpp ] || need+=(libvulkan-dev)
    [ -d /usr/share/cmake/SPIRV-Headers ] || need+=(spirv-headers)
    ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
    if [ ${#need[@]} -gt 0 ]; then
      bash scripts/apt-install.sh --no-recommends test-device "${need[@]}"
    fi
    # Debian 12's lavapipe (Mesa 22.3) corrupts its own heap when buffers are made and destroyed
    # often (docs/NUMERICS.md, "On a GPU backend"); bookworm-backports' Mesa 25.0 does not.
    mesa=$(dpkg-query -W -f '${Version}' mesa-vulkan-drivers 2>/dev/null || true)
    if [ "${mesa%%.*}" = 22 ] && grep -q bookworm /etc/os-release; then
      echo "test-device: lavapipe $mesa crashes; taking Mesa from bookworm-backports" >&2
      sudo=""
      [ "$(id -u)" -ne 0 ] && sudo=sudo
      grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d ||
        echo "deb http://deb.debian.org/debian bookworm-backports main" |
        $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
      bash scripts/apt-install.sh --no-recommends test-device -t bookworm-backports mesa-vulkan-drivers
    fi
    # ggml 0.26's Vulkan backend needs headers of Vulkan 1.3.261 or later (VK_EXT_layer_settings);
    # Debian 12 ships 1.3.239. Take the headers (only) of Debian 13's libvulkan-dev then.
    if ! grep -q LayerSettingEXT /usr/include/vulkan/vulkan_structs.hpp; then
      hdr=target/vulkan-headers
      if [ ! -f "$hdr/include/vulkan/vulkan.hpp" ]; then
        deb=libvulkan-dev_1.4.309.0-1_amd64.deb
        echo "test-device: fetching the Vulkan 1.4 headers ($deb)" >&2
        mkdir -p "$hdr/tmp"
        curl -fsSL -o "$hdr/tmp/$deb" "http://deb.debian.org/debian/pool/main/v/vulkan-loader/$deb"
        echo "8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a  $hdr/tmp/$deb" | sha256sum -c --quiet
        dpkg -x "$hdr/tmp/$deb" "$hdr/tmp/x"
        cp -r "$hdr/tmp/x/usr/include" "$hdr/"
        rm -rf "$hdr/tmp"
      fi
      export CPLUS_INCLUDE_PATH="$PWD/$hdr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
    fi
    # ggml skips CPU-type Vulkan devices (lavapipe) unless they are named explicitly.
    export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-$index}
    device="Vulkan0"
    ;;
  cuda)
    command -v nvcc >/dev/null || { echo "test-device: nvcc not found" >&2; exit 2; }
    device="CUDA$index"
    ;;
  *) echo "usage: $0 [vulkan|cuda] [index]" >&2; exit 2 ;;
esac
export YUED_TEST_DEVICE=$device
echo "test-device: running the tests on $device" >&2
# The end-to-end tests start target/debug/yued (built with the same backend first, and with the
# fault hooks a workspace build unifies in) and the `yue` client beside it, and read the Qwen
# ranks file the test command fetches.
bash scripts/fetch-qwen-tiktoken.sh >/dev/null
cargo build -p yued -p yue-client --features "yued/$kind,yued-actors/test-faults"
# Every test binary runs (a failure in one does not hide the others').
cargo test --no-fail-fast -p yued-engine -p yued-e2e --features "yued-engine/$kind" -- --test-threads 1
