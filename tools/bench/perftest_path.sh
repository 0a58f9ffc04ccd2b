#!/bin/sh
# perftest_path.sh - ctest: wstream-bench finds ucx_perftest beside the UCX
# it loaded, else on PATH, says clearly when there is none, and keeps an
# explicit --perftest-bin.
# usage: perftest_path.sh WSTREAM_BENCH
bench="$1"
real=$(command -v ucx_perftest) || {
    echo "perftest_path: SKIP: no ucx_perftest here to copy onto a PATH"
    exit 77
}
ucp=$(ldd "$bench" | awk '/libucp\.so/ {print $3; exit}')
[ -f "$ucp" ] || {
    echo "perftest_path: SKIP: cannot tell which libucp $bench loads"
    exit 77
}
# The perftest of that UCX, when it has one (another UCX's fails against
# its libraries: LD_LIBRARY_PATH to a UCX of one's own).
for d in "$(dirname "$ucp")/../bin" "$(dirname "$ucp")/../../bin"; do
    [ -x "$d/ucx_perftest" ] && { real="$d/ucx_perftest"; break; }
done
tmp=$(mktemp -d /tmp/wst-perftest-path-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/empty" "$tmp/bin" "$tmp/rm" "$tmp/far/away/lib" \
    "$tmp/ucx/lib" "$tmp/ucx/bin"
ln -s "$real" "$tmp/bin/ucx_perftest"
# The bench removes its work folder with rm, found on PATH too.
ln -s "$(command -v rm)" "$tmp/bin/rm"
ln -s "$(command -v rm)" "$tmp/rm/rm"
# The loader takes libucp from LD_LIBRARY_PATH by the name it finds there:
# beside far/away/lib no bin/ has a perftest; beside ucx/lib one has.
ln -s "$ucp" "$tmp/far/away/lib/libucp.so.0"
ln -s "$ucp" "$tmp/ucx/lib/libucp.so.0"
ln -s "$real" "$tmp/ucx/bin/ucx_perftest"
ld_rest=${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} # the rest of that UCX
LD_LIBRARY_PATH="$tmp/far/away/lib$ld_rest"
export LD_LIBRARY_PATH
fail() { echo "perftest_path: FAIL: $*" >&2; exit 1; }
small="--size 16m --layers 2 --repeats 1 --perftest-bytes 16m
       --perftest-footprint 16m --perftest-tests ucp_am_bw --timeout 60"

# None on PATH: refused at once (exit 2), naming PATH and the way out.
out=$(PATH="$tmp/empty" "$bench" $small 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 2 ] || fail "no perftest on PATH: exit $rc, want 2"
printf '%s\n' "$out" | grep -q "ucx_perftest not found on PATH ($tmp/empty)" ||
    fail "no 'not found on PATH' message"
printf '%s\n' "$out" | grep -q -- "--perftest-bin PATH, or --perftest=no" ||
    fail "the message does not say what to do"

# An explicit path that is not there: refused, naming it.
out=$("$bench" $small --perftest-bin "$tmp/none/ucx_perftest" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a missing --perftest-bin: exit $rc, want 2"
printf '%s\n' "$out" | grep -q -- "--perftest-bin $tmp/none/ucx_perftest: No such file" ||
    fail "a missing --perftest-bin is not named"

# Found on PATH (only there): used, and the ratio has a number.
out=$(PATH="$tmp/bin" "$bench" $small 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || fail "perftest on PATH: exit $rc"
printf '%s\n' "$out" | grep -q "could not remove" && fail "work folder kept"
printf '%s\n' "$out" | grep -q "^perftest: $tmp/bin/ucx_perftest, log" ||
    fail "the bench did not run the ucx_perftest on PATH"
printf '%s\n' "$out" | grep '^wstream-bench: transport=' |
    grep -Eq ' ratio=[0-9]+\.[0-9]+ ' || fail "no numeric ratio"
# Beside the UCX it loaded (ucx/lib/../bin), with none on PATH: used.
out=$(LD_LIBRARY_PATH="$tmp/ucx/lib$ld_rest" PATH="$tmp/rm" "$bench" $small 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || fail "perftest beside the loaded UCX: exit $rc"
printf '%s\n' "$out" | grep -q "^perftest: $tmp/ucx/bin/ucx_perftest, log" ||
    fail "the bench did not run the ucx_perftest beside its UCX"
echo "perftest_path: ok"
