#!/usr/bin/env bash
# CPU profiles of one process of the bench's control plane (kube-controller-manager,
# kube-apiserver, kube-scheduler), back to back, while `make bench` (or `xtask bench`) runs on its
# own control plane: each profile (PROFILE_SECONDS, 5 s: a plane stopped mid-profile loses it) is
# written as <output>/<pid>-<unix start>.pb.gz, so the profiles of one pass (one plane, one pid)
# can be merged with `go tool pprof -proto <output>/<pid>-*.pb.gz`. Each serves /debug/pprof (the
# bench's planes run the API server with --profiling) to the plane's admin, whose client
# certificate is read from the plane's kubeconfig at each new plane. Stop it with Ctrl-C or kill.
#   hack/profile-control-plane.sh kube-apiserver .local/bench-cluster target/apiserver-profiles
set -euo pipefail
process=${1:-kube-controller-manager}
state=${2:-.local/bench-cluster}
output=${3:-target/$process-profiles}
seconds=${PROFILE_SECONDS:-5}
mkdir -p "$output"
certs=$(mktemp -d)
trap 'rm -rf "$certs"' EXIT

field() { # the base64 field $1 of the admin kubeconfig, decoded
  sed -n "s/^ *$1: *//p" "$state/kubeconfig" | head -1 | base64 -d
}

while true; do
  pid=$(pgrep -f "/$process .*$state" | head -1 || true)
  if [ -z "$pid" ]; then
    sleep 0.5
    continue
  fi
  port=$(tr '\0' '\n' < "/proc/$pid/cmdline" | sed -n 's/^--secure-port=//p')
  # A plane being replaced has no kubeconfig yet, or its process stops mid-profile:
  # wait for the next, keeping no partial file.
  if ! { field client-certificate-data > "$certs/admin.crt" &&
    field client-key-data > "$certs/admin.key"; } 2>/dev/null; then
    sleep 0.5
    continue
  fi
  profile="$output/$pid-$(date +%s).pb.gz"
  curl -skf --max-time $((seconds + 10)) --cert "$certs/admin.crt" --key "$certs/admin.key" \
    -o "$profile" "https://127.0.0.1:$port/debug/pprof/profile?seconds=$seconds" ||
    { rm -f "$profile"; sleep 0.5; }
done
