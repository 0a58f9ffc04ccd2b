#!/usr/bin/env bash
# image_refit.sh - the agent image (deploy/Containerfile) serves a refit.
#
# usage: image_refit.sh IMAGE VERSION SEND PYTHON HELPER
#
# Runs the image's own /usr/bin/wstream-agent (its libraries, not the
# host's) in a chroot of the image's file tree: buildah mounts the image,
# the host's /dev/shm, /proc, /sys and a work folder are bound into it, and
# the network is the host's (a container in a pod shares /dev/shm with the
# engine as deploy/engine-statefulset.yaml does). Checks that the agent
# answers --version with VERSION, loads every library it needs from the
# image, then that this build's wstream-send pushes a checkpoint of every
# dtype into it and the live shm holds exactly the checkpoint's bytes
# (HELPER: tests/tools/write_safetensors.py). A chroot, not a container
# runtime: CI's and the development machines' cgroups (v1, hybrid) do not
# let crun or runc start one, and the chroot runs the same files.
# Needs root and buildah.
set -euo pipefail

if [ "$#" -ne 5 ]; then
    echo "usage: $0 IMAGE VERSION SEND PYTHON HELPER" >&2
    exit 2
fi
image=$1
version=$2
send=$3
py=$4
helper=$5

work=$(mktemp -d "${TMPDIR:-/tmp}/wst-image.XXXXXX")
tag="wst-image-$$"
container=
root=
agent_pid=
mounted=()

cleanup() {
    if [ -n "$agent_pid" ]; then
        kill "$agent_pid" 2>/dev/null || true
        wait "$agent_pid" 2>/dev/null || true
    fi
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
    done
    if [ -n "$container" ]; then
        buildah umount "$container" >/dev/null 2>&1 || true
        buildah rm "$container" >/dev/null 2>&1 || true
    fi
    rm -f /dev/shm/"$tag"-*
    rm -rf "$work"
}
trap cleanup EXIT

say() { echo "image: $*"; }
fail() {
    echo "image: FAIL: $*" >&2
    [ -f "$work/agent.log" ] && { echo "--- agent.log" >&2; tail -n 20 "$work/agent.log" >&2; }
    exit 1
}
bind() { # bind SRC DST-inside-root
    mkdir -p "$root$2"
    mount --bind "$1" "$root$2" || fail "mount --bind $1 $root$2"
    mounted+=("$root$2")
}

command -v buildah >/dev/null || fail "buildah is not installed"
container=$(buildah from --pull=never "$image") || fail "buildah from $image"
root=$(buildah mount "$container") || fail "buildah mount $container"
# What a container runtime would give the agent (UCX reads /proc and /sys
# as the library loads).
mount -t proc proc "$root/proc" || fail "mount proc"
mounted+=("$root/proc")
bind /sys /sys
bind /dev/shm /dev/shm
bind "$work" /work

out=$(chroot "$root" /usr/bin/wstream-agent --version) ||
    fail "the image's wstream-agent --version exited $?"
[ "$out" = "wstream-agent $version" ] ||
    fail "the image's agent says '$out', expected 'wstream-agent $version'"
missing=$(chroot "$root" ldd /usr/bin/wstream-agent | grep 'not found' || true)
[ -z "$missing" ] || fail "libraries missing from the image: $missing"
say "$image: $out, every library from the image"


(umask 077 && head -c 32 /dev/urandom >"$work/secret")
"$py" "$helper" write "$work/ck" --case single --seed 23 || fail "write checkpoint"
"$py" "$helper" layout "$work/ck" "$work/layout.json" --shm "$tag-a" \
    --rank 0 --part all || fail "layout"
chroot "$root" /usr/bin/wstream-agent --layout /work/layout.json \
    --listen 127.0.0.1:0 --port-file /work/port \
    --status-file /work/status.json --auth-secret-file /work/secret \
    --log-level info >"$work/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 200); do
    [ -s "$work/port" ] && break
    kill -0 "$agent_pid" 2>/dev/null || fail "the image's agent exited"
    sleep 0.05
done
[ -s "$work/port" ] || fail "the image's agent wrote no port"
port=$(cat "$work/port")

WST_AUTH_SECRET_FILE="$work/secret" "$send" "$work/ck/model.safetensors" \
    --receivers "127.0.0.1:$port" --weights-version 1 --progress none \
    >"$work/send.log" 2>&1 || { cat "$work/send.log" >&2; fail "wstream-send exited $?"; }
for _ in $(seq 100); do
    grep -q '"committed_version": 1,' "$work/status.json" 2>/dev/null && break
    sleep 0.05
done
grep -q '"committed_version": 1,' "$work/status.json" ||
    fail "the image's agent did not report version 1 committed"
"$py" "$helper" verify "$work/ck" "$work/layout.json" ||
    fail "the live shm differs from the checkpoint"
say "$(tail -n 1 "$work/send.log")"
say "the image's agent committed version 1, every byte as the checkpoint's"
