"""libs.*_exports: a shared library as a host process sees it.

    check_exports.py LIB --api HEADER... --agent AGENT
                     --agent-only NAME... [--forbid NAME...]

Its exported dynamic symbols must be exactly the functions that the
public headers HEADER... declare (each a wst_ name): nothing internal
leaks into an engine or a trainer that loads it, and nothing public is
missing. None of its NEEDED entries may be an agent-only library
(lib<NAME>.so*): --agent-only names the ones AGENT (wstream-agent) must
itself need, which shows the names match real entries; --forbid others
that nothing of the libraries may need (an optional one the agent may
not link). Exit 0 when all holds, 1 with every violation listed.
"""
import argparse
import re
import subprocess
import sys


def declared_functions(paths):
    """The wst_ functions a header declares (not macros, not function
    pointer types or members, not calls in comments)."""
    names = set()
    for path in paths:
        with open(path) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
        # A declaration: a return type, then the name and its '('.
        for stmt in re.split(r"[;{}]", text):
            m = re.match(r"\s*(?:[A-Za-z_]\w*[\s*]+)+(wst_\w+)\s*\(", stmt)
            if m:
                names.add(m.group(1))
    return names


def run(argv):
    return subprocess.run(argv, check=True, capture_output=True,
                          text=True).stdout


def exported(lib):
    """The names of the defined dynamic symbols (version suffix dropped)."""
    out = run(["nm", "-D", "--defined-only", lib])
    return {line.split()[-1].split("@")[0] for line in out.splitlines()
            if line.strip()}


def needed(path):
    out = run(["readelf", "-d", "-W", path])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def is_lib(entry, name):
    return re.match(r"lib%s\.so(\.|$)" % re.escape(name), entry) is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("--api", nargs="+", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--agent-only", nargs="+", required=True)
    ap.add_argument("--forbid", nargs="*", default=[])
    a = ap.parse_args()

    errors = []
    api = declared_functions(a.api)
    if not api:
        errors.append("no wst_ function declared in %s" % " ".join(a.api))
    syms = exported(a.lib)
    for s in sorted(syms - api):
        why = "not a wst_ name" if not s.startswith("wst_") else \
            "not declared in the public headers"
        errors.append("exported %s: %s" % (s, why))
    for s in sorted(api - syms):
        errors.append("public function %s is not exported" % s)

    lib_needs, agent_needs = needed(a.lib), needed(a.agent)
    for name in a.agent_only:
        if not any(is_lib(e, name) for e in agent_needs):
            errors.append("the agent does not need lib%s.so (NEEDED: %s): "
                          "is it still agent-only?"
                          % (name, ", ".join(agent_needs)))
    for name in a.agent_only + a.forbid:
        for e in lib_needs:
            if is_lib(e, name):
                errors.append("NEEDED %s: an agent-only library" % e)

    print("%s: exports %d symbols (%s); NEEDED %s"
          % (a.lib, len(syms), ", ".join(sorted(syms)), ", ".join(lib_needs)))
    for e in errors:
        print("FAIL: " + e)
    if not errors:
        print("PASS: exports are exactly the %d public functions of %s; no "
              "agent-only library (%s) needed"
              % (len(api), ", ".join(a.api), ", ".join(a.agent_only +
                                                       a.forbid)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
