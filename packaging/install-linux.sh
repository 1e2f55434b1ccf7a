#!/usr/bin/env bash
# Install the studio for the current user: a virtual environment, a launcher and a menu entry.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python3 "$here/dev.py" setup
mkdir -p "$HOME/.local/bin" "$HOME/.local/share/applications" "$HOME/.local/share/icons/hicolor/scalable/apps"
ln -sf "$here/.venv/bin/studio" "$HOME/.local/bin/studio"
ln -sf "$here/.venv/bin/studio-train" "$HOME/.local/bin/studio-train"
cp "$here/resources/icons/studio.svg" "$HOME/.local/share/icons/hicolor/scalable/apps/sd-training-studio.svg"
sed "s|^Exec=studio|Exec=$here/.venv/bin/studio|" "$here/packaging/studio.desktop" \
    > "$HOME/.local/share/applications/sd-training-studio.desktop"
echo "Installed. Start 'Training Studio' from your applications menu, or run: studio"
