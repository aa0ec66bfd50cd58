#!/usr/bin/env bash
# Installs the system servers the demo and the tests run for real (redis-server,
# redis-sentinel, prometheus + promtool, alertmanager) and the headless browser the
# console's browser test drives (chromium + chromedriver), from Debian packages, when
# they are missing. Needs root; otherwise says exactly what to install.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing system packages: ${need[*]}" >&2
  echo "Install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "Installing ${need[*]} from Debian packages..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The Debian packages start system services; the project never uses them.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter redis-sentinel; do
  (service "$svc" stop || systemctl stop "$svc") >/dev/null 2>&1 || true
done
