#!/bin/sh
# tests/gpu/fetch-deps.sh DIR - downloads (never installs) the Debian 12
# packages the GPU machine needs to build wstream (../shared/GPU.md) into
# DIR, for tests/gpu/run.sh OUT DIR there; DIR/ifmissing holds libgnutls30
# and its own libraries, used only where that machine's image lacks them.
# Keep DIR out of git (.git/info/exclude) and carry it to the machine.
set -eu
dir=${1:?usage: tests/gpu/fetch-deps.sh DIR}
mkdir -p "$dir/ifmissing"
cd "$dir"
apt-get download libucx0 libucx-dev ucx-utils libibverbs1 librdmacm1 \
    libnuma1 libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler \
    libprotoc32 libprotobuf32 libcmocka0 libcmocka-dev libxxhash0 \
    libxxhash-dev libjson-c5 libjson-c-dev libmicrohttpd12 libmicrohttpd-dev \
    libssl3 libssl-dev
cd ifmissing
apt-get download libgnutls30 libp11-kit0 libtasn1-6 libnettle8 libhogweed6 \
    libidn2-0 libunistring2 libgmp10 libffi8
