#!/bin/sh
# smoke.sh - runs wstream-topology on a sysfs fixture tree and checks what
# it prints: smoke.sh WSTREAM_TOPOLOGY FIXTURE_DIR NAME (NAME.topo there).
set -eu
tool=$1
fixtures=$2
name=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/topology-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sh "$fixtures/mktree.sh" "$fixtures/$name.topo" "$tmp/sys"

fail() {
    echo "FAIL: $*" >&2
    echo "--- output:" >&2
    cat "$tmp/out" "$tmp/err" >&2
    exit 1
}

expect() { # a fixed string in what it printed
    grep -qF -- "$1" "$tmp/out" || fail "'$1' not printed"
}

"$tool" --sysfs "$tmp/sys" >"$tmp/out" 2>"$tmp/err" ||
    fail "exit status $?"
cat "$tmp/out"
expect "ibverbs: not asked (a sysfs tree other than /sys)"
case $name in
dgx-h100)
    expect "rdma ports: 12 on 12 device(s)"
    expect "NIC0   mlx5_0:1  ACTIVE  400 Gb/s  InfiniBand  pci 0000:18:00.0  numa 0"
    expect "gpus: 8"
    expect "  gpu           numa    NIC0  NIC1  NIC2  NIC3  NIC4  NIC5  NIC6  NIC7  NIC8  NIC9  NIC10 NIC11  choice"
    expect "  0000:1b:00.0  numa  0 PXB   NODE  NODE  NODE  NODE  NODE  SYS   SYS   SYS   SYS   SYS   SYS    UCX_NET_DEVICES=mlx5_0:1 (PXB)"
    expect "  0000:9d:00.0  numa  1 SYS   SYS   SYS   SYS   SYS   SYS   PXB   NODE  NODE  NODE  NODE  NODE   UCX_NET_DEVICES=mlx5_6:1 (PXB)"
    expect "  0000:df:00.0  numa  1 SYS   SYS   SYS   SYS   SYS   SYS   NODE  NODE  NODE  NODE  NODE  PXB    UCX_NET_DEVICES=mlx5_11:1 (PXB)"
    ;;
no-rdma)
    expect "no RDMA device: UCX chooses"
    expect "  0000:01:00.0  numa -1  UCX chooses"
    expect "  0000:02:00.0  numa -1  UCX chooses"
    ;;
h200-vm)
    expect "no RDMA device: UCX chooses"
    expect "gpus: 1"
    expect "  0000:00:06.0  numa -1  UCX chooses"
    ;;
port-down)
    expect "NIC0   mlx5_0:1  DOWN    0 Gb/s  Ethernet  pci 0000:04:00.0"
    expect "NIC3   rxe0:1  ACTIVE  10 Gb/s  Ethernet  pci none  numa -1"
    expect "  0000:03:00.0  numa  0 PIX   PHB   SYS   ?      UCX_NET_DEVICES=mlx5_1:1 (PHB)"
    expect "  0000:07:00.0  numa  0 PHB   PIX   SYS   ?      UCX_NET_DEVICES=mlx5_1:1 (PIX)"
    ;;
two-nics)
    expect "UCX_NET_DEVICES=mlx5_1:1,mlx5_0:1 (PIX)"
    # one GPU by nvidia-smi's bus id; an unknown one is refused (26)
    "$tool" --sysfs "$tmp/sys" --no-verbs --gpu 00000000:03:00.0 \
        >"$tmp/out" 2>"$tmp/err" || fail "--gpu: exit status $?"
    expect "gpus: 1"
    # several, comma-separated (a NIC's function too: taken when named)
    "$tool" --sysfs "$tmp/sys" --no-verbs --gpu 0000:03:00.0,0000:04:00.0 \
        >"$tmp/out" 2>"$tmp/err" || fail "--gpu list: exit status $?"
    expect "gpus: 2"
    expect "  0000:04:00.0  numa"
    # bad usage (2): a repeated --gpu would drop all but its last value
    rc=0
    "$tool" --sysfs "$tmp/sys" --gpu 0000:03:00.0 --gpu 0000:04:00.0 \
        >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 2 ] || fail "repeated --gpu: exit status $rc, not 2"
    grep -qF -- "--gpu given 2 times" "$tmp/err" ||
        fail "repeated --gpu: not said on stderr"
    rc=0
    "$tool" --sysfs "$tmp/sys" --no-such-option >"$tmp/out" 2>"$tmp/err" ||
        rc=$?
    [ "$rc" -eq 2 ] || fail "unknown option: exit status $rc, not 2"
    rc=0
    "$tool" --sysfs "$tmp/sys" --no-verbs --gpu 0000:09:00.0 \
        >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 26 ] || fail "unknown --gpu: exit status $rc, not 26"
    grep -qF "gpu 0000:09:00.0: no PCI device with that bus id" "$tmp/err" ||
        fail "unknown --gpu: not named on stderr"
    [ ! -s "$tmp/out" ] || fail "unknown --gpu: printed something"
    # a malformed tree: refused with WST_ERR_IO (15), the file named
    echo fast >"$tmp/sys/class/infiniband/mlx5_0/ports/1/rate"
    rc=0
    "$tool" --sysfs "$tmp/sys" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 15 ] || fail "malformed rate: exit status $rc, not 15"
    grep -qF "mlx5_0/ports/1/rate: rate 'fast' is not" "$tmp/err" ||
        fail "malformed rate: the file not named on stderr"
    ;;
*) fail "no expectations for fixture '$name'" ;;
esac
echo "ok: $name"
