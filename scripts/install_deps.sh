#!/usr/bin/env bash
# Installs the Debian packages libdlrm needs, only those that are missing.
set -euo pipefail

PACKAGES=(
  cmake make g++ pkg-config
  libprotobuf-dev protobuf-compiler
  libgoogle-glog-dev libgflags-dev
  libgtest-dev libgmock-dev
  libopenblas-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
