#!/usr/bin/env bash
# Makes sure envoyproxy/ratelimit's binaries are installed where the tests look for them: its
# config_check_cmd (the render test loads the rendered YAML with it) and its service_cmd. Both are
# `go install`ed, at the version pinned below, into a GOBIN directory of their own when missing
# there; nothing is installed anywhere else.
#
# Usage: scripts/ensure-erl.sh            (prints nothing when both are already installed)
# Environment:
#   ERL_GOBIN=out/erl-gobin    where the binaries go; relative to the current directory. Tests
#                              find them through the same variable (default: out/erl-gobin at the
#                              module root).
# Needs go, and the Go module proxy the first time.
set -euo pipefail
erl_gobin=${ERL_GOBIN:-out/erl-gobin}
erl_version=v1.4.1-0.20260122083618-3fb702589d36
command -v go >/dev/null || { echo "ensure-erl: go is not installed" >&2; exit 1; }
mkdir -p "$erl_gobin"
gobin=$(cd "$erl_gobin" && pwd)
for cmd in config_check_cmd service_cmd; do
  if [ -x "$gobin/$cmd" ]; then
    continue
  fi
  pkg=github.com/envoyproxy/ratelimit/src/$cmd@$erl_version
  echo "ensure-erl: installing $pkg into $erl_gobin" >&2
  # pkg@version builds with ERL's own go.mod: the project's go.mod neither constrains nor
  # records the install.
  GOBIN=$gobin go install "$pkg"
done
