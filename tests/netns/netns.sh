#!/bin/bash
# netns.sh - two network namespaces joined by a veth pair, for the fault and
# namespace tests.
#
#   netns.sh setup [TAG]     create them; prints NAME=value lines
#   netns.sh teardown TAG    remove them
#   netns.sh run CMD ARGS... set up, run CMD with WST_AGENT_NS, WST_SENDER_NS,
#                            WST_AGENT_IP, WST_SENDER_IP, WST_VETH (the agent
#                            side's link) and WST_SENDER_VETH set, and the
#                            placeholders @AGENT_NS@ @SENDER_NS@ @AGENT_IP@
#                            @SENDER_IP@ @VETH@ @SENDER_VETH@ in ARGS replaced;
#                            always tears down; exits with CMD's status.
#
# Names are unique per run (pid), addresses 10.123.N.1/24 (agent) and
# 10.123.N.2/24 (sender), N = pid % 250 + 1. With WST_NETNS_PAIRS=2 a second
# veth pair joins them too (two NICs a side): 10.124.N.1/24 and .2/24, its
# links in WST_VETH2 and WST_SENDER_VETH2, @VETH2@ @SENDER_VETH2@
# @AGENT_IP2@ in ARGS. Needs root: exits 77 (ctest skip) otherwise.
set -u

need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "SKIP: needs root for network namespaces" >&2
        exit 77
    fi
    if ! command -v ip >/dev/null; then
        echo "SKIP: needs root for network namespaces (no 'ip' command)" >&2
        exit 77
    fi
    # Entering a namespace remounts /sys privately (ip netns exec, and the
    # cluster's join_netns), which needs / to be a mount point: in a chroot
    # it is not, and every process started in a namespace would fail.
    if ! awk '$5 == "/" { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        echo "SKIP: / is not a mount point here (a chroot?): processes cannot enter a network namespace" >&2
        exit 77
    fi
}

names() {
    local tag=$1
    AGENT_NS=wsta-$tag
    SENDER_NS=wsts-$tag
    VETH=wva$tag     # inside the agent namespace (<= 15 chars)
    SENDER_VETH=wvs$tag
    local n=$(( tag % 250 + 1 ))
    AGENT_IP=10.123.$n.1
    SENDER_IP=10.123.$n.2
    VETH2=wvb$tag
    SENDER_VETH2=wvt$tag
    AGENT_IP2=10.124.$n.1
    SENDER_IP2=10.124.$n.2
}

do_teardown() {
    names "$1"
    ip netns del "$AGENT_NS" 2>/dev/null
    ip netns del "$SENDER_NS" 2>/dev/null
    ip link del "$VETH" 2>/dev/null
    ip link del "$SENDER_VETH" 2>/dev/null
    ip link del "$VETH2" 2>/dev/null
    ip link del "$SENDER_VETH2" 2>/dev/null
    return 0
}

do_setup() {
    names "$1"
    set -e
    ip netns add "$AGENT_NS"
    ip netns add "$SENDER_NS"
    ip link add "$VETH" type veth peer name "$SENDER_VETH"
    ip link set "$VETH" netns "$AGENT_NS"
    ip link set "$SENDER_VETH" netns "$SENDER_NS"
    ip -n "$AGENT_NS" addr add "$AGENT_IP/24" dev "$VETH"
    ip -n "$SENDER_NS" addr add "$SENDER_IP/24" dev "$SENDER_VETH"
    for ns in "$AGENT_NS" "$SENDER_NS"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$AGENT_NS" link set "$VETH" up
    ip -n "$SENDER_NS" link set "$SENDER_VETH" up
    if [ "${WST_NETNS_PAIRS:-1}" = 2 ]; then
        ip link add "$VETH2" type veth peer name "$SENDER_VETH2"
        ip link set "$VETH2" netns "$AGENT_NS"
        ip link set "$SENDER_VETH2" netns "$SENDER_NS"
        ip -n "$AGENT_NS" addr add "$AGENT_IP2/24" dev "$VETH2"
        ip -n "$SENDER_NS" addr add "$SENDER_IP2/24" dev "$SENDER_VETH2"
        ip -n "$AGENT_NS" link set "$VETH2" up
        ip -n "$SENDER_NS" link set "$SENDER_VETH2" up
    fi
    set +e
    echo "TAG=$1"
    echo "AGENT_NS=$AGENT_NS"
    echo "SENDER_NS=$SENDER_NS"
    echo "AGENT_IP=$AGENT_IP"
    echo "SENDER_IP=$SENDER_IP"
    echo "VETH=$VETH"
    echo "SENDER_VETH=$SENDER_VETH"
}

cmd=${1:-}
shift || true
case "$cmd" in
setup)
    need_root
    tag=${1:-$$}
    if ! do_setup "$tag"; then
        echo "netns.sh: setup failed" >&2
        do_teardown "$tag"
        exit 1
    fi
    ;;
teardown)
    need_root
    [ $# -eq 1 ] || { echo "usage: netns.sh teardown TAG" >&2; exit 2; }
    do_teardown "$1"
    ;;
run)
    need_root
    [ $# -ge 1 ] || { echo "usage: netns.sh run CMD [ARGS...]" >&2; exit 2; }
    tag=$$
    trap 'do_teardown "$tag"' EXIT
    trap 'exit 143' TERM INT
    if ! do_setup "$tag"; then
        echo "netns.sh: setup failed" >&2
        exit 1
    fi
    export WST_AGENT_NS=$AGENT_NS WST_SENDER_NS=$SENDER_NS
    export WST_AGENT_IP=$AGENT_IP WST_SENDER_IP=$SENDER_IP
    export WST_VETH=$VETH WST_SENDER_VETH=$SENDER_VETH
    export WST_VETH2=$VETH2 WST_SENDER_VETH2=$SENDER_VETH2
    export WST_AGENT_IP2=$AGENT_IP2
    args=()
    for a in "$@"; do
        a=${a//@AGENT_NS@/$AGENT_NS}
        a=${a//@SENDER_NS@/$SENDER_NS}
        a=${a//@AGENT_IP@/$AGENT_IP}
        a=${a//@SENDER_IP@/$SENDER_IP}
        a=${a//@SENDER_VETH@/$SENDER_VETH}
        a=${a//@VETH@/$VETH}
        a=${a//@SENDER_VETH2@/$SENDER_VETH2}
        a=${a//@VETH2@/$VETH2}
        a=${a//@AGENT_IP2@/$AGENT_IP2}
        args+=("$a")
    done
    "${args[@]}"
    rc=$?
    exit $rc
    ;;
*)
    echo "usage: netns.sh setup [TAG] | teardown TAG | run CMD [ARGS...]" >&2
    exit 2
    ;;
esac
