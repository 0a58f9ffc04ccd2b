#!/bin/bash
# tests/gpu/build-ucx.sh [DEST] - builds a CUDA-aware UCX from a pinned
# release's sources, for the GPU machine's direct-path runs
# (tests/gpu/run.sh OUT DEPS UCX). Debian's and Ubuntu's UCX builds have no
# CUDA support, and the GPU machine has no network, so the build happens
# here (no GPU is needed to build) and its installed tree travels there.
#
# DEST (default: build-ucx-cuda in the repository root; build*/ is ignored)
# receives:
#   DEST/src     the release's sources (git archive of the tag; never
#                committed anywhere)
#   DEST/nvml    nvml.h and a link-only libnvidia-ml.so.1 (below)
#   DEST/obj     the object tree
#   DEST/prefix  the installed UCX, stripped, shared libraries only: the one
#                folder to carry to the GPU machine (keep it small: a device
#                call carries 64 MiB in all)
#   DEST/prefix/BUILD-RECORD.txt  what was built and how: tag, commit,
#                configure line, `ucx_info -v`, the transports that came out
# Only DEST/prefix is needed afterwards; the rest can be deleted.
#
# Requirements on the building machine (not CI's: nothing here runs in CI):
#   - the CUDA toolkit (CUDA=/usr/local/cuda by default), with its
#     stubs/libcuda.so for linking;
#   - autoconf, automake, libtool, make, gcc, git
#     (apt-get install autoconf automake libtool);
#   - UCX's git history, a bare repository (UCX_GIT; the search tool's
#     `fetch github:openucx/ucx` leaves one in /work/.mirror);
#   - a public nvml.h: CUDA 13's toolkit here lacks NVML's headers, which
#     UCX's configure requires with --with-cuda; NVIDIA's go-nvml
#     repository carries the header (NVML_GIT, fetched the same way). UCX
#     links the NVML library too, so a link-only stub with its soname is
#     built from our own few lines below; the GPU machine's driver provides
#     the real libnvidia-ml.so.1 at run time.
#
# UCX_TAG picks the release (default v1.13.1: the headers our build compiles
# against here are Debian's UCX 1.13.1, so the same ABI). v1.16.0 builds
# too (one typedef mapped, below) and is what the direct path needs on the
# H200 (NOTES.md, 2026-12-02): 1.13's cuda_ipc exports every buffer it
# registers, which engine memory the agent imported by CUDA IPC refuses;
# 1.16 exports only when a key is packed. v1.18.0 builds the same way;
# its cuda_ipc locks the process-wide peer cache that 1.13-1.17 grow from
# every lane's thread without one (NOTES.md, 2026-12-02: the agent crash
# in the direct checkpoint case). Binaries built against 1.13's
# headers run on 1.16 (UCX keeps its ABI backward compatible), so the build
# keeps Debian's headers and only the loader path changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$root/build-ucx-cuda}
# Absolute: configure runs from DEST/obj.
dest=$(mkdir -p "$dest" && cd "$dest" && pwd)
tag=${UCX_TAG:-v1.13.1}
ucx_git=${UCX_GIT:-/work/.mirror/openucx+ucx/repo}
nvml_git=${NVML_GIT:-/work/.mirror/NVIDIA+go-nvml/repo}
nvml_rev=${NVML_REV:-HEAD}
cuda=${CUDA:-/usr/local/cuda}
jobs=${JOBS:-2}

for tool in autoconf automake libtoolize make gcc git; do
    command -v "$tool" >/dev/null || {
        echo "build-ucx.sh: $tool missing (apt-get install autoconf automake libtool)" >&2
        exit 1
    }
done
[ -f "$cuda/include/cuda.h" ] || {
    echo "build-ucx.sh: no CUDA toolkit at $cuda" >&2
    exit 1
}
commit=$(git --git-dir="$ucx_git" rev-parse "$tag^{commit}")
nvml_commit=$(git --git-dir="$nvml_git" rev-parse "$nvml_rev^{commit}")

rm -rf "$dest/src" "$dest/obj" "$dest/prefix" "$dest/nvml"
mkdir -p "$dest/src" "$dest/obj" "$dest/nvml/include" "$dest/nvml/lib"
prefix=$dest/prefix

# The sources of the tag, as a shallow clone: UCX's configure stamps the
# revision it finds with git into `ucx_info -v`, which must be UCX's own
# commit, not that of a repository around DEST.
rmdir "$dest/src"
git clone -q --depth 1 --branch "$tag" "file://$ucx_git" "$dest/src"
[ "$(git -C "$dest/src" rev-parse HEAD)" = "$commit" ]

# nvml.h from go-nvml, and the stub: only its soname and the symbols UCX's
# configure and link look for matter; the bodies never run (at run time
# the loader finds the driver's libnvidia-ml.so.1 first, the stub is not
# carried).
git --git-dir="$nvml_git" show "$nvml_commit:pkg/nvml/nvml.h" \
    >"$dest/nvml/include/nvml.h"
cat >"$dest/nvml/stub.c" <<'EOF'
/* Link-only stand-in for libnvidia-ml.so.1: never loaded at run time. */
int nvmlInit(void) { return 999; }
int nvmlInit_v2(void) { return 999; }
int nvmlShutdown(void) { return 999; }
const char *nvmlErrorString(int r) { (void)r; return "nvml stub"; }
int nvmlDeviceGetHandleByIndex(void) { return 999; }
int nvmlDeviceGetHandleByIndex_v2(void) { return 999; }
int nvmlDeviceGetFieldValues(void) { return 999; }
int nvmlDeviceGetNvLinkRemotePciInfo(void) { return 999; }
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void) { return 999; }
int nvmlDeviceGetHandleByPciBusId_v2(void) { return 999; }
int nvmlDeviceGetGpuFabricInfo(void) { return 999; }
int nvmlDeviceGetGpuFabricInfoV(void) { return 999; }
int nvmlDeviceGetNvLinkState(void) { return 999; }
int nvmlDeviceGetNvLinkRemoteDeviceType(void) { return 999; }
EOF
gcc -shared -fPIC -o "$dest/nvml/lib/libnvidia-ml.so.1" \
    -Wl,-soname,libnvidia-ml.so.1 "$dest/nvml/stub.c"
ln -sf libnvidia-ml.so.1 "$dest/nvml/lib/libnvidia-ml.so"

(cd "$dest/src" && ./autogen.sh) >"$dest/autogen.log" 2>&1

# Minimal: no docs, examples, java or go; CUDA on; ROCm and the RDMA and
# kernel-module transports off (the GPU machine has no RDMA NIC, and
# knem/xpmem are kernel modules it lacks); threads on (the agent and sender
# use UCX from several threads); release checks as contrib/configure-release
# has them, logging kept for diagnosis.
# UCX 1.16 to 1.18 name a typedef CUDA 13's cudaTypedefs.h has only
# with its version suffix; the same type under the old name, for them.
cppflags="-I$dest/nvml/include"
if grep -q 'PFN_cuMemGetHandleForAddressRange ' \
    "$dest/src/src/uct/cuda/cuda_copy/cuda_copy_md.c" 2>/dev/null &&
    ! grep -q 'PFN_cuMemGetHandleForAddressRange;' \
        "$cuda/include/cudaTypedefs.h"; then
    cppflags="$cppflags -DPFN_cuMemGetHandleForAddressRange=PFN_cuMemGetHandleForAddressRange_v11070"
fi
configure=(
    "$dest/src/configure" --prefix="$prefix"
    --disable-static --enable-shared --enable-mt
    --disable-debug --disable-assertions --disable-params-check
    --disable-doxygen-doc --disable-examples --disable-gtest
    --without-java --without-go --without-rocm --without-knem --without-xpmem
    --without-ugni --without-verbs --without-rdmacm --without-gdrcopy
    --without-fuse3 --without-mpi --without-valgrind --disable-numa
    --with-cuda="$cuda"
    CPPFLAGS="$cppflags"
    LDFLAGS="-L$dest/nvml/lib"
)
(cd "$dest/obj" && "${configure[@]}") >"$dest/configure.log" 2>&1 || {
    tail -30 "$dest/configure.log" >&2
    exit 1
}
grep -qE '^#define HAVE_CUDA 1' "$dest/obj/config.h" || {
    echo "build-ucx.sh: configure did not enable CUDA" >&2
    exit 1
}
# The libraries and the two tools only: UCX 1.13's test programs (test/apps)
# call cuCtxCreate, which CUDA 13's cuda.h maps to a cuCtxCreate_v4 of
# more arguments, and are not needed.
: >"$dest/make.log"
: >"$dest/install.log"
for d in src/ucm src/ucs src/uct src/ucp src/tools/info src/tools/perf; do
    make -C "$dest/obj/$d" -j"$jobs" >>"$dest/make.log" 2>&1 || {
        grep -E 'error' "$dest/make.log" | head -20 >&2
        exit 1
    }
done
for d in src/ucm src/ucs src/uct src/ucp src/tools/info src/tools/perf; do
    make -C "$dest/obj/$d" install >>"$dest/install.log" 2>&1
done
make -C "$dest/obj" install-pkgconfigDATA >>"$dest/install.log" 2>&1

# Small: no libtool archives, no examples or docs, stripped.
find "$prefix" -name '*.la' -delete
rm -rf "$prefix/share/ucx/examples" "$prefix/share/doc"
find "$prefix/bin" "$prefix/lib" -type f \( -perm -u+x -o -name '*.so*' \) \
    -exec strip --strip-unneeded {} + 2>/dev/null || true

# The record. ucx_info runs here without a GPU: -v and the built modules
# are what can be seen; -d/-b need a device for the cuda transports'
# resources and are printed on the GPU machine by tests/gpu/run.sh.
rec=$prefix/BUILD-RECORD.txt
info() { LD_LIBRARY_PATH="$prefix/lib:$cuda/lib64" "$prefix/bin/ucx_info" "$@" 2>&1; }
{
    echo "UCX $tag, commit $commit, from $ucx_git"
    echo "nvml.h from NVIDIA/go-nvml commit $nvml_commit (pkg/nvml/nvml.h)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(gcc --version | head -1)"
    echo "CUDA: $("$cuda/bin/nvcc" --version | tail -1)"
    echo "configure: ${configure[*]}"
    echo
    echo "== ucx_info -v"
    info -v
    echo
    echo "== modules built (lib/ucx)"
    (cd "$prefix/lib/ucx" && ls)
    echo
    echo "== CUDA libraries the CUDA modules need"
    for m in "$prefix"/lib/ucx/libuct_cuda.so* "$prefix"/lib/ucx/libucm_cuda.so*; do
        [ -L "$m" ] || readelf -d "$m" | grep NEEDED | sed "s|^|$(basename "$m"): |"
    done
    echo
    echo "== ucx_info -d here (no GPU on this machine: no cuda resources)"
    info -d | grep -E '^# (Memory domain|Transport|   Component)' || true
    echo
    echo "== size"
    du -sh "$prefix"
} >"$rec"
cat "$rec"
