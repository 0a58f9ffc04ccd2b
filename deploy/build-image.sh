#!/bin/sh
# build-image.sh - builds the agent image from deploy/Containerfile with
# buildah, on a machine that may have no container registry.
#
# usage: deploy/build-image.sh [--local-base] [TAG]
#
# TAG defaults to wstream-agent:<project version>. The Containerfile starts
# from docker.io/library/debian:12-slim. With --local-base that name is
# first made here, when buildah has no image of that name yet, from
# Debian's own archive (debootstrap --variant=minbase bookworm into a
# buildah working container, committed under the name): what CI and the
# development machines do, as they reach Debian's mirror but no registry.
# Without it buildah pulls the base as usual.
#
# The RUN steps run with chroot isolation and the host's network: the
# machines here have cgroups (v1, hybrid) that crun and runc refuse, and
# the build needs only files and apt. The image is the same either way.
# Needs root, buildah, and debootstrap for --local-base.
set -eu
cd "$(dirname "$0")/.."

local_base=0
if [ "${1:-}" = "--local-base" ]; then
    local_base=1
    shift
fi
if [ "$#" -gt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: $0 [--local-base] [TAG]" >&2
    exit 2
fi
version=$(sed -n 's/^project(wstream VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tag=${1:-wstream-agent:$version}
base=docker.io/library/debian:12-slim

command -v buildah >/dev/null ||
    { echo "build-image: buildah is not installed (apt-get install buildah)" >&2; exit 1; }

if [ "$local_base" = 1 ] && ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null ||
        { echo "build-image: --local-base needs debootstrap" >&2; exit 1; }
    echo "build-image: making $base from Debian's archive (debootstrap)"
    c=$(buildah from scratch)
    root=$(buildah mount "$c")
    if ! debootstrap --variant=minbase bookworm "$root" \
        http://deb.debian.org/debian >/tmp/build-image-debootstrap.log 2>&1; then
        tail -n 20 /tmp/build-image-debootstrap.log >&2
        buildah umount "$c" >/dev/null; buildah rm "$c" >/dev/null
        echo "build-image: debootstrap failed" >&2
        exit 1
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    buildah umount "$c" >/dev/null
    buildah config --cmd /bin/bash "$c"
    buildah commit --rm "$c" "$base" >/dev/null
fi

echo "build-image: building $tag"
pull=missing
[ "$local_base" = 1 ] && pull=never
buildah bud --pull="$pull" --isolation chroot --network host \
    -f deploy/Containerfile -t "$tag" .
