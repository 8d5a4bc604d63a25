#!/usr/bin/env bash
# Installs the Debian packages this project needs, only where they are missing.
# Usage: scripts/deps.sh [build|test|bench|compat|containers|docs]
set -euo pipefail

want=(libnghttp2-dev libssl-dev libsqlite3-dev libhiredis-dev pkg-config)
case "${1:-build}" in
  test)  want+=(nghttp2-client curl openssl chromium chromium-driver python3-selenium python3-h2 redis-server haproxy) ;;
  containers) want+=(python3-venv haproxy) ;;   # scripts/test-containers: venv for its PyPI tools, haproxy -c
  bench) want+=(nghttp2-client nghttp2-server curl openssl redis-server haproxy) ;;
  docs)  want+=(python3) ;;  # scripts/docs: the Markdown link check
  compat)  # scripts/test-compat: a venv for the Python libraries, unshare/ip/mount, a JDK, node
    want+=(python3-venv iproute2 util-linux mount openssl)
    command -v javac >/dev/null || want+=(openjdk-17-jdk-headless)
    command -v node >/dev/null || want+=(nodejs) ;;
esac

missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing Debian packages: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null || true
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
