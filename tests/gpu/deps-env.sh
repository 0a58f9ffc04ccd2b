# tests/gpu/deps-env.sh DEPS_DIR LOG - sourced, not run: unpacks the Debian
# 12 .deb files of tests/gpu/fetch-deps.sh into /opt/deps (never into /) on
# a machine that has none of the build's dependencies, and points the
# compiler, pkg-config, cmake and the loader at them. Notes go to LOG.
# Used by tests/gpu/run.sh and tests/fault/run-campaign.sh.
deps_dir=$1
deps_log=$2
for f in "$deps_dir"/*.deb; do dpkg -x "$f" /opt/deps; done
# The .pc files name /usr: pkg-config prefixes their paths with this.
export PKG_CONFIG_SYSROOT_DIR=/opt/deps
export PATH=/opt/deps/usr/bin:$PATH
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_PATH=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/deps/usr/share/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
export CMAKE_PREFIX_PATH=/opt/deps/usr
# libmicrohttpd needs libgnutls.so.30, which the machine's image may
# lack: then DEPS_DIR/ifmissing's copy (and its own dependencies) come
# last in the search path, so the image's libraries win where it has
# them.
if ! ldconfig -p | grep -q 'libgnutls\.so\.30 ' && [ -d "$deps_dir/ifmissing" ]; then
    for f in "$deps_dir"/ifmissing/*.deb; do dpkg -x "$f" /opt/deps-ifmissing; done
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/deps-ifmissing/usr/lib/x86_64-linux-gnu
    echo "libgnutls.so.30 missing: using $deps_dir/ifmissing" >>"$deps_log"
fi
# libmicrohttpd.pc names gnutls in Requires.private, which pkg-config
# checks exists even for a shared link: a one-line gnutls.pc stands in
# for the -dev package (and its own -dev chain) the build never uses.
if ! pkg-config --exists gnutls; then
    printf 'Name: gnutls\nDescription: stand-in\nVersion: 3.7.9\nLibs: -lgnutls\n' \
        >/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
fi
