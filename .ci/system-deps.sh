#!/usr/bin/env bash
# Debian packages the full test suite needs: Chromium (browser tests), PostgreSQL (store tests
# on a real server; the tests start their own throwaway cluster) and the sqlite3 shell (the
# README's queries are run as written). Idempotent.
set -euo pipefail

need=()
[ -x /usr/bin/chromium ] || need+=(chromium fonts-dejavu-core)
command -v sqlite3 >/dev/null || need+=(sqlite3)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && id postgres >/dev/null 2>&1 || need+=(postgresql)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
  command -v sudo >/dev/null || { echo "need root to install: ${need[*]}" >&2; exit 1; }
else
  SUDO=
fi
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
