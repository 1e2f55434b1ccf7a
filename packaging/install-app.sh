#!/usr/bin/env bash
# Install the Training Studio for this user, from its unpacked download: the app goes to
# ~/.local/share/sd-training-studio/app, `studio` onto ~/.local/bin, and a menu entry with
# its icon into ~/.local/share. Nothing needs root. Run it again to update.
#   ./install.sh              install or update
#   ./install.sh --uninstall  remove the app, the command and the menu entry (projects, settings and
#                             the training environment stay)
#   ./install.sh --uninstall --remove-training-env
#                             the same, and the training environment too (PyTorch and the training
#                             libraries, about 1-12 GB); projects and settings stay
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
app="$data/sd-training-studio/app"
bin="$HOME/.local/bin"
entry="$data/applications/sd-training-studio.desktop"
icon="$data/icons/hicolor/scalable/apps/sd-training-studio.svg"

refresh_menus() {
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q "$data/applications" || true
    fi
}

if [ "${1:-}" = "--uninstall" ]; then
    rm -rf "$app"
    rm -f "$entry" "$icon"
    if [ -L "$bin/studio" ]; then rm -f "$bin/studio"; fi
    refresh_menus
    env_dir="$data/sd-training-studio/training-env"
    if [ "${2:-}" = "--remove-training-env" ]; then
        # Only a folder the studio made (its install state is there), never something else by that name.
        if [ -f "$env_dir/studio-env.json" ] || [ -f "$env_dir/pyvenv.cfg" ]; then
            rm -rf "$env_dir"
            echo "Removed the training environment ($env_dir)."
        fi
        echo "Removed the Training Studio. Your projects and settings are still in $data/sd-training-studio."
    else
        size="$(du -sh "$env_dir" 2>/dev/null | cut -f1 || true)"
        echo "Removed the Training Studio. Your projects, settings and training environment are still in $data/sd-training-studio."
        if [ -n "$size" ]; then
            echo "The training environment takes $size: remove it too with: $0 --uninstall --remove-training-env"
        fi
    fi
    exit 0
fi

if [ ! -x "$here/studio/studio" ]; then
    echo "error: $here/studio/studio is missing: run install.sh from the unpacked download" >&2
    exit 1
fi
mkdir -p "$(dirname "$app")" "$bin" "$(dirname "$entry")" "$(dirname "$icon")"
# Copy next to the old version, then swap: an interrupted update leaves the old app working.
rm -rf "$app.new"
cp -a "$here/studio" "$app.new"
rm -rf "$app"
mv "$app.new" "$app"
ln -sfn "$app/studio" "$bin/studio"
cp "$here/sd-training-studio.svg" "$icon"
sed "s|^Exec=studio|Exec=\"$app/studio\"|" "$here/sd-training-studio.desktop" > "$entry"
refresh_menus
echo "Installed. Start 'Training Studio' from your applications menu, or run: $bin/studio"
