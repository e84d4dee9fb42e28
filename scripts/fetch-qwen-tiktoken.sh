#!/usr/bin/env bash
# Fetch Qwen's BPE ranks file (qwen.tiktoken) from the dashscope wheel on PyPI.
#
# Idempotent: if ${YUED_CACHE_DIR:-<repo>/.cache}/qwen.tiktoken exists and its
# sha256 matches the pinned value, nothing is done. Prints the path on success.
set -euo pipefail

DASHSCOPE_VERSION="1.20.14"
MEMBER="dashscope/resources/qwen.tiktoken"
EXPECTED_SHA256="b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
CACHE_DIR="${YUED_CACHE_DIR:-$REPO/.cache}"
DEST="$CACHE_DIR/qwen.tiktoken"

die() { echo "fetch-qwen-tiktoken: error: $*" >&2; exit 1; }

command -v python3 >/dev/null 2>&1 || die "python3 not found in PATH"

sha256_of() {
    python3 - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
PY
}

if [[ -f "$DEST" ]]; then
    if [[ "$(sha256_of "$DEST")" == "$EXPECTED_SHA256" ]]; then
        echo "$DEST"
        exit 0
    fi
    echo "fetch-qwen-tiktoken: $DEST has wrong sha256, re-fetching" >&2
fi

mkdir -p "$CACHE_DIR" || die "cannot create cache dir $CACHE_DIR"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/qwen-tiktoken.XXXXXX")" || die "mktemp failed"
trap 'rm -rf "$TMP"' EXIT

python3 -m pip download "dashscope==$DASHSCOPE_VERSION" --no-deps -q -d "$TMP/dl" >&2 \
    || die "pip download dashscope==$DASHSCOPE_VERSION failed (network / PyPI access?)"

python3 - "$TMP/dl" "$MEMBER" "$TMP/qwen.tiktoken" <<'PY' || die "could not extract $MEMBER from the dashscope wheel"
import glob, os, sys, zipfile
dl, member, out = sys.argv[1:4]
wheels = glob.glob(os.path.join(dl, "dashscope-*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected exactly one dashscope wheel in {dl}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z:
    try:
        data = z.read(member)
    except KeyError:
        sys.exit(f"{member} not found in {wheels[0]}")
with open(out, "wb") as f:
    f.write(data)
PY

GOT="$(sha256_of "$TMP/qwen.tiktoken")"
[[ "$GOT" == "$EXPECTED_SHA256" ]] \
    || die "sha256 mismatch for extracted qwen.tiktoken: got $GOT, expected $EXPECTED_SHA256"

# Same-filesystem rename is atomic; cross-filesystem mv falls back to copy.
mv -f "$TMP/qwen.tiktoken" "$DEST.partial.$$" || die "cannot write into $CACHE_DIR"
mv -f "$DEST.partial.$$" "$DEST" || die "cannot move file into place at $DEST"
echo "$DEST"
