#!/bin/bash
# tests/gpu/run.sh OUT_DIR [DEPS_DIR [UCX_DIR]] - everything that needs a GPU, in one
# go: build with CUDA, run every kernel check against its CPU twin (and the
# NCCL mover on one GPU), the unit tests, an agent's layout over several
# CUDA IPC allocations, the device-memory refits of the demo (agents' live
# memory on the GPU; senders' shards on the GPU, moved by the bounce
# path), then the benchmarks.
# Full logs go to OUT_DIR/log.txt; the summary (every check's line and the
# benchmark table) is printed last and kept in OUT_DIR/summary.txt.
#
# DEPS_DIR (optional) holds Debian 12 .deb files of the build's
# dependencies for a machine that has none (../shared/GPU.md): they are
# unpacked into /opt/deps, never into /.
#
# UCX_DIR (optional; or WST_GPU_UCX) is a CUDA-aware UCX installed by
# tests/gpu/build-ucx.sh (its prefix/ folder). Everything above section 7
# runs on the UCX the build found (Debian's, no CUDA); section 7, the
# direct device path, runs on UCX_DIR, first on LD_LIBRARY_PATH and PATH.
# The build compiles against Debian's 1.13.1 headers; UCX_DIR may be that
# release or a later one (UCX keeps its ABI backward compatible; the direct
# path needs 1.18, tests/gpu/build-ucx.sh says why). Each section says
# which UCX it ran on.
# WST_GPU_ONLY_DIRECT=1 runs the build and section 7 alone.
#
# Exit status: 0 when every check passed, 1 otherwise, 77 with no GPU.
set -u
out=${1:?usage: tests/gpu/run.sh OUT_DIR [DEPS_DIR [UCX_DIR]]}
deps=${2:-}
cuda_ucx=${3:-${WST_GPU_UCX:-}}
[ -z "$cuda_ucx" ] || cuda_ucx=$(cd "$cuda_ucx" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${WST_GPU_BUILD:-$root/build-gpu}
mkdir -p "$out"
log=$out/log.txt
summary=$out/summary.txt
: >"$log"
: >"$summary"
failed=0

say() { echo "$*" | tee -a "$summary"; }
result() { # result NAME STATUS [detail]
    if [ "$2" -eq 0 ]; then say "PASS $1 ${3:-}"; else say "FAIL $1 (exit $2) ${3:-}"; failed=1; fi
}

if ! nvidia-smi -L >>"$log" 2>&1; then
    echo "SKIP tests/gpu/run.sh: no GPU (nvidia-smi -L failed)" | tee -a "$summary"
    exit 77
fi
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version \
    --format=csv | tee -a "$summary"

if [ -n "$deps" ]; then
    # shellcheck source=tests/gpu/deps-env.sh
    . "$root/tests/gpu/deps-env.sh" "$deps" "$log"
fi

# The device machines' rule: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0
n_gpus=$(nvidia-smi -L | grep -c '^GPU ')

# A python3 whose torch sees the GPU runs the Python package's tests here,
# CUDA tensors included (python.cuda); the image's own, if it has one.
torch_py=""
for py in python3 /opt/torch/.venv/bin/python3; do
    if command -v "$py" >/dev/null &&
        "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
            >>"$log" 2>&1; then
        torch_py=$(command -v "$py")
        break
    fi
done

t0=$(date +%s)
rm -f "$build/CMakeCache.txt" # pkg-config results are cached: configure afresh
# The kernel checks first, on their own: they need the least of the tree.
if ! { cmake -S "$root" -B "$build" -DWST_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWST_WERROR=ON \
           ${torch_py:+-DWST_PYTHON="$torch_py"} &&
       cmake --build "$build" -j"$(nproc)" --target wst-gpu-check; } >>"$log" 2>&1; then
    tail -40 "$log"
    result build 1
    exit 1
fi
cmake --build "$build" -j"$(nproc)" >>"$log" 2>&1
built=$?
[ $built -eq 0 ] || grep -E 'error' "$log" | head -20
result build $built "($(($(date +%s) - t0)) s)"
bin=$build/bin

only_direct=${WST_GPU_ONLY_DIRECT:-0}
# 1. Kernels against their CPU twins (and the benchmarks, printed last).
: >"$out/kernels.txt"
if [ "$only_direct" != 1 ]; then
    "$bin/wst-gpu-check" --bench >"$out/kernels.txt" 2>>"$log"
    st=$?
    grep -E '^(PASS|FAIL)' "$out/kernels.txt" | tee -a "$summary"
    result kernels $st "($(grep -c '^PASS' "$out/kernels.txt") checks passed)"
fi

# 1b. The Python package with a CUDA torch: every python.* test, and CUDA
#     tensors pushed after the trainer's event (python.cuda).
if [ "$only_direct" = 1 ]; then
    say "SKIP sections 1 to 6: WST_GPU_ONLY_DIRECT=1"
elif [ -n "$torch_py" ] && [ $built -eq 0 ]; then
    ctest --test-dir "$build" -L python --output-on-failure >"$out/py.tmp" 2>&1
    st=$?
    cat "$out/py.tmp" >>"$log"
    result "python tests ($torch_py)" $st "($(grep -E 'tests passed' "$out/py.tmp"))"
    grep -E 'Test +#[0-9]+: python\.cuda' "$out/py.tmp" | tee -a "$summary"
    rm -f "$out/py.tmp"
    # 1c. Hugging Face transformers as the engine (tests/gpu/hf_refit.py):
    #     logits and generation bit-exact after each optimizer step.
    PYTHONPATH="$root/sender/python" PYTHONDONTWRITEBYTECODE=1 \
        WSTREAM_LIB="$build/lib/libwstream_sender.so" \
        WSTREAM_AGENT="$bin/wstream-agent" \
        timeout 600 "$torch_py" "$root/tests/gpu/hf_refit.py" "$out" \
        >"$out/hf.tmp" 2>&1
    st=$?
    cat "$out/hf.tmp" >>"$log"
    if [ $st -eq 77 ]; then
        say "SKIP hf_refit: $(tail -1 "$out/hf.tmp")"
    else
        result "hf_refit (transformers engine)" $st
        grep -E '^(transformers|attach|\|)' "$out/hf.tmp" | tee -a "$summary"
    fi
    rm -f "$out/hf.tmp"
else
    say "SKIP python tests on the GPU: no python3 whose torch sees a GPU"
fi

# Which UCX a section runs on: version, library, and whether the CUDA
# transports came out (ucx_info -d lists a transport per resource).
ucx_said() { # ucx_said SECTION
    local tls
    tls=$(ucx_info -d 2>/dev/null | awk '/# *Transport:/ {print $3}' | sort -u | tr '\n' ' ')
    say "UCX for $1: $(ucx_info -v 2>/dev/null | awk '/Version/ {print $3}') ($(ldd "$build/lib/libwstream_sender.so" 2>/dev/null | awk '/libucp.so/ {print $3}')); transports: ${tls:-?}; cuda_copy $(case " $tls" in *" cuda_copy "*) echo yes;; *) echo no;; esac), cuda_ipc $(case " $tls" in *" cuda_ipc "*) echo yes;; *) echo no;; esac)"
}
ucx_said "sections 1-6"

# The demos' runner, used by sections 3 to 7.
demo() { # demo NAME ARGS...
    local name=$1
    shift
    echo "== demo $name: wstream-demo $*" >>"$log"
    timeout 300 "$bin/wstream-demo" "$@" >"$out/demo.tmp" 2>&1
    local st=$?
    cat "$out/demo.tmp" >>"$log"
    result "demo $name" $st "$(grep -E 'GB/s|verified' "$out/demo.tmp" | tail -1)"
    # With --log-level info: how device bytes left the senders and came
    # into the agents, and the path each sender chose.
    grep -E "device path|bounce:|landed and copied" "$out/demo.tmp" |
        sed 's/^[0-9.]* //' | sort | uniq -c | sort -rn | head -4 |
        sed 's/^/    /' | tee -a "$summary"
    # Refits after the first (set-up, first touch): their median GB/s.
    grep -oE '^refit [0-9]+/[0-9]+: .*\(([0-9.]+) GB/s\)' "$out/demo.tmp" |
        tail -n +2 | grep -oE '[0-9.]+ GB/s' | sort -n |
        awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]}' >"$out/gbs.tmp"
}
median_gbs() { cat "$out/gbs.tmp" 2>/dev/null; }
[ $built -eq 0 ] || demo() { result "demo $1" 1 "(not built)"; }

# WST_GPU_ONLY_TWO=1 skips sections 2 to 5 (the one-GPU runs) to leave the
# two-GPU section the most of a call's ten minutes; WST_GPU_ONLY_DIRECT=1
# skips 1 to 6.
if [ "${WST_GPU_ONLY_TWO:-0}" != 1 ] && [ "$only_direct" != 1 ]; then
# 2. Unit tests (the GPU probe runs for real here).
[ $built -eq 0 ] && ctest --test-dir "$build" -L unit --output-on-failure >>"$log" 2>&1
result "unit tests" $? "($(grep -E 'tests passed' "$log" | tail -1))"

# 2b. A layout over several device allocations, each by its own CUDA IPC
#     handle, and a shm object ("allocations"): an agent imports them all
#     and two refits are checked bit-exact in each.
if [ $built -eq 0 ]; then
    "$bin/wst-gpu-alloc-ipc" "$bin/wstream-agent" >"$out/alloc_ipc.txt" 2>>"$log"
    st=$?
    grep -E '^(PASS|FAIL)' "$out/alloc_ipc.txt" | tee -a "$summary"
    result "allocations over CUDA IPC handles" $st
else
    result "allocations over CUDA IPC handles" 1 "(not built)"
fi

# 3. Device-memory refits: agents import their engine's device buffers by
#    CUDA IPC, land host senders' data in pinned slots, repack on the GPU,
#    and every byte is verified on a copy of the device memory.
# Each device case next to the same refit in host memory, same run.
both() { # both NAME ARGS...: the refit with --device 0, then in host shm
    local name=$1
    shift
    demo "device $name" --device 0 "$@"
    demo "host   $name" "$@"
}
demo "device tiny-moe 2->2 (info log)" --device 0 --senders 2 --receivers 2 \
    --refits 3 --transport tcp --log-level info
demo "device tiny-moe 2->1 (info log)" --device 0 --senders 2 --receivers 1 \
    --refits 3 --transport tcp --log-level info
both "tiny-moe trtllm 2->2" --senders 2 --receivers 2 --refits 5 --transport tcp
both "tiny-moe trtllm 2->1" --senders 2 --receivers 1 --refits 5 --transport tcp
both "tiny-moe checkpoint 1->2" --senders 1 --receivers 2 --refits 5 \
    --transport tcp --loader checkpoint
both "tiny-moe 1 slot 2->1" --senders 2 --receivers 1 --refits 5 \
    --transport tcp --staging-slots 1
both "tiny dense 2->1" --preset tiny --senders 2 --receivers 1 --refits 5 \
    --transport tcp
# 4. Device to device: the senders' shards on the GPU too, moved through
#    their pinned bounce rings (Debian's UCX has no CUDA support), landed
#    through the agents' pinned rings; copied in asynchronously before each
#    push, which waits for them with the ready event.
d2d() { demo "d2d $1" --device 0 --sender-device 0 "${@:2}"; }
d2d "tiny-moe 2->2 (info log)" --senders 2 --receivers 2 --refits 3 \
    --transport tcp --log-level info
d2d "tiny-moe trtllm 2->1" --senders 2 --receivers 1 --refits 5 --transport tcp
d2d "tiny-moe checkpoint 1->2" --senders 1 --receivers 2 --refits 5 \
    --transport tcp --loader checkpoint
d2d "tiny-moe 1 slot 4->2" --senders 4 --receivers 2 --refits 5 \
    --transport tcp --staging-slots 1
d2d "tiny dense 2->1" --preset tiny --senders 2 --receivers 1 --refits 5 \
    --transport tcp
demo "sender-device only: tiny-moe 2->2" --sender-device 0 --senders 2 \
    --receivers 2 --refits 3 --transport tcp --log-level info
# The direct path needs a CUDA-aware UCX, which this machine lacks; asked
# for, the senders fall back to nccl (UCX cannot reach the device memory).
# NCCL refuses two ranks on one GPU, so an nccl refit cannot run here (the
# two-GPU run can): what runs is its set-up -- the choice, the unique id
# over the control channel, both non-blocking inits -- and it must end in a
# clear error on both sides, neither hanging nor crashing.
refused() { # refused NAME PATTERN ARGS...: must exit nonzero, saying PATTERN
    local name=$1 pattern=$2
    shift 2
    echo "== refused $name: wstream-demo $*" >>"$log"
    timeout 120 "$bin/wstream-demo" "$@" >"$out/demo.tmp" 2>&1
    local st=$?
    cat "$out/demo.tmp" >>"$log"
    local why
    why=$(grep -oE "$pattern" "$out/demo.tmp" | head -1)
    [ $st -ne 0 ] && [ $st -ne 124 ] && [ -n "$why" ]
    result "refused $name" $? "(exit $st) $why"
    grep -E "device path|nccl" "$out/demo.tmp" | sed 's/^[0-9.]* //' |
        sort | uniq -c | sort -rn | head -6 | sed 's/^/    /' | tee -a "$summary"
}
refused "d2d device-path direct -> nccl, one GPU" \
    "device path nccl: [^;]*" --device 0 --sender-device 0 --senders 1 \
    --receivers 1 --refits 1 --transport tcp --device-path direct \
    --timeout 20 --log-level info
refused "d2d device-path nccl, one GPU" "nccl communicator [^(]*failed" \
    --device 0 --sender-device 0 --senders 1 --receivers 1 --refits 1 \
    --transport tcp --device-path nccl --timeout 20 --log-level info

# 5. A bounce refit of real size next to the same refit host to device and
#    host to host, and next to each of its stages alone in this run.
q3="--preset qwen3-30b-a3b --layers 2 --senders 1 --receivers 1 --refits 5 --transport tcp --log-level info"
# shellcheck disable=SC2086
demo "host->host qwen3-30b-a3b 2 layers 1->1" $q3
gbs_hh=$(median_gbs)
# shellcheck disable=SC2086
demo "host->device qwen3-30b-a3b 2 layers 1->1" --device 0 $q3
gbs_hd=$(median_gbs)
# shellcheck disable=SC2086
demo "device->device qwen3-30b-a3b 2 layers 1->1" --device 0 --sender-device 0 $q3
gbs_dd=$(median_gbs)
# UCX host to host on the same lanes (TCP over loopback), messages of one
# bounce slot.
perftest=$(command -v ucx_perftest)
ucx_gbs=""
if [ -n "$perftest" ]; then
    UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 "$perftest" -p 13377 >>"$log" 2>&1 &
    srv=$!
    sleep 1
    UCX_TLS=tcp UCX_NET_DEVICES=lo timeout 60 "$perftest" 127.0.0.1 -p 13377 \
        -t ucp_am_bw -s 8388608 -n 400 -w 40 >"$out/perf.tmp" 2>&1
    cat "$out/perf.tmp" >>"$log"
    wait $srv
    # Final: iters, latencies x3, bandwidth avg and overall (MB/s = 2^20 B/s)
    ucx_gbs=$(awk '/Final:/ {printf "%.2f", $7 * 1048576 / 1e9}' "$out/perf.tmp")
fi
# Fail closed with device memory: sender 0 is killed in layer 2 of version
# 2, with copies to the GPU and parked messages in flight. The demo exits
# nonzero and prints "fail-closed held" only when every agent is either
# unusable (and says why) or refused version 2 and still serves version 1,
# byte for byte.
echo "== demo device fault: kill sender 0 in layer 2" >>"$log"
timeout 300 "$bin/wstream-demo" --device 0 --senders 4 --receivers 2 \
    --refits 2 --transport tcp --fault kill-sender:2 >"$out/demo.tmp" 2>&1
st=$?
cat "$out/demo.tmp" >>"$log"
held=$(grep -E "fail-closed held" "$out/demo.tmp" | tail -1)
[ $st -ne 0 ] && [ -n "$held" ]
result "demo device fault kill-sender:2" $? "(exit $st) $held"
rm -f "$out/demo.tmp"

fi # WST_GPU_ONLY_TWO

# 6. With two GPUs (the nvidia-h200-x2 kind): senders on GPU 0, agents on
#    GPU 1, over the NCCL mover (two ranks on two GPUs, two processes) and
#    over the bounce path; a sender on each GPU to an agent on each GPU (a
#    TP=2 engine) over the bounce path; and a sender killed mid-refit on the
#    NCCL path, whose communicators must be aborted with the agents failing
#    closed. The Qwen3-shaped refits print agent 0's timeline of their last
#    refit, and the bare NCCL exchange between the two GPUs runs with the
#    NCCL refit's bytes and layer count right after it.
gbs_nccl=""
gbs_b2=""
gbs_tp2=""
timeline() { # the last demo's timeline, indented, into the summary
    sed -n '/^timeline of agent 0/,/global tensors/p' "$out/demo.tmp" |
        sed 's/^/    /' | tee -a "$summary"
}
q3x2="--preset qwen3-30b-a3b --layers 4 --refits 5 --transport tcp"
if [ "$n_gpus" -ge 2 ] && [ "$only_direct" != 1 ]; then
    two="--device 1 --sender-device 0"
    # shellcheck disable=SC2086
    demo "2 GPUs nccl tiny-moe 1->1 (info log)" $two --device-path nccl \
        --senders 1 --receivers 1 --refits 3 --transport tcp --log-level info
    # shellcheck disable=SC2086
    demo "2 GPUs nccl tiny-moe 2->2" $two --device-path nccl --senders 2 \
        --receivers 2 --refits 5 --transport tcp
    # Two processes on one GPU are time-sliced (no MPS), so an exchange runs
    # only while both its ends hold their GPUs: 2->2 has two on each GPU,
    # 2->1 and 1->2 two on one of them.
    # shellcheck disable=SC2086
    demo "2 GPUs nccl tiny-moe 2->1" $two --device-path nccl --senders 2 \
        --receivers 1 --refits 5 --transport tcp
    # shellcheck disable=SC2086
    demo "2 GPUs nccl tiny-moe 1->2" $two --device-path nccl --senders 1 \
        --receivers 2 --refits 5 --transport tcp
    # shellcheck disable=SC2086
    demo "2 GPUs nccl tiny-moe checkpoint 3->2, 1 slot" $two \
        --device-path nccl --senders 3 --receivers 2 --refits 5 \
        --transport tcp --loader checkpoint --staging-slots 1
    # shellcheck disable=SC2086
    demo "2 GPUs nccl qwen3-30b-a3b 4 layers 1->1" $two --device-path nccl \
        --senders 1 --receivers 1 $q3x2 --log-level info
    gbs_nccl=$(median_gbs)
    q3_bytes=$(grep -oE 'versions x [0-9.]+ MB' "$out/demo.tmp" |
        awk '{printf "%.0f", $3 * 1e6}')
    timeline
    # shellcheck disable=SC2086
    demo "2 GPUs bounce tiny-moe 2->2" $two --senders 2 --receivers 2 \
        --refits 5 --transport tcp
    # shellcheck disable=SC2086
    demo "2 GPUs bounce qwen3-30b-a3b 4 layers 1->1" $two --senders 1 \
        --receivers 1 $q3x2 --log-level info
    gbs_b2=$(median_gbs)
    timeline
    # A sender on each GPU (half the shards each) to an agent on each GPU
    # (a TP=2 engine), over the bounce path.
    demo "2 GPUs bounce tiny-moe 2->2, TP=2 (GPU 0,1 -> GPU 0,1)" \
        --device 0,1 --sender-device 0,1 --senders 2 --receivers 2 \
        --refits 5 --transport tcp --log-level info
    # shellcheck disable=SC2086
    demo "2 GPUs bounce qwen3-30b-a3b 4 layers 2->2, TP=2" --device 0,1 \
        --sender-device 0,1 --senders 2 --receivers 2 $q3x2
    gbs_tp2=$(median_gbs)
    timeline
    echo "== demo 2 GPUs nccl fault: kill sender 0 in layer 2" >>"$log"
    # shellcheck disable=SC2086
    timeout 300 "$bin/wstream-demo" $two --device-path nccl --senders 4 \
        --receivers 2 --refits 2 --transport tcp --fault kill-sender:2 \
        >"$out/demo.tmp" 2>&1
    st=$?
    cat "$out/demo.tmp" >>"$log"
    held=$(grep -E "fail-closed held" "$out/demo.tmp" | tail -1)
    [ $st -ne 0 ] && [ $st -ne 124 ] && [ -n "$held" ]
    result "demo 2 GPUs nccl fault kill-sender:2" $? "(exit $st) $held"
    # The bare exchange with the NCCL refit's shape: its bytes as one group
    # per layer (4 + the global tensors), as one run each and as runs of
    # 4 MiB (its expert slices are 3 and 6 MiB).
    for run in "${q3_bytes:-1073741824}" 4194304; do
        "$bin/wst-gpu-check" --nccl-pair "${q3_bytes:-1073741824}" "$run" 5 \
            >"$out/pair.tmp" 2>>"$log"
        result "nccl bare pair, runs of $run" $? \
            "$(grep -E '^(PASS|FAIL)' "$out/pair.tmp" | tail -1)"
        grep -E '^\| nccl bare' "$out/pair.tmp" >>"$out/kernels.txt"
    done
elif [ "$only_direct" != 1 ]; then
    say "SKIP two-GPU refits: $n_gpus GPU visible (the nvidia-h200-x2 kind runs them)"
fi
rm -f "$out/demo.tmp" "$out/pair.tmp"

# 7. The direct device path on the CUDA-aware UCX (UCX_DIR): senders and
#    agents as processes on one GPU, shards and live memory in device
#    memory, UCX moving device memory itself (cuda_ipc between processes,
#    cuda_copy where it stages). `auto` must choose direct (the senders
#    log why), and every byte is verified (the agents hash device layers
#    on the GPU; the demo compares the live memory with its sources). Next
#    to it, on the same UCX and transports: the same refit over the bounce
#    path, ucx_perftest -m cuda (put, am and tag bandwidth) with the
#    senders' message size, 8 MiB (WST_DATA_CHUNK_MAX), the median of
#    WST_GPU_DIRECT_PERF_RUNS runs each (3), am bandwidth with peer-error
#    handling at 32 MiB (UCX's rate when the message count does not bound
#    it), and cudaMemcpy between two processes' buffers through CUDA IPC.
gbs_direct=""
gbs_direct1=""
gbs_direct_bounce=""
perf_cuda=()
if [ -n "$cuda_ucx" ]; then
    saved_ld=${LD_LIBRARY_PATH:-}
    saved_path=$PATH
    export LD_LIBRARY_PATH=$cuda_ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$cuda_ucx/bin:$PATH
    # Data on tcp (host bytes, eager messages) and the CUDA transports;
    # the demos' --transport auto leaves UCX_TLS as set here.
    export UCX_TLS=${WST_GPU_DIRECT_TLS:-tcp,cuda_copy,cuda_ipc}
    ucx_said "section 7 (direct path, UCX_TLS=$UCX_TLS)"
    direct() { # direct NAME ARGS...: a d2d refit that must choose direct
        # (info: the senders' path lines)
        demo "direct $1" --device 0 --sender-device 0 --transport auto \
            --log-level info "${@:2}"
        local n_direct n_other n_err n_noipc
        n_direct=$(grep -c "device path direct" "$out/demo.tmp")
        n_other=$(grep -cE "device path (bounce|nccl)" "$out/demo.tmp")
        # UCX's own complaints (a CUDA call on a thread without a context
        # made it fall back to slow paths, or crash) fail the case too,
        # except one UCX limitation, counted apart: its cuda_ipc exports a
        # receive buffer (cuIpcGetMemHandle) to pack its key (1.13: when
        # registering it), which memory the agent imported from its engine
        # by CUDA IPC refuses ("invalid argument"); UCX then moves those
        # messages on a path ~100 times slower. The agent's device ring
        # keeps UCX off that memory: with it the count is 0.
        # The sender's window and the agent's message size, as chosen.
        grep -oE "receiver [^ ]+: mover [a-z]+, .*window [0-9]+ MiB|WST_DEVICE_MESSAGE_MIB=[0-9]+" \
            "$out/demo.tmp" | sed -E 's/^receiver [^ ]+: //; s/data lanes .*, ([0-9]+ lanes)/\1/' |
            sort | uniq -c | sed 's/^/    /' | tee -a "$summary"
        n_noipc=$(grep -c "cuIpcGetMemHandle.*invalid argument" "$out/demo.tmp")
        n_err=$(($(grep -c "UCX  ERROR" "$out/demo.tmp") - n_noipc))
        grep "UCX  ERROR" "$out/demo.tmp" | sed 's/^\[[^]]*\] \[[^]]*\] *//' |
            sort | uniq -c | sort -rn | head -3 | sed 's/^/    /' | tee -a "$summary"
        [ "$n_direct" -gt 0 ] && [ "$n_other" -eq 0 ] && [ "$n_err" -eq 0 ]
        result "direct $1: auto chose direct" $? \
            "($n_direct senders' lines say direct, $n_other another path, $n_err UCX errors, $n_noipc imported buffers UCX could not register)"
        # The agents' lines on the last refit: where its bytes went (each
        # way's rate), where a message's time went, the device ring.
        local last
        last=$(grep -oE 'version [0-9]+: [0-9]+ (rendezvous )?messages' "$out/demo.tmp" |
            awk '{sub(":", "", $2); print $2}' | sort -n | tail -1)
        [ -z "$last" ] ||
            grep -E "agent\[0\]\] info: version $last: [0-9]+ (rendezvous )?messages" "$out/demo.tmp" |
            sed 's/^[0-9.]* //' | sed 's/^/    /' | tee -a "$summary"
    }
    # WST_GPU_DIRECT_MIN=1: the qwen3 direct refit and perftest's am and
    # tag bandwidth only (the least device time that gives the ratio).
    min=${WST_GPU_DIRECT_MIN:-0}
    [ "$min" = 1 ] ||
        direct "tiny-moe 2->2" --senders 2 --receivers 2 --refits 3
    [ ! -f "$out/demo.tmp" ] ||
        grep -E "UCX .* reaches memory types" "$out/demo.tmp" | sed 's/^[0-9.]* //' |
        sort | uniq -c | sed 's/^/    /' | tee -a "$summary"
    # WST_GPU_DIRECT_QUICK=1 leaves these three out (device time).
    if [ "${WST_GPU_DIRECT_QUICK:-0}" != 1 ] && [ "$min" != 1 ]; then
        direct "tiny-moe trtllm 2->1" --senders 2 --receivers 1 --refits 5
        direct "tiny-moe checkpoint 1->2" --senders 1 --receivers 2 \
            --refits 5 --loader checkpoint
        direct "tiny-moe 1 slot 4->2" --senders 4 --receivers 2 --refits 5 \
            --staging-slots 1
    fi
    [ "$min" = 1 ] ||
        direct "tiny dense 2->1" --preset tiny --senders 2 --receivers 1 \
            --refits 5
    # WST_GPU_DIRECT_LAYERS: the refit's size (2 layers: 3.7 GB; each
    # further one 1.24 GB), so that per-refit control is not all it times.
    q3_layers=${WST_GPU_DIRECT_LAYERS:-2}
    q3d="--preset qwen3-30b-a3b --layers $q3_layers --senders 1 --receivers 1 --refits 5"
    # The refits the ratios are of (q3n): the stand-in engine pauses without its
    # check that nothing is written before READY (it hashes all its live
    # memory twice at each BEGIN: ~16 ms of a 59 ms refit at 16 layers, on
    # the GPU the refit shares), which a real engine does not do to pause.
    # Every byte is still verified: the agent's digests, and the demo's
    # comparison of live memory with the sources after each refit.
    q3n="$q3d --engine-ready-check=no"
    # shellcheck disable=SC2086
    direct "qwen3-30b-a3b $q3_layers layers 1->1, engine without its READY check" $q3n
    gbs_direct=$(median_gbs)
    mover_direct=$(grep -oE "mover (put|am), data lanes" "$out/demo.tmp" | head -1 | awk '{print $2}' | tr -d ,)
    timeline
    # The same refit with the put mover (--mover put): the experts are put
    # into the agent's staging pool over cuda_ipc, the engine's buffers
    # still take am (UCX cannot export them). auto takes am on the direct
    # path: put was no faster here (NOTES.md, issue 19).
    # shellcheck disable=SC2086
    direct "qwen3-30b-a3b $q3_layers layers 1->1, put into the staging pool" $q3n --mover put
    gbs_direct_put=$(median_gbs)
    grep -q "mover put, data lanes" "$out/demo.tmp"
    result "the put row's senders used the put mover" $?
    # The same with the check (not with WST_GPU_DIRECT_MIN=1).
    gbs_direct_check=""
    if [ "$min" != 1 ]; then
        # shellcheck disable=SC2086
        direct "qwen3-30b-a3b $q3_layers layers 1->1, engine with its READY check" $q3d
        gbs_direct_check=$(median_gbs)
    fi
    # WST_GPU_DIRECT_TRACE=1: the same refit once more at --log-level trace
    # (3 refits), its last one read back by tools/demo/refit_trace.sh into
    # OUT_DIR/trace.txt: READY, credits, each layer's LAYER_DONE, check,
    # repack and finalize, and the commit, in ms from the agent's BEGIN
    # (NOTES.md, "The direct path, traced").
    if [ "${WST_GPU_DIRECT_TRACE:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        demo "direct qwen3-30b-a3b $q3_layers layers 1->1, traced" \
            --device 0 --sender-device 0 --transport auto \
            ${q3n/--refits 5/--refits 3} --log-level trace
        "$root/tools/demo/refit_trace.sh" "$out/demo.tmp" >"$out/trace.txt" 2>>"$log"
        result "refit_trace.sh of the traced refit" $? \
            "($(wc -l <"$out/trace.txt") lines in $out/trace.txt)"
    fi
    # Without the device ring (WST_GPU_DIRECT_RING_OFF=1): UCX receives
    # straight into the memory the agent imported from its engine, which
    # it cannot export (NOTES.md, issue 19).
    gbs_direct_noring=""
    if [ "${WST_GPU_DIRECT_RING_OFF:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        WST_DEVICE_RING=off direct "qwen3-30b-a3b $q3_layers layers 1->1, no device ring" $q3n
        gbs_direct_noring=$(median_gbs)
        timeline
    fi
    # Another device ring size in MiB (WST_GPU_DIRECT_RING_MIB; 1024 by
    # default) and sender window (WST_GPU_DIRECT_WINDOW, e.g. 256m; 1 GiB
    # on the direct path by default): whether messages waiting for ring room, or
    # the bytes a sender keeps in flight, bound the rate.
    gbs_direct_ring=""
    ring_case="${WST_GPU_DIRECT_RING_MIB:-1024} MiB device ring, window ${WST_GPU_DIRECT_WINDOW:-default}"
    if [ -n "${WST_GPU_DIRECT_RING_MIB:-}${WST_GPU_DIRECT_WINDOW:-}" ]; then
        # shellcheck disable=SC2086
        WST_DEVICE_RING=${WST_GPU_DIRECT_RING_MIB:-1024} direct "qwen3-30b-a3b $q3_layers layers 1->1, $ring_case" $q3n --window "${WST_GPU_DIRECT_WINDOW:-0}"
        gbs_direct_ring=$(median_gbs)
        timeline
    fi
    # The same GPU's copy and digest ceilings, in this run.
    if [ "$min" = 1 ] || [ "$only_direct" = 1 ]; then
        "$bin/wst-gpu-check" --copy >>"$out/kernels.txt" 2>>"$log"
        result "device copy and digest ceilings" $?
    fi
    # The copy the refit's two processes could make themselves: cudaMemcpy
    # from one process's buffer into another's, mapped by CUDA IPC (2 GiB,
    # each way; the owner checks the bytes landed).
    "$bin/wst-gpu-check" --ipc-copy 2147483648 >"$out/ipc.tmp" 2>>"$log"
    st=$?
    cat "$out/ipc.tmp" >>"$log"
    grep -E '^\| IPC copy' "$out/ipc.tmp" >>"$out/kernels.txt"
    result "cudaMemcpy between two processes through CUDA IPC" $st \
        "($(grep -E '^(PASS|FAIL)' "$out/ipc.tmp" | tr '\n' ' '))"
    rm -f "$out/ipc.tmp"
    # One data lane (WST_GPU_DIRECT_ONE_LANE=1): cuda_ipc needs no
    # striping over TCP lanes, and each further lane is a UCX context of
    # its own (registering device memory again). On the H200 with UCX
    # 1.13.1 it made no difference (1.35 vs 1.32 GB/s, NOTES.md).
    if [ "${WST_GPU_DIRECT_ONE_LANE:-0}" = 1 ]; then
        # shellcheck disable=SC2086
        direct "qwen3-30b-a3b 2 layers 1->1, 1 lane" $q3d --lanes 1
        gbs_direct1=$(median_gbs)
    fi
    # WST_GPU_DIRECT_BOUNCE=0 leaves the bounce comparison out.
    if [ "$min" != 1 ] && [ "${WST_GPU_DIRECT_BOUNCE:-1}" != 0 ]; then
        # shellcheck disable=SC2086
        demo "bounce on the same UCX: qwen3-30b-a3b $q3_layers layers 1->1" \
            --device 0 --sender-device 0 --transport auto \
            --device-path bounce $q3n --log-level info
        gbs_direct_bounce=$(median_gbs)
    fi
    # UCX 1.13 emulates puts over tcp with memcpy, which cannot read device
    # memory (a crash): put_bw runs without tcp, on shared memory and the
    # CUDA transports.
    perf_tests="ucp_put_bw ucp_am_bw tag_bw"
    [ "$min" != 1 ] || { perf_cuda+=(""); perf_tests="ucp_am_bw tag_bw"; }
    # Each test WST_GPU_DIRECT_PERF_RUNS times (3 by default), the median
    # kept: on the H200 one mode moved 30-50% between runs a minute apart
    # (NOTES.md, issue 19), more than the gap a ratio is meant to show.
    perf_runs=${WST_GPU_DIRECT_PERF_RUNS:-3}
    # perf_cuda_run TEST SIZE [ARGS]: the median of perf_runs runs, appended to
    # perf_cuda.
    perf_cuda_run() {
        local t=$1 size=$2 tls=$UCX_TLS runs=() st=0
        shift 2
        [ "$t" != ucp_put_bw ] || tls=${WST_GPU_DIRECT_PUT_TLS:-sm,cuda_copy,cuda_ipc}
        for _ in $(seq "$perf_runs"); do
            UCX_TLS=$tls timeout 60 ucx_perftest -p 13378 >>"$log" 2>&1 &
            srv=$!
            sleep 1
            UCX_TLS=$tls timeout 60 ucx_perftest 127.0.0.1 -p 13378 -t "$t" -m cuda \
                -s "$size" -n 400 -w 40 "$@" >"$out/perf.tmp" 2>&1 || st=$?
            cat "$out/perf.tmp" >>"$log"
            wait $srv
            runs+=("$(awk '/Final:/ {printf "%.2f", $7 * 1048576 / 1e9}' "$out/perf.tmp")")
        done
        perf_cuda+=("$(printf '%s\n' "${runs[@]}" | grep . | sort -g |
            awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}')")
        result "ucx_perftest -t $t -m cuda${*:+ $*}, $((size >> 20)) MiB, UCX_TLS=$tls" $st \
            "(${perf_cuda[-1]:-?} GB/s, median of ${runs[*]})"
    }
    for t in $perf_tests; do
        perf_cuda_run "$t" 8388608
    done
    # UCX's rate when messages are not what bounds it: am_bw with peer-error
    # handling (-e, as wstream's data endpoints) and 32 MiB messages
    # (WST_GPU_DIRECT_PERF_BIG). At 8 MiB each message costs UCX ~20 us
    # here whatever its size, so larger ones move more: on the H200 with
    # UCX 1.18 am_bw -e gave 390-470 GB/s at 8 MiB, 1735-1754 at 32 MiB
    # and 1885 at 64 MiB (NOTES.md, "what bounds the direct path").
    perf_big=${WST_GPU_DIRECT_PERF_BIG:-33554432}
    perf_cuda_run ucp_am_bw "$perf_big" -e
    unset UCX_TLS
    export LD_LIBRARY_PATH=$saved_ld PATH=$saved_path
else
    say "SKIP section 7, the direct path: no CUDA-aware UCX given (UCX_DIR or WST_GPU_UCX; tests/gpu/build-ucx.sh builds one)"
fi
rm -f "$out/demo.tmp" "$out/perf.tmp"

# 8. The tables, last.
sed -n '/^| benchmark/,$p' "$out/kernels.txt" | tee -a "$summary"
stage() { grep -F "| $1" "$out/kernels.txt" | awk -F'|' '{gsub(/ /,"",$5); print $5}'; }
[ "$only_direct" = 1 ] || {
    echo
    echo "| bounce refit and its stages (GB/s, medians; refits: refits 2-5) | GB/s |"
    echo "|---|---|"
    echo "| refit device->device qwen3-30b-a3b 2 layers, bounce both sides | ${gbs_dd:-?} |"
    echo "| refit host->device, same (agent's landing ring only) | ${gbs_hd:-?} |"
    echo "| refit host->host, same | ${gbs_hh:-?} |"
    echo "| stage: pinned device-to-host, 8 MiB chunks | $(stage 'pinned device-to-host 1 GiB, 8 MiB')  |"
    echo "| stage: UCX host-to-host, tcp/lo, am_bw 8 MiB (ucx_perftest) | ${ucx_gbs:-?} |"
    echo "| stage: pinned host-to-device, 8 MiB chunks | $(stage 'pinned host-to-device 1 GiB, 8 MiB') |"
    if [ -n "$gbs_nccl" ]; then
        echo
        echo "| two GPUs: sender GPU 0 -> agent GPU 1, qwen3-30b-a3b 4 layers (medians) | GB/s |"
        echo "|---|---|"
        echo "| refit over nccl, 1->1 | $gbs_nccl |"
        grep -F '| nccl bare GPU 0 -> GPU 1' "$out/kernels.txt" |
            awk -F'|' '{gsub(/^ +| +$/,"",$2); gsub(/ /,"",$5); print "| bare: " $2 " | " $5 " |"}'
        echo "| refit over bounce, 1->1 | ${gbs_b2:-?} |"
        echo "| refit over bounce, 2->2, TP=2 (GPU 0,1 -> GPU 0,1) | ${gbs_tp2:-?} |"
        echo "| stage: pinned device-to-host, 8 MiB chunks (GPU 0) | $(stage 'pinned device-to-host 1 GiB, 8 MiB') |"
        echo "| stage: pinned host-to-device, 8 MiB chunks (GPU 0) | $(stage 'pinned host-to-device 1 GiB, 8 MiB') |"
    fi
} | tee -a "$summary"
if [ -n "$cuda_ucx" ]; then
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0 && b > 0) printf "%.2f", a / b; else print "?"}'; }
    {
        echo
        echo "| direct path, one GPU, qwen3-30b-a3b ${q3_layers:-2} layers 1->1, data messages of ${WST_DEVICE_MESSAGE_MIB:-32} MiB into device memory UCX writes (the device ring's too), 8 MiB through the pinned ring (medians) | GB/s | direct / this |"
        echo "|---|---|---|"
        echo "| refit device->device, direct, mover ${mover_direct:-?} (UCX moves device memory; engine without its READY check) | ${gbs_direct:-?} | 1.00 |"
        echo "| refit device->device, direct, experts put into the staging pool (--mover put) | ${gbs_direct_put:-?} | $(ratio "$gbs_direct" "${gbs_direct_put:-}") |"
        [ -z "${gbs_direct_check:-}" ] ||
            echo "| refit device->device, direct, engine with its READY check (it hashes its live memory twice at BEGIN) | $gbs_direct_check | $(ratio "$gbs_direct" "$gbs_direct_check") |"
        [ -z "${gbs_direct_noring:-}" ] ||
            echo "| refit device->device, direct, no device ring | $gbs_direct_noring | $(ratio "$gbs_direct" "$gbs_direct_noring") |"
        [ -z "${gbs_direct_ring:-}" ] ||
            echo "| refit device->device, direct, $ring_case | $gbs_direct_ring | $(ratio "$gbs_direct" "$gbs_direct_ring") |"
        [ -z "$gbs_direct1" ] ||
            echo "| refit device->device, direct, 1 data lane | $gbs_direct1 | $(ratio "$gbs_direct" "$gbs_direct1") |"
        echo "| refit device->device, bounce, same UCX | ${gbs_direct_bounce:-?} | $(ratio "$gbs_direct" "$gbs_direct_bounce") |"
        echo "| ucx_perftest -m cuda ucp_put_bw | ${perf_cuda[0]:-?} | $(ratio "$gbs_direct" "${perf_cuda[0]:-}") |"
        echo "| ucx_perftest -m cuda ucp_am_bw | ${perf_cuda[1]:-?} | $(ratio "$gbs_direct" "${perf_cuda[1]:-}") |"
        echo "| ucx_perftest -m cuda tag_bw | ${perf_cuda[2]:-?} | $(ratio "$gbs_direct" "${perf_cuda[2]:-}") |"
        echo "| ucx_perftest -m cuda ucp_am_bw -e, $((perf_big >> 20)) MiB messages | ${perf_cuda[3]:-?} | $(ratio "$gbs_direct" "${perf_cuda[3]:-}") |"
        # The copy's row counts bytes read + written; a refit's, bytes moved.
        copy_rw=$(stage 'device-to-device copy 2 GiB')
        copy_moved=$(awk -v c="$copy_rw" 'BEGIN {if (c > 0) printf "%.1f", c / 2}')
        echo "| device-to-device copy, bytes moved (read + written / 2) | ${copy_moved:-?} | $(ratio "$gbs_direct" "$copy_moved") |"
        for way in "own -> other process's" "other process's -> own"; do
            ipc_rw=$(stage "IPC copy 2048 MiB, $way")
            ipc_moved=$(awk -v c="$ipc_rw" 'BEGIN {if (c > 0) printf "%.1f", c / 2}')
            echo "| cudaMemcpy through CUDA IPC between two processes, $way, bytes moved | ${ipc_moved:-?} | $(ratio "$gbs_direct" "$ipc_moved") |"
        done
        best=$(printf '%s\n' "${gbs_direct:-0}" "${gbs_direct_ring:-0}" "${gbs_direct_put:-0}" | sort -g | tail -1)
        echo
        echo "best direct refit $best GB/s: $(ratio "$best" "${perf_cuda[1]:-}") of ucp_am_bw, $(ratio "$best" "${perf_cuda[2]:-}") of tag_bw, $(ratio "$best" "${perf_cuda[0]:-}") of ucp_put_bw (8 MiB); $(ratio "$best" "${perf_cuda[3]:-}") of ucp_am_bw -e at $((perf_big >> 20)) MiB"
    } | tee -a "$summary"
fi
rm -f "$out/gbs.tmp" "$out/perf.tmp"
# 8. wstream-model's predictions for the published refits (ANCHORS.md),
#    with this run's repack, digest and pinned copy rates.
if [ -x "$bin/wstream-model" ]; then
    echo | tee -a "$summary"
    echo "wstream-model, this run's GPU rates (tools/model/anchors.sh --gpu-summary kernels.txt):" |
        tee -a "$summary"
    sh "$root/tools/model/anchors.sh" "$bin/wstream-model" \
        --gpu-summary "$out/kernels.txt" 2>>"$log" | tee -a "$summary"
fi
echo "total $(($(date +%s) - t0)) s; failed=$failed" | tee -a "$summary"
exit $failed
