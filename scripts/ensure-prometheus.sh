#!/usr/bin/env bash
# Makes sure promtool and prometheus are on PATH: the render tests run `promtool check rules` and
# `promtool test rules` on the rendered alerting rules, and the rollout test of the Prometheus gate
# starts its own prometheus server on a free loopback port. Installs Debian's prometheus package
# (which ships both) when either is missing and we are root; otherwise says what to do.
#
# The tests never use the package's own service. The package's maintainer
# scripts would start one on :9090 and enable it at boot, so the install runs with service starts
# denied (a policy-rc.d of our own, when the host has none), and the service the package installed
# is then disabled and, should it be running anyway, stopped. A Prometheus that this script did
# not install is never touched.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-prometheus: promtool or prometheus is not installed; install them (for example: sudo apt-get install -y --no-install-recommends prometheus)" >&2
  exit 1
fi
if dpkg-query -W -f='${Status}' prometheus 2>/dev/null | grep -q 'install ok installed'; then
  echo "ensure-prometheus: the prometheus package is installed but promtool or prometheus is not on PATH" >&2
  exit 1
fi

echo "ensure-prometheus: installing promtool (Debian package prometheus)" >&2
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  # 101: "action forbidden by policy", so invoke-rc.d and deb-systemd-invoke start nothing.
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Without recommends: prometheus-node-exporter would be another daemon (:9100) nobody needs here.
apt-get install -y -qq --no-install-recommends prometheus >/dev/null

# The package enables its service for the next boot; the tests never use it.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus.service >/dev/null 2>&1 || true
else
  update-rc.d prometheus disable >/dev/null 2>&1 || true
  if [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
  fi
fi
if /etc/init.d/prometheus status >/dev/null 2>&1 ||
  { command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus.service 2>/dev/null; }; then
  echo "ensure-prometheus: the prometheus service the package installed is still running; stop it (systemctl stop prometheus)" >&2
  exit 1
fi

if ! command -v promtool >/dev/null 2>&1; then
  echo "ensure-prometheus: installed the prometheus package, but promtool is still not on PATH" >&2
  exit 1
fi
echo "ensure-prometheus: $(promtool --version 2>&1 | head -n 1)" >&2
