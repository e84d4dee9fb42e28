#!/usr/bin/env bash
# Installs Debian packages for the project's scripts: as root, or through sudo.
# Usage: scripts/apt-install.sh [--no-recommends] WHO PACKAGE...   (WHO prefixes the message)
set -euo pipefail
opts=()
if [ "${1:-}" = "--no-recommends" ]; then opts+=(--no-install-recommends); shift; fi
who=$1; shift
[ $# -gt 0 ] || exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "$who: installing $*" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${opts[@]}" "$@" >/dev/null
