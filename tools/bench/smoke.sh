#!/bin/sh
# smoke.sh - ctest smoke test of wstream-bench: the refit verified, both
# ratios against ucx_perftest (8 MiB and footprint), the ratio to kernel
# TCP's floor (tcp only) and the CPU per GiB were printed. It asserts no
# speed.
# usage: smoke.sh WSTREAM_BENCH [flags...]
bench="$1"
shift
case " $* " in
*" --transport tcp "*) tcp=1 ;;
*) tcp=0 ;;
esac
out=$("$bench" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
    echo "smoke: wstream-bench exited with $rc" >&2
    exit 1
fi
line=$(printf '%s\n' "$out" | grep '^wstream-bench: transport=')
case "$line" in
*" verified=yes"*) ;;
*) echo "smoke: no verified=yes in the summary line" >&2; exit 1 ;;
esac
if ! printf '%s\n' "$line" | grep -Eq ' ratio=[0-9]+\.[0-9]+ '; then
    echo "smoke: no numeric ratio in the summary line" >&2
    exit 1
fi
if ! printf '%s\n' "$line" | grep -Eq ' ratio_footprint=[0-9]+\.[0-9]+ '; then
    echo "smoke: no numeric ratio_footprint in the summary line" >&2
    exit 1
fi
# Against the modes with peer-error handling (the default tests have
# some; "n/a" when every one of them failed).
if ! printf '%s\n' "$line" | grep -Eq ' ratio_e=([0-9]+\.[0-9]+|n/a) .* ratio_footprint_e=([0-9]+\.[0-9]+|n/a)( |$)'; then
    echo "smoke: no ratio_e or ratio_footprint_e in the summary line" >&2
    exit 1
fi
# The floor runs for tcp over loopback, and only there.
if [ "$tcp" = 1 ]; then
    floor=' ratio_floor=[0-9]+\.[0-9]+ floor_cpu_s_per_gib=[0-9.]+ '
else
    floor=' ratio_floor=n/a '
fi
if ! printf '%s\n' "$line" | grep -Eq "$floor"; then
    echo "smoke: the summary line lacks$floor" >&2
    exit 1
fi
if ! printf '%s\n' "$line" | grep -Eq ' sender_cpu_s_per_gib=[0-9.]+ agent_cpu_s_per_gib=[0-9.]+ '; then
    echo "smoke: no CPU per GiB in the summary line" >&2
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq '^\| (tcp|shm|auto) \|.*\| [0-9]+\.[0-9]+ \|$'; then
    echo "smoke: no table row with a ratio" >&2
    exit 1
fi
echo "smoke: ok"
