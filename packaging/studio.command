#!/usr/bin/env bash
# Double-click launcher (Linux file managers and macOS Finder): sets up on first start, then opens the studio.
# macOS's own python3 is 3.9: a newer one is looked for first. On an error the window waits for Enter,
# so the message can be read before it closes.
cd "$(dirname "$0")/.." || exit 1
python=""
for name in python3.13 python3.12 python3.11 python3; do
    if command -v "$name" >/dev/null 2>&1 && "$name" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python="$name"
        break
    fi
done
if [ -z "$python" ]; then
    echo "The studio needs Python 3.11, 3.12 or 3.13, and none was found (python3 is $(python3 --version 2>&1 || echo missing))."
    echo "Install one from https://www.python.org/downloads/ (or: brew install python@3.12), then open this file again."
    printf "Press Enter to close this window. "; read -r _
    exit 1
fi
"$python" dev.py run "$@" || {
    code=$?
    echo
    echo "The studio stopped with an error (exit code $code, see above)."
    printf "Press Enter to close this window. "; read -r _
    exit "$code"
}
