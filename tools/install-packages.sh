#!/usr/bin/env bash
# Installs whichever Debian packages in tools/packages.txt are missing
# (apt-get update only when something is missing). Needs root or sudo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=()
while read -r line || [[ -n "$line" ]]; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [[ -n "$line" ]] && packages+=("$line")
done < tools/packages.txt

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == installed ]] || missing+=("$pkg")
done
((${#missing[@]} == 0)) && exit 0

echo "install-packages: installing ${missing[*]}"
sudo=()
if [[ $EUID -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-packages: need root to install packages" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y "${missing[@]}"
