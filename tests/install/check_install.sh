#!/usr/bin/env bash
# Installs libxport into a scratch root and builds the README example outside the tree twice:
# with `pkg-config --static --cflags --libs xport`, and with CMake's find_package(xport).
# Both programs must run and move data.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# What a consumer installs: the library, headers, .pc and CMake package (devel) and the tools
# and plugin (runtime).
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet --tags devel,runtime
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
root="$tmp$prefix"
# A sanitized build installs a sanitized libxport.a: its consumers need the same runtime.
sanitize=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="b_sanitize"))')
extra=""
[ "$sanitize" = "none" ] || extra="-fsanitize=$sanitize"
pc=$(find "$root" -name xport.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: xport.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --define-variable=prefix="$root" --static --cflags --libs xport)
echo "pkg-config --static --cflags --libs xport: $flags"
# No -std: the compiler's default standard (C++17 for g++ 12); pkg-config must raise it.
c++ -Wall -Wextra -Werror $extra "$src/examples/hello_xport.cc" $flags -o "$tmp/hello-pc"
"$tmp/hello-pc" | tee "$tmp/out-pc"
grep -q "received 20 bytes: hello over libxport" "$tmp/out-pc"
cmake -S "$src/examples" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$root" -DCMAKE_CXX_FLAGS="$extra" \
  >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake" >"$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log"; exit 1; }
"$tmp/cmake/hello_xport" | tee "$tmp/out-cmake"
grep -q "put: ok" "$tmp/out-cmake"
echo "install check: pkg-config and CMake consumers built and ran"
# The NCCL plugin (when built): installed beside the library, NCCL's table its only export, every
# symbol resolved (a sanitized build leaves the runtime to the program: not checked there).
plugin_built=$(meson introspect "$build" --targets |
  python3 -c 'import json,sys; print(any(t["name"]=="nccl-net-xport" for t in json.load(sys.stdin)))')
if [ "$plugin_built" = True ]; then
  plugin=$(find "$root" -name libnccl-net-xport.so | head -1)
  [ -n "$plugin" ] || { echo "FAIL: libnccl-net-xport.so was not installed"; exit 1; }
  exported=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort | tr '\n' ' ')
  [ "$exported" = "ncclGinPlugin_v11 ncclNetPlugin_v11 " ] ||
    { echo "FAIL: the plugin exports other than ncclNetPlugin_v11 and ncclGinPlugin_v11: $exported"; exit 1; }
  if [ "$sanitize" = "none" ]; then
    missing=$(ldd -r "$plugin" 2>&1 | grep -E "not found|undefined symbol" || true)
    [ -z "$missing" ] || { echo "FAIL: the installed plugin does not resolve: $missing"; exit 1; }
  fi
  echo "install check: $plugin exports ncclNetPlugin_v11 and ncclGinPlugin_v11 only"
fi
