#!/bin/bash
# lane_devices.sh BENCH - run by netns.sh with WST_NETNS_PAIRS=2: one agent
# and one sender in two namespaces joined by two veth pairs (two NICs a
# side). With 2 lanes and one device per lane on each side, both links
# must carry a share of the refits' data; the bytes are read from the
# agent's links (/sys/class/net/LINK/statistics/rx_bytes). With
# LANE_DEVICES_CASE=off the same run names no devices and expects the
# second link to stay idle: the check that the first case fails without
# lane devices (the agent's UCX is then confined to the first link).
set -u
bench=${1:?usage: lane_devices.sh BENCH}
: "${WST_AGENT_NS:?run by netns.sh}" "${WST_VETH2:?needs WST_NETNS_PAIRS=2}"

rx() { ip netns exec "$WST_AGENT_NS" cat "/sys/class/net/$1/statistics/rx_bytes"; }

size_mib=64
repeats=2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
a0=$(rx "$WST_VETH"); b0=$(rx "$WST_VETH2")
args=(--transport tcp --lanes 2 --size ${size_mib}m --repeats $repeats
      --perftest=no --agent-netns "$WST_AGENT_NS"
      --sender-netns "$WST_SENDER_NS" --agent-host "$WST_AGENT_IP")
if [ "${LANE_DEVICES_CASE:-on}" != off ]; then
    args+=(--agent-lane-devices "$WST_VETH,$WST_VETH2"
           --sender-lane-devices "$WST_SENDER_VETH,$WST_SENDER_VETH2")
fi
"$bench" "${args[@]}" >"$out" 2>&1
rc=$?
grep -E '^verify:|^wstream-bench: transport' "$out" | cut -c1-200
if [ $rc -ne 0 ]; then
    tail -30 "$out"
    echo "FAIL: wstream-bench exited $rc"
    exit 1
fi
a=$(( $(rx "$WST_VETH") - a0 )); b=$(( $(rx "$WST_VETH2") - b0 ))
# The first refit and the repeats: (1 + repeats) versions of the model.
total=$(( (1 + repeats) * size_mib * 1048576 ))
echo "agent rx bytes: $WST_VETH $a, $WST_VETH2 $b (data moved: $total)"
if [ "${LANE_DEVICES_CASE:-on}" = off ]; then
    if [ "$b" -ge $(( total / 10 )) ]; then
        echo "FAIL: without lane devices the second link carried $b bytes"
        exit 1
    fi
    echo "PASS: without lane devices the second link stayed idle"
    exit 0
fi
# Lanes take the am messages by bytes in flight: each link at least a
# quarter of the data (half each when the links are alike).
for n in "$a" "$b"; do
    if [ "$n" -lt $(( total / 4 )) ]; then
        echo "FAIL: a link carried $n of $total bytes: the lanes do not share the links"
        exit 1
    fi
done
echo "PASS: both links carried a share"
