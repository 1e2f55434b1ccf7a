#!/usr/bin/env bash
# Double-click launcher (Linux file managers and macOS Finder): sets up on first start, then opens the studio.
cd "$(dirname "$0")/.." && exec python3 dev.py run "$@"
