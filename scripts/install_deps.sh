#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what deepinfer needs on Debian 12: build tools and libraries from apt, and the
# Python test packages into the project virtualenv (.venv). Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libicu-dev
  python3 python3-venv python3-pip python3-dev
  libcurl4-openssl-dev
  openmpi-bin libopenmpi-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The project virtualenv holds the Python test dependencies (requirements-test.txt).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[deps] creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements-test.stamp
if [ ! -f "$stamp" ] || [ requirements-test.txt -nt "$stamp" ]; then
  echo "[deps] installing Python test packages"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-test.txt
  touch "$stamp"
fi
echo "[deps] ok"
