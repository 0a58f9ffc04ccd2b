#!/bin/sh
# consumers.sh - install.consumers: wstream as people install it.
#
# usage: consumers.sh CMAKE BUILD_DIR SOURCE_DIR VERSION LIBDIR PROGRAMS...
#
# Installs BUILD_DIR into a fresh prefix (cmake --install --prefix), checks
# that exactly PROGRAMS landed in bin and each answers --version with
# "NAME VERSION", then builds tests/install/consumer.c out of tree twice
# against the installed tree alone: with pkg-config (wstream-sender.pc)
# and as a CMake project (find_package(wstream), wstream::sender). Each
# build pushes a version of one bf16 tensor of random bytes into the
# installed wstream-agent, serving a layout that wants it; the agent must
# report the version committed and its live memory must hold exactly the
# bytes pushed.
set -eu

if [ "$#" -lt 6 ]; then
    echo "usage: $0 CMAKE BUILD_DIR SOURCE_DIR VERSION LIBDIR PROGRAMS..." >&2
    exit 2
fi
cmake=$1
build=$2
src=$3
version=$4
libdir=$5
shift 5

work=$(mktemp -d "${TMPDIR:-/tmp}/wst-install.XXXXXX")
shm="wst-install-$$"
agent_pid=
cleanup() {
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
    rm -f "/dev/shm/$shm"
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "install: FAIL: $*" >&2
    [ -f "$work/agent.log" ] && { echo "--- agent.log" >&2; tail -n 20 "$work/agent.log" >&2; }
    exit 1
}

prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "cmake --install"; }

# Exactly the programs named, each answering --version.
want=$(printf '%s\n' "$@" | sort)
have=$(ls "$prefix/bin" | sort)
[ "$have" = "$want" ] || fail "bin holds [$have], expected [$want]"
for p in "$@"; do
    out=$("$prefix/bin/$p" --version) || fail "$p --version exited $?"
    [ "$out" = "$p $version" ] || fail "$p --version printed '$out', expected '$p $version'"
done
echo "install: $# programs answer --version with $version"

# The libraries, versioned, with their sonames.
minor=${version#*.}
minor=${minor%%.*}
major=${version%%.*}
[ "$major" = 0 ] && so=0.$minor || so=$major
for lib in sender receiver; do
    f=$prefix/$libdir/libwstream_$lib.so
    [ -f "$f.$version" ] && [ -L "$f.$so" ] && [ -L "$f" ] ||
        fail "libwstream_$lib: expected .so -> .so.$so -> .so.$version in $prefix/$libdir"
    objdump -p "$f.$version" | grep -q "SONAME *libwstream_$lib.so.$so\$" ||
        fail "libwstream_$lib.so.$version: soname is not libwstream_$lib.so.$so"
done
for h in sender receiver loader status version; do
    [ -f "$prefix/include/wstream/$h.h" ] || fail "no include/wstream/$h.h"
done

# Out of tree: pkg-config, then find_package.
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
pcv=$(pkg-config --modversion wstream-sender) || fail "pkg-config wstream-sender"
[ "$pcv" = "$version" ] || fail "wstream-sender.pc says $pcv, expected $version"
pcv=$(pkg-config --modversion wstream-receiver) || fail "pkg-config wstream-receiver"
[ "$pcv" = "$version" ] || fail "wstream-receiver.pc says $pcv, expected $version"
# shellcheck disable=SC2046 # word splitting of the flags is the point
cc -std=c11 -Wall -Werror -o "$work/consumer-pc" "$src/tests/install/consumer.c" \
    $(pkg-config --cflags --libs wstream-sender) || fail "cc with pkg-config"
"$cmake" -S "$src/tests/install/cmake_consumer" -B "$work/cmake" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 &&
    "$cmake" --build "$work/cmake" >>"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log" >&2; fail "find_package(wstream) consumer"; }

# The installed agent, wanting the consumer's tensor whole.
bytes=$((37 * 53 * 2))
head -c 4032 /dev/zero | tr '\000' '\245' >"/dev/shm/$shm"
cat >"$work/layout.json" <<JSON
{"format": 1, "rank": 0, "shm": "/$shm", "shm_bytes": 4032,
 "regions": [{"name": "w", "offset": 0, "bytes": $bytes}],
 "wants": [{"tensor": "model.layers.0.mlp.down_proj.weight", "dtype": "bf16",
            "shape": [37, 53], "start": [0, 0], "stop": [37, 53],
            "region": "w", "offset": 0}]}
JSON
(umask 077 && head -c 32 /dev/urandom >"$work/secret")
"$prefix/bin/wstream-agent" --layout "$work/layout.json" --listen 127.0.0.1:0 \
    --port-file "$work/port" --status-file "$work/status.json" \
    --auth-secret-file "$work/secret" >"$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 200); do
    [ -s "$work/port" ] && break
    kill -0 "$agent_pid" 2>/dev/null || fail "the agent exited"
    sleep 0.05
done
[ -s "$work/port" ] || fail "the agent wrote no port"
addr=127.0.0.1:$(cat "$work/port")

# push NAME VERSION: NAME pushes fresh random bytes as VERSION; the agent
# commits it and holds exactly those bytes.
push() {
    head -c "$bytes" /dev/urandom >"$work/tensor-$2"
    LD_LIBRARY_PATH="$prefix/$libdir" "$1" "$addr" "$work/tensor-$2" \
        "$work/secret" "$2" || fail "$1 exited $?"
    for _ in $(seq 100); do
        grep -q "\"committed_version\": $2," "$work/status.json" 2>/dev/null && break
        sleep 0.05
    done
    grep -q "\"committed_version\": $2," "$work/status.json" ||
        fail "the agent did not report version $2 committed"
    head -c "$bytes" "/dev/shm/$shm" >"$work/live-$2"
    cmp "$work/live-$2" "$work/tensor-$2" ||
        fail "the agent's memory differs from version $2's bytes"
}
push "$work/consumer-pc" 1
push "$work/cmake/consumer" 2
echo "install: pkg-config and find_package consumers committed versions 1 and 2"
