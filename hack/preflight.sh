#!/bin/sh
# What cargo needs before it can build anything, checked up front: one clear line per missing
# prerequisite instead of a compiler error minutes into a build. (Go is checked by the tools
# build itself, which knows the version the pinned modules ask for.)
# Usage: hack/preflight.sh [rust-version]   (default: the workspace's rust-version)
set -u
cd "$(dirname "$0")/.."
need_rust=${1:-$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)}
failed=0

# $1 >= $2, comparing dotted version numbers.
at_least() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
  echo "error: Rust $need_rust or newer is needed and cargo/rustc are not on PATH: install it with https://rustup.rs (then open a new shell, or add ~/.cargo/bin to PATH)" >&2
  failed=1
else
  found=$(rustc --version | cut -d ' ' -f 2)
  if ! at_least "${found%%-*}" "$need_rust"; then
    echo "error: Rust $need_rust or newer is needed and rustc is $found: run 'rustup update' (or install a newer toolchain)" >&2
    failed=1
  fi
fi

# ring (TLS) and other crates compile C code, and rustc links through cc.
if ! command -v cc >/dev/null 2>&1; then
  echo "error: a C toolchain is needed (crates such as ring compile C, and Rust links with cc) and cc is not on PATH: install gcc or clang (Debian/Ubuntu: apt-get install build-essential)" >&2
  failed=1
fi

exit $failed
