#!/usr/bin/python3
"""check_containerfile.py - checks deploy/Containerfile without building it
(no image builder runs on the project's machines).

  1. Every package the Containerfile installs is in Debian's archive as
     this host's apt sees it (apt-cache show; the machines run Debian 12,
     the image's base).
  2. The build stage installs only packages of .ci/debian-packages; the
     runtime stage no -dev package, compiler or build tool.
  3. The image is wstream-agent:<project version>: the LABEL, the build
     command in the header, and every wstream-agent image in deploy/*.yaml
     (none left as REPLACE-ME) carry CMakeLists.txt's version; the
     entrypoint is the agent the build stage installs.
  4. With --agent PATH (a built wstream-agent): every library it loads
     (readelf -d NEEDED) comes from a package the runtime stage installs,
     or from libc6 or libgcc-s1 (in every Debian image), CUDA's and NCCL's
     aside (the image is built with WST_CUDA=OFF).

Usage: check_containerfile.py [--agent PATH] [--self-test]
--self-test mutates the Containerfile and manifests in memory; every
mutation must be caught. Exit status: 0 good, 1 problems, 77 skipped (no
apt-cache or no package lists).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONTAINERFILE = os.path.join(ROOT, "deploy", "Containerfile")
BUILD_TOOLS = {"build-essential", "cmake", "pkg-config", "gcc", "clang",
               "make", "protobuf-c-compiler"}
# In every Debian image: the C library, and GCC's runtime that it needs.
BASE_IMAGE = {"libc6", "libgcc-s1"}
# Loaded by a CUDA build of the agent only; the image's is WST_CUDA=OFF.
CUDA_ONLY = re.compile(r"^lib(cudart|nccl)\.so")


def read(path):
    with open(path) as f:
        return f.read()


def stages(text):
    """[(name, [package, ...])] per FROM, from its apt-get install lines
    (continuations joined; flags and shell operators dropped)."""
    text = text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("FROM "):
            m = re.search(r"\bAS\s+(\S+)", line, re.I)
            found.append((m.group(1) if m else "runtime", []))
        elif line.startswith("RUN ") and found:
            for cmd in re.split(r"&&|;", line[4:]):
                words = cmd.split()
                if "apt-get" in words and "install" in words:
                    after = words[words.index("install") + 1:]
                    found[-1][1].extend(w for w in after
                                        if not w.startswith("-"))
    return found


def project_version():
    m = re.search(r"project\(wstream VERSION (\d+\.\d+\.\d+)",
                  read(os.path.join(ROOT, "CMakeLists.txt")))
    return m.group(1)


def ci_packages():
    return {line.strip() for line in
            read(os.path.join(ROOT, ".ci", "debian-packages")).splitlines()
            if line.strip() and not line.startswith("#")}


def manifests():
    d = os.path.join(ROOT, "deploy")
    return {n: read(os.path.join(d, n)) for n in sorted(os.listdir(d))
            if n.endswith(".yaml")}


def apt_known(pkgs, cache):
    """Which of pkgs apt has a record of: one apt-cache call for those
    not asked before (each call reads the whole cache, a second or so)."""
    ask = sorted(set(pkgs) - set(cache))
    if ask:
        p = subprocess.run(["apt-cache", "show", "--no-all-versions"] + ask,
                           capture_output=True, text=True)
        found = set(re.findall(r"^Package: (\S+)$", p.stdout, re.M))
        for pkg in ask:
            cache[pkg] = pkg in found
    return {pkg for pkg in pkgs if cache[pkg]}


def check(text, yamls, apt, needed_owners):
    """Problems with the Containerfile text and the manifests."""
    problems = []
    st = stages(text)
    names = [s[0] for s in st]
    if len(st) != 2 or names[0] != "build" or not all(p for _, p in st):
        return ["want two stages, 'build' then the runtime, each with an "
                "apt-get install; found %s" % names]
    (_, build), (_, runtime) = st
    known = apt_known(build + runtime, apt)
    for pkg in build + runtime:
        if pkg not in known:
            problems.append("%s: not a package in Debian's archive" % pkg)
    extra = sorted(set(build) - ci_packages())
    if extra:
        problems.append("build stage installs %s, not in "
                        ".ci/debian-packages" % extra)
    for pkg in runtime:
        if pkg.endswith("-dev") or pkg in BUILD_TOOLS:
            problems.append("runtime stage installs %s, a build package"
                            % pkg)

    version = project_version()
    if not re.search(r'org\.opencontainers\.image\.version="%s"'
                     % re.escape(version), text):
        problems.append("LABEL org.opencontainers.image.version is not %s"
                        % version)
    if "-t wstream-agent:%s ." % version not in text:
        problems.append("the header's build command does not tag "
                        "wstream-agent:%s" % version)
    if 'ENTRYPOINT ["/usr/bin/wstream-agent"]' not in text:
        problems.append("ENTRYPOINT is not /usr/bin/wstream-agent")
    if not re.search(r"--target wstream-agent\b", text) or \
            "/out/usr/bin/wstream-agent" not in text or \
            "COPY --from=build /out/ /" not in text:
        problems.append("the build stage does not build and install "
                        "wstream-agent into the runtime stage")
    images = [(n, m) for n, y in yamls.items()
              for m in re.findall(r"image:\s*(\S*wstream-agent:\S+)", y)]
    if not images:
        problems.append("deploy/*.yaml names no wstream-agent image")
    for name, image in images:
        if not image.endswith("/wstream-agent:" + version):
            problems.append("%s: image %s is not wstream-agent:%s"
                            % (name, image, version))

    for lib, owner in needed_owners:
        if owner not in runtime and owner not in BASE_IMAGE:
            problems.append("the agent loads %s (package %s), which the "
                            "runtime stage does not install" % (lib, owner))
    return problems


def agent_libraries(agent):
    """[(soname, owning package or None)] the agent needs, CUDA's aside."""
    out = subprocess.run(["readelf", "-d", agent], check=True,
                         capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", out)
    ldd = subprocess.run(["ldd", agent], check=True, capture_output=True,
                         text=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
    needed = [lib for lib in needed if not CUDA_ONLY.match(lib)]
    # usrmerge: a package lists its file under /lib or /usr/lib, by the
    # soname's link or the file itself; ask dpkg for each spelling, in one
    # dpkg -S (it reads every package's file list each call).
    spellings = {}
    for lib in needed:
        path = paths.get(lib, lib)
        for name in {path, os.path.realpath(path)}:
            tail = re.sub(r"^(/usr)?/lib/", "", name)
            spellings.update({"/lib/" + tail: lib, "/usr/lib/" + tail: lib})
    p = subprocess.run(["dpkg", "-S"] + sorted(spellings),
                       capture_output=True, text=True)
    owner_of = {}
    for pkg, f in re.findall(r"^(\S+): (\S+)$", p.stdout, re.M):
        if f in spellings:
            owner_of[spellings[f]] = pkg.split(":")[0]
    return [(lib, owner_of.get(lib)) for lib in needed]


def self_test(text, yamls, apt, owners):
    """Each mutation must give a problem; returns the ones that did not."""
    version = project_version()
    agent_yaml = "engine-statefulset.yaml"
    mutations = {
        "unknown package": text.replace("libxxhash0", "libxxhash0-nosuch"),
        "-dev at runtime": text.replace("libjson-c5", "libjson-c-dev"),
        "build package not in .ci": text.replace(
            "libcmocka-dev", "libcmocka-dev libgtest-dev"),
        "runtime library missing": text.replace(" libmicrohttpd12", ""),
        "label version": text.replace(
            'version="%s"' % version, 'version="9.9.9"'),
        "entrypoint": text.replace('ENTRYPOINT ["/usr/bin/wstream-agent"]',
                                   'ENTRYPOINT ["/bin/sh"]'),
        "one stage": text.split("\nFROM docker.io/library/debian:12-slim\n")
        [0],
    }
    # Every package name of every mutation in one apt-cache call.
    apt_known([pkg for m in mutations.values() for _, pkgs in stages(m)
               for pkg in pkgs], apt)
    missed = []
    for what, mutated in mutations.items():
        if mutated == text:
            missed.append("%s: the mutation changed nothing" % what)
        elif not check(mutated, yamls, apt, owners):
            missed.append("%s: not caught" % what)
    for what, image in (("manifest tag", "wstream-agent:0.0.9"),
                        ("manifest placeholder", "wstream-agent:REPLACE-ME")):
        bad = dict(yamls)
        bad[agent_yaml] = re.sub(r"wstream-agent:%s" % re.escape(version),
                                 image, bad[agent_yaml], count=1)
        if bad[agent_yaml] == yamls[agent_yaml] or \
                not check(text, bad, apt, owners):
            missed.append("%s: not caught" % what)
    return missed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    apt = {}
    if shutil.which("apt-cache") is None or not apt_known(["libc6"], apt):
        print("skipped: no apt-cache or no package lists (apt-get update)")
        return 77
    text, yamls = read(CONTAINERFILE), manifests()
    owners = agent_libraries(args.agent) if args.agent else []
    if args.agent and not owners:
        print("%s: no NEEDED libraries read" % args.agent)
        return 1
    problems = check(text, yamls, apt, owners)
    for p in problems:
        print("deploy/Containerfile: " + p)
    if args.self_test:
        missed = self_test(text, yamls, apt, owners)
        for m in missed:
            print("self-test: " + m)
        problems += missed
    if not problems:
        print("deploy/Containerfile: ok (%d libraries checked)"
              % len(owners))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
