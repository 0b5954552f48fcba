#!/usr/bin/env bash
# Makes sure redis-server is on PATH: the tests start their own redis-server processes on free
# loopback ports. Installs Debian's package when it is missing and we are root; otherwise says
# what to do. Never touches a Redis that is already running.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-redis: installing redis-server" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  # The package may start a service on 6379; the tests never use it.
  exit 0
fi
echo "ensure-redis: redis-server is not installed; install it (for example: sudo apt-get install -y redis-server)" >&2
exit 1
