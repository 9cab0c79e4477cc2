#!/usr/bin/env bash
# Installs what fp4forge builds and tests with (Debian packages), only what is
# missing, so a fresh machine and a warm one take the same command.
set -euo pipefail
pkgs="bc build-essential chromium clang pkg-config libjansson-dev libyaml-dev libcurl4-openssl-dev python3 python3-venv ca-certificates"
missing=""
for p in $pkgs; do dpkg -s "$p" > /dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "setup: installing$missing" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing > /dev/null
fi
