#!/usr/bin/python3
"""validate.py - checks the Kubernetes manifests in deploy/.

  1. yamllint --strict with deploy/.yamllint, on every YAML file there.
  2. Every document against the Kubernetes API schema as Debian's
     python3-kubernetes (client v22: the Kubernetes 1.22 API) describes it:
     each mapping is walked with its model's attribute_map and openapi_types
     (nested models, list[...], dict(str, ...)); an unknown key, a scalar of
     the wrong type (str, int, bool) or a missing required field (the model
     constructors' client-side validation) is a problem. Fields newer than
     the client are accepted only if NEWER_FIELDS names them, with the
     Kubernetes version that added them: nothing unknown passes silently.
  3. Cross-references: Service selectors against pod labels, ConfigMaps and
     volumes that are referenced, probe and Service ports against declared
     container ports, the native sidecar's restartPolicy, and the wstream
     contract: the agent's flags (read from receiver/agent/agent_main.c), its
     layout (receiver/agent/layout_file.h rules, dtypes from
     include/wstream/status.h), the shared volumes, the trainer Job's world
     size and receivers list against the StatefulSet and the headless
     Service.

Usage:
  validate.py                 check deploy/; one line per file; exit 1 on
                              any problem
  validate.py --self-test     mutate the loaded manifests in memory (and lint
                              a bad YAML file); every mutation must be caught
  validate.py --agent PATH    also check against a built wstream-agent: its
                              --help lists the flags this script read, the
                              real option parser accepts the manifest's args,
                              and the agent starts on the ConfigMap's layout
                              and answers /healthz and /readyz; with
                              --self-test, mutations only it can catch too
  kubectl kustomize deploy/ runs as well where kubectl is installed (it is
  optional: not one of the project's packages).

Exit status: 0 all good, 1 problems, 2 bad usage, 77 skipped (yamllint or
python3-kubernetes missing: ctest shows it as skipped).
"""
import argparse
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(ROOT, "deploy")

try:
    import yaml
    import kubernetes
    from kubernetes.client import Configuration
    from kubernetes.client import models as k8s_models
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: python3-kubernetes (and python3-yaml) needed: {e} "
          "(Debian: apt install python3-kubernetes)")
    sys.exit(SKIP)


def yamllint_command():
    """yamllint as a program, or as a module of this Python; None if absent."""
    exe = shutil.which("yamllint")
    if exe:
        return [exe]
    try:
        import yamllint  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "yamllint"]


# ---------------------------------------------------------------------------
# Schema: the v22 client's models, and what it does not know.

CLIENT_VERSION = kubernetes.__version__
CONFIG = Configuration()
CONFIG.client_side_validation = True

# apiVersion/kind -> model class. Anything else is refused.
KINDS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("batch/v1", "Job"): "V1Job",
}

# Fields the v22 client (Kubernetes 1.22 API) does not have, allowed by name.
# (model, JSON key) -> since: the Kubernetes version that added the field;
# type and values: what is accepted; where: a substring the field's path must
# contain, and why.
NEWER_FIELDS = {
    ("V1Container", "restartPolicy"): {
        "since": "1.28 (alpha; beta and on by default in 1.29, GA in 1.33)",
        "type": str,
        "values": {"Always"},
        "where": (".initContainers[",
                  "only initContainers take it: a native sidecar"),
    },
}

# Values the API server accepts, for the enum-like fields used here: the
# v22 models carry no enums.
LINUX_CAPS = {
    "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
    "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH",
    "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
    "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN",
    "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT",
    "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE",
    "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
    "ALL",
}
ENUMS = {
    ("V1PodSpec", "restartPolicy"): {"Always", "OnFailure", "Never"},
    ("V1ContainerPort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1ServicePort", "protocol"): {"TCP", "UDP", "SCTP"},
    ("V1Container", "imagePullPolicy"): {"Always", "IfNotPresent", "Never"},
    ("V1Container", "terminationMessagePolicy"):
        {"File", "FallbackToLogsOnError"},
    ("V1EmptyDirVolumeSource", "medium"): {"", "Memory", "HugePages"},
    ("V1JobSpec", "completionMode"): {"NonIndexed", "Indexed"},
    ("V1StatefulSetSpec", "podManagementPolicy"): {"OrderedReady", "Parallel"},
    ("V1ServiceSpec", "type"):
        {"ClusterIP", "NodePort", "LoadBalancer", "ExternalName"},
}
ENUM_LISTS = {("V1Capabilities", "add"): LINUX_CAPS,
              ("V1Capabilities", "drop"): LINUX_CAPS}

# resource.Quantity fields: the client types them as str, the API accepts a
# JSON number or a string in Quantity syntax.
QUANTITY_MAPS = {("V1ResourceRequirements", "limits"),
                 ("V1ResourceRequirements", "requests")}
QUANTITY_SCALARS = {("V1EmptyDirVolumeSource", "sizeLimit")}
QUANTITY_RE = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|"
    r"[eE][+-]?\d+)?$")
QUANTITY_MULT = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                 "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6, "m": 1e-3,
                 "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                 "E": 1e18}

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")


def iana_svc_name(name):
    """A container port name: <= 15 of [a-z0-9-], a letter, no '--'."""
    return (0 < len(name) <= 15 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
            is not None and re.search(r"[a-z]", name) is not None and "--" not in name)


def label_key_ok(key):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return LABEL_NAME.match(name) is not None


def parse_quantity(q):
    """A Quantity as a float (bytes, cores, units); None if malformed."""
    if isinstance(q, bool) or not isinstance(q, (int, float, str)):
        return None
    if isinstance(q, (int, float)):
        return float(q)
    m = QUANTITY_RE.match(q)
    if not m:
        return None
    num, suffix = float(m.group(1)), m.group(3) or ""
    if suffix[:1] in ("e", "E"):
        return num * 10 ** int(suffix[1:])
    return num * QUANTITY_MULT[suffix]


def type_name(v):
    return {bool: "bool", int: "int", float: "float", str: "str",
            list: "list", dict: "mapping", type(None): "null"}.get(
                type(v), type(v).__name__)


class Schema:
    """Walks one document against the client's models."""

    def __init__(self, problems):
        self.problems = problems  # list of str
        self.newer_used = set()

    def bad(self, path, msg):
        self.problems.append(f"{path}: {msg}")

    def check_document(self, doc, path):
        if not isinstance(doc, dict):
            self.bad(path, f"a document must be a mapping, got {type_name(doc)}")
            return
        key = (doc.get("apiVersion"), doc.get("kind"))
        model = KINDS.get(key)
        if model is None:
            self.bad(path, f"unknown apiVersion/kind {key[0]}/{key[1]} "
                     f"(known: {', '.join(f'{a}/{k}' for a, k in KINDS)})")
            return
        self.walk(doc, model, path)

    def walk(self, value, typ, path):
        """Checks 'value' against client type 'typ'; returns what the model
        constructors take (the raw value where it is wrong, so that one
        mistake is reported once)."""
        if typ.startswith("list["):
            if not isinstance(value, list):
                self.bad(path, f"expected a list ({typ}), got {type_name(value)}")
                return value
            return [self.walk(v, typ[5:-1], f"{path}[{i}]")
                    for i, v in enumerate(value)]
        if typ.startswith("dict("):
            inner = typ[typ.index(",") + 1:-1].strip()
            if not isinstance(value, dict):
                self.bad(path, f"expected a mapping ({typ}), got {type_name(value)}")
                return value
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    self.bad(path, f"key {k!r}: expected str, got {type_name(k)}")
                out[k] = self.walk(v, inner, f"{path}.{k}")
            return out
        if typ == "str":
            if not isinstance(value, str):
                self.bad(path, f"expected str, got {type_name(value)} {value!r}"
                         " (quote it)")
            return value
        if typ == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                self.bad(path, f"expected int, got {type_name(value)} {value!r}")
            return value
        if typ == "bool":
            if not isinstance(value, bool):
                self.bad(path, f"expected bool, got {type_name(value)} {value!r}")
            return value
        if typ == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.bad(path, f"expected a number, got {type_name(value)}")
            return value
        if typ == "object":  # IntOrString wherever these manifests use it
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                self.bad(path, f"expected int or str, got {type_name(value)}")
            return value
        if typ in ("datetime", "date"):
            if not isinstance(value, str):
                self.bad(path, f"expected a {typ} string, got {type_name(value)}")
            return value
        return self.walk_model(value, typ, path)

    def walk_model(self, value, typ, path):
        cls = getattr(k8s_models, typ, None)
        if cls is None:
            self.bad(path, f"internal: no model {typ} in kubernetes {CLIENT_VERSION}")
            return value
        if not isinstance(value, dict):
            self.bad(path, f"expected a mapping ({typ}), got {type_name(value)}")
            return value
        by_json = {j: p for p, j in cls.attribute_map.items()}
        kwargs = {}
        for key, v in value.items():
            sub = f"{path}.{key}"
            if key in by_json:
                attr = by_json[key]
                kwargs[attr] = self.walk_field(v, typ, key, cls.openapi_types[attr], sub)
            elif (typ, key) in NEWER_FIELDS:
                self.walk_newer(v, typ, key, sub)
            else:
                self.bad(sub, f"unknown field of {typ} (Kubernetes API of "
                         f"client {CLIENT_VERSION}; a newer field must be "
                         "listed in NEWER_FIELDS)")
        try:
            return cls(local_vars_configuration=CONFIG, **kwargs)
        except ValueError as e:
            m = re.search(r"`(\w+)`, must not be `None`", str(e))
            if m:
                field = cls.attribute_map.get(m.group(1), m.group(1))
                self.bad(path, f"missing required field '{field}' of {typ}")
            else:
                self.bad(path, f"{typ}: {e}")
            return value

    def walk_field(self, v, model, key, typ, path):
        if (model, key) in QUANTITY_MAPS:
            if not isinstance(v, dict):
                self.bad(path, f"expected a mapping of quantities, got {type_name(v)}")
                return v
            for name, q in v.items():
                if parse_quantity(q) is None:
                    self.bad(f"{path}.{name}", f"not a quantity: {q!r}")
            return v
        if (model, key) in QUANTITY_SCALARS:
            if parse_quantity(v) is None:
                self.bad(path, f"not a quantity: {v!r}")
            return v
        out = self.walk(v, typ, path)
        allowed = ENUMS.get((model, key))
        if allowed is not None and isinstance(v, str):
            ok = v in allowed or (key == "medium" and v.startswith("HugePages-"))
            if not ok:
                self.bad(path, f"{v!r} is not one of {sorted(allowed)}")
        allowed = ENUM_LISTS.get((model, key))
        if allowed is not None and isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, str) and item.removeprefix("CAP_") not in allowed:
                    self.bad(f"{path}[{i}]", f"{item!r} is not a Linux capability")
        self.check_names(model, key, v, path)
        return out

    def walk_newer(self, v, model, key, path):
        spec = NEWER_FIELDS[(model, key)]
        where, why = spec["where"]
        if where not in path:
            self.bad(path, f"{key} is not allowed here: {why} "
                     f"(Kubernetes {spec['since']})")
        elif not isinstance(v, spec["type"]) or isinstance(v, bool):
            self.bad(path, f"expected {spec['type'].__name__}, got {type_name(v)}")
        elif v not in spec["values"]:
            self.bad(path, f"{v!r} is not one of {sorted(spec['values'])} "
                     f"({why})")
        self.newer_used.add(f"{model}.{key} (Kubernetes {spec['since']})")

    def check_names(self, model, key, v, path):
        if not isinstance(v, str) and key not in ("labels", "matchLabels", "selector"):
            return
        if (model, key) in (("V1Container", "name"), ("V1Volume", "name"),
                            ("V1VolumeMount", "name"), ("V1ServicePort", "name")):
            if not DNS_LABEL.match(v):
                self.bad(path, f"{v!r} is not a DNS label")
        elif (model, key) == ("V1ContainerPort", "name"):
            if not iana_svc_name(v):
                self.bad(path, f"{v!r} is not a valid port name (IANA_SVC_NAME: "
                         "<= 15 of a-z 0-9 -, with a letter)")
        elif key in ("labels", "matchLabels") or (model, key) == ("V1ServiceSpec", "selector"):
            if isinstance(v, dict):
                for lk, lv in v.items():
                    if not isinstance(lk, str) or not label_key_ok(lk):
                        self.bad(path, f"bad label key {lk!r}")
                    if isinstance(lv, str) and not LABEL_VALUE.match(lv):
                        self.bad(f"{path}.{lk}", f"bad label value {lv!r}")


# ---------------------------------------------------------------------------
# Facts read from the source tree, so they cannot drift.

def agent_flags():
    """{flag: (type, choices)} from the agent's config table.

    Its entries for the receiver's settings are WST_CONFIG_LIKE_ENTRYs:
    their type and choices are those of the receiver's table entry they
    point at (receiver/receiver_config.c)."""
    src = open(os.path.join(ROOT, "receiver", "agent", "agent_main.c")).read()
    lib = open(os.path.join(ROOT, "receiver", "receiver_config.c")).read()
    choices = {}
    # the tables' choice lists: their own, and those they share (log levels)
    for text in (src, lib, open(os.path.join(ROOT, "common", "log.c")).read()):
        for m in re.finditer(r"(?:static )?const char \*const (\w+)\[\] = \{([^}]*)\}",
                             text):
            choices[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
    like = {}
    for m in re.finditer(r'\[(WST_RECV_CONFIG_\w+)\]\s*=\s*\{"[a-z][a-z-]*",\s*'
                         r'WST_CONFIG_([A-Z]+),.*?,\s*(\w+),\s*\w+\}', lib, re.S):
        like[m.group(1)] = (m.group(2), choices.get(m.group(3)))
    table = src[src.index("agent_config[] = {"):]
    table = table[:table.index("WST_CONFIG_END")]
    flags = {}
    for m in re.finditer(r'\{"([a-z][a-z-]*)",\s*WST_CONFIG_([A-Z]+),.*?'
                         r'offsetof\(struct agent_settings, \w+\),\s*(\w+),\s*\w+\}',
                         table, re.S):
        flags[m.group(1)] = (m.group(2), choices.get(m.group(3)))
    for m in re.finditer(r'WST_CONFIG_LIKE_ENTRY\(\s*"([a-z][a-z-]*)",.*?'
                         r'&wst_recv_config\[(\w+)\]\)', table, re.S):
        flags[m.group(1)] = like[m.group(2)]
    # --auth-secret-file: common/auth.c's one entry, a path
    for m in re.finditer(r'WST_CONFIG_LIKE_ENTRY\(\s*"([a-z][a-z-]*)",'
                         r'(?:(?!WST_CONFIG_LIKE_ENTRY).)*?'
                         r'&wst_auth_config\[\w+\]\)', table, re.S):
        flags[m.group(1)] = ("STRING", None)
    if ("layout" not in flags or "metrics-listen" not in flags
            or flags.get("mover", (None, None))[1] is None):
        raise RuntimeError("cannot read the agent's flags from receiver/agent/agent_main.c")
    return flags


def dtype_sizes():
    src = open(os.path.join(ROOT, "include", "wstream", "status.h")).read()
    sizes = {m.group(1): int(m.group(2)) for m in
             re.finditer(r'X\(WST_DTYPE_\w+, \d+, "(\w+)", (\d+)\)', src)}
    if "bf16" not in sizes:
        raise RuntimeError("cannot read dtypes from include/wstream/status.h")
    return sizes


# ---------------------------------------------------------------------------
# Loading

class Manifest:
    def __init__(self, path, text):
        self.path = path
        self.name = os.path.relpath(path, ROOT)
        self.text = text
        self.docs = []
        self.problems = []


def load(deploy):
    files = sorted(f for f in os.listdir(deploy)
                   if f.endswith((".yaml", ".yml")))
    out = []
    for f in files:
        p = os.path.join(deploy, f)
        m = Manifest(p, open(p).read())
        try:
            m.docs = [d for d in yaml.safe_load_all(m.text)]
        except yaml.YAMLError as e:
            m.problems.append(f"YAML: {e}")
        if any(d is None for d in m.docs):
            m.problems.append("an empty document")
            m.docs = [d for d in m.docs if d is not None]
        out.append(m)
    return out


def run_yamllint(cmd, config, paths):
    """{path: [problem]} from yamllint --strict."""
    r = subprocess.run(cmd + ["--strict", "-f", "parsable", "-c", config] + paths,
                       capture_output=True, text=True)
    found = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(.*?):(\d+):(\d+): \[(\w+)\] (.*)$", line)
        if m:
            found.setdefault(os.path.abspath(m.group(1)), []).append(
                f"yamllint {m.group(2)}:{m.group(3)}: {m.group(4)}: {m.group(5)}")
    if r.returncode not in (0, 1, 2) or (r.returncode != 0 and not found):
        found.setdefault("(yamllint)", []).append(
            f"yamllint exited {r.returncode}: {r.stderr.strip()}")
    return found


# ---------------------------------------------------------------------------
# Cross-references

def meta_name(doc):
    return (doc.get("metadata") or {}).get("name", "?")


class Pod:
    """A workload's pod template."""

    def __init__(self, manifest, doc):
        self.manifest = manifest
        self.doc = doc
        self.kind = doc.get("kind")
        self.name = meta_name(doc)
        spec = doc.get("spec") or {}
        tmpl = spec.get("template") or {}
        self.labels = (tmpl.get("metadata") or {}).get("labels") or {}
        self.annotations = (tmpl.get("metadata") or {}).get("annotations") or {}
        self.spec = tmpl.get("spec") or {}
        self.containers = [c for c in self.spec.get("containers") or [] if isinstance(c, dict)]
        self.inits = [c for c in self.spec.get("initContainers") or [] if isinstance(c, dict)]
        self.volumes = {v.get("name"): v for v in self.spec.get("volumes") or []
                        if isinstance(v, dict)}

    @property
    def where(self):
        return f"{self.kind} {self.name}"

    def all_containers(self):
        return self.inits + self.containers

    def sidecars(self):
        return [c for c in self.inits if c.get("restartPolicy") == "Always"]

    def serving(self):
        """Containers that run alongside the app: regular ones and sidecars."""
        return self.containers + self.sidecars()

    def find(self, name):
        for c in self.all_containers():
            if c.get("name") == name:
                return c
        return None


def ports_of(c):
    return [p for p in c.get("ports") or [] if isinstance(p, dict)]


def env_of(c):
    return {e.get("name"): e for e in c.get("env") or [] if isinstance(e, dict)}


def env_value(c, name):
    e = env_of(c).get(name)
    return None if e is None else e.get("value")


def mount_for(c, path):
    """(mount, path inside the volume) of the mount holding 'path'."""
    best = None
    for m in c.get("volumeMounts") or []:
        mp = (m.get("mountPath") or "").rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0].get("mountPath", "").rstrip("/")):
                rel = path[len(mp):].lstrip("/")
                if m.get("subPath"):
                    rel = m["subPath"].rstrip("/") + ("/" + rel if rel else "")
                best = (m, rel)
    return best


def path_in(c, volume, rel):
    """Where volume/rel appears inside container c, or None."""
    for m in c.get("volumeMounts") or []:
        if m.get("name") == volume and not m.get("subPath"):
            return m["mountPath"].rstrip("/") + ("/" + rel if rel else "")
    return None


def parse_hostport(v):
    m = re.fullmatch(r"(.+):(\d+)", v or "")
    return (m.group(1), int(m.group(2))) if m else (None, None)


class Cross:
    def __init__(self, manifests):
        self.manifests = manifests
        self.by_kind = {}
        self.owner = {}
        self.pods = []
        for m in manifests:
            for d in m.docs:
                if not isinstance(d, dict):
                    continue
                self.by_kind.setdefault(d.get("kind"), {})[meta_name(d)] = d
                self.owner[id(d)] = m
                if d.get("kind") in ("StatefulSet", "Deployment", "Job"):
                    try:
                        self.pods.append(Pod(m, d))
                    except (AttributeError, TypeError) as e:
                        m.problems.append(f"{d.get('kind')} {meta_name(d)}: pod template "
                                          f"not checked, malformed: {e}")
        self.flags = agent_flags()
        self.dtypes = dtype_sizes()
        self.layouts = []  # (manifest, layout dict) checked

    def bad(self, manifest, msg):
        manifest.problems.append(msg)

    def guard(self, manifest, what, fn, *args):
        """Runs one check; a value of the wrong shape (already reported by
        the schema walk) stops that check, not the whole run."""
        try:
            fn(*args)
        except (TypeError, AttributeError, KeyError, ValueError, IndexError,
                StopIteration) as e:
            self.bad(manifest, f"{what}: not checked further, malformed: "
                     f"{type(e).__name__}: {e}")

    def run(self):
        for pod in self.pods:
            self.guard(pod.manifest, pod.where, self.check_pod, pod)
        for svc in self.by_kind.get("Service", {}).values():
            self.guard(self.owner[id(svc)], f"Service {meta_name(svc)}",
                       self.check_service, svc)
        for sts in self.by_kind.get("StatefulSet", {}).values():
            self.guard(self.owner[id(sts)], f"StatefulSet {meta_name(sts)}",
                       self.check_statefulset, sts)
        for pod in self.pods:
            agent = pod.find("wstream-agent")
            if agent is not None:
                self.guard(pod.manifest, f"{pod.where}: wstream-agent",
                           self.check_agent, pod, agent)
            for c in pod.containers:
                if "WSTREAM_RECEIVERS" in env_of(c):
                    self.guard(pod.manifest, f"{pod.where}: trainer",
                               self.check_trainer, pod, c)
        for m in self.manifests:
            for d in m.docs:
                if isinstance(d, dict) and d.get("kind") == "Kustomization":
                    self.guard(m, "Kustomization", self.check_kustomization, m, d)

    # -- generic Kubernetes consistency

    def check_pod(self, pod):
        m, w = pod.manifest, pod.where
        names = [c.get("name") for c in pod.all_containers()]
        for n in set(names):
            if names.count(n) > 1:
                self.bad(m, f"{w}: two containers named {n!r}")
        spec = pod.doc.get("spec") or {}
        if pod.kind in ("StatefulSet", "Deployment"):
            sel = ((spec.get("selector") or {}).get("matchLabels")) or {}
            if not sel:
                self.bad(m, f"{w}: spec.selector.matchLabels is empty")
            for k, v in sel.items():
                if pod.labels.get(k) != v:
                    self.bad(m, f"{w}: selector {k}={v} does not match the pod "
                             "template's labels")
            if pod.spec.get("restartPolicy", "Always") != "Always":
                self.bad(m, f"{w}: pod restartPolicy must be Always")
        if pod.kind == "Job" and pod.spec.get("restartPolicy") not in ("Never", "OnFailure"):
            self.bad(m, f"{w}: a Job's pods need restartPolicy Never or OnFailure")
        used = set()
        for c in pod.all_containers():
            cn = f"{w}: container {c.get('name')}"
            for vm in c.get("volumeMounts") or []:
                used.add(vm.get("name"))
                if vm.get("name") not in pod.volumes:
                    self.bad(m, f"{cn}: volumeMount {vm.get('name')!r} names no volume")
            sidecar = c in pod.inits and c.get("restartPolicy") == "Always"
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                p = c.get(probe)
                if p is None:
                    continue
                if c in pod.inits and not sidecar:
                    self.bad(m, f"{cn}: {probe} on an init container without "
                             "restartPolicy: Always (only native sidecars take probes)")
                self.check_probe_port(m, cn, c, probe, p)
            self.check_extended(m, cn, c)
        for name, vol in pod.volumes.items():
            if name not in used:
                self.bad(m, f"{w}: volume {name!r} is mounted by no container")
            cm = vol.get("configMap")
            if isinstance(cm, dict):
                self.check_configmap_ref(m, f"{w}: volume {name}", cm)

    def check_secret_file(self, m, w, pod, c, path):
        """The deployment's secret: a file of a mounted Secret volume that
        group and others cannot read (the programs refuse it otherwise)."""
        mount, rel = mount_for(c, path)
        vol = pod.volumes.get(mount.get("name")) if mount else None
        sec = (vol or {}).get("secret")
        if not isinstance(sec, dict):
            self.bad(m, f"{w}: auth secret {path} is not in a mounted Secret volume")
            return
        mode = sec.get("defaultMode", 0o644)
        for item in sec.get("items") or []:
            if item.get("path") == rel and "mode" in item:
                mode = item["mode"]
        if not isinstance(mode, int) or mode & 0o077:
            self.bad(m, f"{w}: auth secret volume {mount.get('name')!r}: "
                     f"defaultMode {mode!r} lets group or others read it "
                     "(256, i.e. 0400)")

    def check_probe_port(self, m, cn, c, probe, p):
        action = p.get("httpGet") or p.get("tcpSocket")
        if not isinstance(action, dict):
            return
        port = action.get("port")
        declared = ports_of(c)
        if isinstance(port, str):
            if port not in [d.get("name") for d in declared]:
                self.bad(m, f"{cn}: {probe} port {port!r} is not a port name of "
                         "this container")
        elif port not in [d.get("containerPort") for d in declared]:
            self.bad(m, f"{cn}: {probe} port {port} is not declared by this container")

    def check_extended(self, m, cn, c):
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for k in set(req) | set(lim):
            if "/" not in k or k.split("/")[0].endswith("kubernetes.io"):
                continue
            if k not in lim:
                self.bad(m, f"{cn}: extended resource {k} needs a limit")
            elif k in req and parse_quantity(req[k]) != parse_quantity(lim[k]):
                self.bad(m, f"{cn}: extended resource {k}: requests must equal limits")

    def check_configmap_ref(self, m, where, cm):
        name = cm.get("name")
        target = self.by_kind.get("ConfigMap", {}).get(name)
        if target is None:
            if not cm.get("optional"):
                self.bad(m, f"{where}: ConfigMap {name!r} is not in deploy/")
            return
        data = target.get("data") or {}
        for item in cm.get("items") or []:
            if item.get("key") not in data:
                self.bad(m, f"{where}: ConfigMap {name} has no key {item.get('key')!r}")

    def selected(self, selector):
        return [p for p in self.pods if selector and
                all(p.labels.get(k) == v for k, v in selector.items())]

    def check_service(self, svc):
        m = self.owner[id(svc)]
        w = f"Service {meta_name(svc)}"
        spec = svc.get("spec") or {}
        selector = spec.get("selector") or {}
        pods = self.selected(selector)
        if not pods:
            self.bad(m, f"{w}: selector {selector} selects no pod template in deploy/")
            return
        for port in spec.get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            for pod in pods:
                cs = pod.serving()
                if isinstance(target, str):
                    hit = [c for c in pod.containers
                           if target in [p.get("name") for p in ports_of(c)]]
                    side = [c for c in pod.sidecars()
                            if target in [p.get("name") for p in ports_of(c)]]
                    if not hit and side:
                        self.bad(m, f"{w}: targetPort {target!r} is a named port of a "
                                 "sidecar; use its number (older endpoint "
                                 "controllers look in regular containers only)")
                    elif not hit:
                        self.bad(m, f"{w}: targetPort {target!r} is not a port "
                                 f"name in {pod.where}")
                elif target not in [p.get("containerPort") for c in cs for p in ports_of(c)]:
                    self.bad(m, f"{w}: targetPort {target} is declared by no "
                             f"container of {pod.where}")

    def check_statefulset(self, sts):
        m = self.owner[id(sts)]
        w = f"StatefulSet {meta_name(sts)}"
        if not DNS_LABEL.match(meta_name(sts)):
            self.bad(m, f"{w}: the name must be a DNS label (it names the pods' hosts)")
        sn = (sts.get("spec") or {}).get("serviceName")
        svc = self.by_kind.get("Service", {}).get(sn)
        if svc is None:
            self.bad(m, f"{w}: serviceName {sn!r} is not a Service in deploy/")
            return
        sspec = svc.get("spec") or {}
        if sspec.get("clusterIP") != "None":
            self.bad(m, f"{w}: Service {sn} must be headless (clusterIP: None) "
                     "to give the pods DNS names")
        pod = next(p for p in self.pods if p.doc is sts)
        if pod not in self.selected(sspec.get("selector") or {}):
            self.bad(m, f"{w}: Service {sn} does not select its pods")

    def check_kustomization(self, m, k):
        allowed = {"apiVersion", "kind", "resources", "namespace", "labels",
                   "commonLabels", "commonAnnotations", "images", "patches"}
        for key in k:
            if key not in allowed:
                self.bad(m, f"Kustomization: unknown or unsupported key {key!r}")
        listed = k.get("resources") or []
        files = {os.path.basename(x.path) for x in self.manifests}
        for r in listed:
            if not isinstance(r, str) or r not in files:
                self.bad(m, f"Kustomization: resource {r!r} is not a file in deploy/")
        for f in sorted(files - set(listed) - {os.path.basename(m.path)}):
            if f not in KUSTOMIZE_LEFT_OUT:
                self.bad(m, f"Kustomization: {f} is neither listed nor left out "
                         "on purpose (KUSTOMIZE_LEFT_OUT)")

    # -- the wstream agent

    def agent_args(self, m, w, agent):
        """{flag: value} of the agent's args, checked against its table."""
        if agent.get("command"):
            self.bad(m, f"{w}: set args, not command (the image's entrypoint is the agent)")
        args = [str(a) for a in agent.get("args") or []]
        out, i = {}, 0
        while i < len(args):
            a = args[i]
            if not a.startswith("--"):
                self.bad(m, f"{w}: stray argument {a!r}")
                i += 1
                continue
            name, eq, value = a[2:].partition("=")
            spec = self.flags.get(name)
            if spec is None:
                self.bad(m, f"{w}: unknown agent flag --{name} (receiver/agent/agent_main.c)")
                i += 1
                continue
            typ, choices = spec
            if not eq:
                if typ == "BOOL":
                    value = "yes"
                elif i + 1 < len(args):
                    i += 1
                    value = args[i]
                else:
                    self.bad(m, f"{w}: --{name} needs a value")
            if name in out:
                self.bad(m, f"{w}: --{name} given twice")
            out[name] = value
            if typ == "ENUM" and choices and value not in choices:
                self.bad(m, f"{w}: --{name} {value!r} is not one of {choices}")
            if typ == "UINT" and not re.fullmatch(r"\d+", value):
                self.bad(m, f"{w}: --{name} {value!r} is not an unsigned integer")
            if typ == "DOUBLE":
                try:
                    float(value)
                except ValueError:
                    self.bad(m, f"{w}: --{name} {value!r} is not a number")
            i += 1
        return out

    def check_agent(self, pod, agent):
        m = pod.manifest
        w = f"{pod.where}: wstream-agent"
        if agent not in pod.inits:
            self.bad(m, f"{w}: must be an initContainers entry (a native sidecar)")
        elif agent.get("restartPolicy") != "Always":
            self.bad(m, f"{w}: the native sidecar needs restartPolicy: Always")
        flags = self.agent_args(m, w, agent)
        for need in ("layout", "listen", "engine-socket", "metrics-listen",
                     "status-file", "log-format", "auth-secret-file"):
            if need not in flags:
                self.bad(m, f"{w}: --{need} is not set")
        if flags.get("insecure", "no") not in ("no", "n", "false", "0", "off"):
            self.bad(m, f"{w}: --insecure: any process that reaches the pod "
                     "could write the engine's weights")
        if "auth-secret-file" in flags:
            self.check_secret_file(m, w, pod, agent, flags["auth-secret-file"])
        if flags.get("log-format", "json") != "json":
            self.bad(m, f"{w}: --log-format json, for log collectors")
        ports = {p.get("name"): p.get("containerPort") for p in ports_of(agent)}
        for flag, pname in (("listen", "wst-data"), ("metrics-listen", "wst-metrics")):
            host, port = parse_hostport(flags.get(flag))
            if flag not in flags:
                continue
            if host is None or not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", host):
                self.bad(m, f"{w}: --{flag} {flags[flag]!r}: expected IPv4:port")
            elif ports.get(pname) != port:
                self.bad(m, f"{w}: --{flag} port {port} is not the container "
                         f"port named {pname} ({ports.get(pname)})")
        metrics_port = ports.get("wst-metrics")
        ann = pod.annotations
        if ann.get("prometheus.io/scrape") != "true":
            self.bad(m, f"{pod.where}: annotation prometheus.io/scrape must be \"true\"")
        if ann.get("prometheus.io/port") != str(metrics_port):
            self.bad(m, f"{pod.where}: annotation prometheus.io/port "
                     f"{ann.get('prometheus.io/port')!r} is not the agent's "
                     f"metrics port {metrics_port}")
        for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                            ("readinessProbe", "/readyz")):
            p = (agent.get(probe) or {}).get("httpGet") or {}
            if p.get("path") != path or p.get("port") not in ("wst-metrics", metrics_port):
                self.bad(m, f"{w}: {probe} must GET {path} on the metrics port")
        caps = ((agent.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        if "IPC_LOCK" not in caps and "CAP_IPC_LOCK" not in caps:
            self.bad(m, f"{w}: securityContext.capabilities.add needs IPC_LOCK "
                     "(RDMA registration pins memory)")
        lim = (agent.get("resources") or {}).get("limits") or {}
        if not any(k.startswith("rdma/") for k in lim):
            self.bad(m, f"{w}: no rdma/... resource: the RDMA device plugin "
                     "must hand the agent the NIC")
        if any(k.startswith("nvidia.com/") for k in lim):
            self.bad(m, f"{w}: asks for its own GPU: the GPU is the engine's "
                     "(a request here allocates a second one)")
        env = env_of(agent)
        for var in ("UCX_TLS", "UCX_NET_DEVICES"):
            if var not in env:
                self.bad(m, f"{w}: env {var} is not set")
        engines = [c for c in pod.containers]
        if not engines:
            self.bad(m, f"{pod.where}: no engine container beside the agent")
            return
        self.check_engine_paths(pod, agent, flags, engines)
        self.check_state_file(pod, agent, flags)
        layout = self.layout_of(pod, agent, flags)
        if layout is not None:
            self.check_live_memory(pod, agent, flags, engines, layout)
        svcs = [s for s in self.by_kind.get("Service", {}).values()
                if (s.get("spec") or {}).get("clusterIP") == "None"
                and pod in self.selected((s.get("spec") or {}).get("selector") or {})]
        if not svcs:
            self.bad(m, f"{pod.where}: no headless Service selects the agents")
        for s in svcs:
            sw = f"Service {meta_name(s)}"
            sm = self.owner[id(s)]
            spec = s.get("spec") or {}
            if spec.get("publishNotReadyAddresses") is not True:
                self.bad(sm, f"{sw}: publishNotReadyAddresses must be true: an "
                         "agent is not Ready until trainers have reached it")
            _, data_port = parse_hostport(flags.get("listen"))
            if not any(p.get("targetPort", p.get("port")) in (data_port, "wst-data")
                       for p in spec.get("ports") or []):
                self.bad(sm, f"{sw}: exposes no port for the agent's --listen port {data_port}")
            sts_service = (pod.doc.get("spec") or {}).get("serviceName")
            if pod.kind == "StatefulSet" and sts_service != meta_name(s):
                self.bad(m, f"{pod.where}: serviceName is not the agents' headless "
                         f"Service {meta_name(s)}")

    def check_state_file(self, pod, agent, flags):
        """What a restarted agent starts from (--state-file, else the status
        file + .state) must survive the container and go with the live
        memory: a writable emptyDir."""
        m, w = pod.manifest, f"{pod.where}: wstream-agent"
        path = flags.get("state-file") or (
            flags["status-file"] + ".state" if flags.get("status-file") else None)
        if not path:
            return
        hit = mount_for(agent, path)
        if hit is None:
            self.bad(m, f"{w}: --state-file {path} is on no volume: a restarted "
                     "agent would forget its committed version")
            return
        vol = pod.volumes.get(hit[0].get("name")) or {}
        if hit[0].get("readOnly") or "emptyDir" not in vol:
            self.bad(m, f"{w}: --state-file {path} needs a writable emptyDir "
                     "(it lives as long as the live memory)")

    def check_engine_paths(self, pod, agent, flags, engines):
        m, w = pod.manifest, f"{pod.where}: wstream-agent"
        for flag, env in (("engine-socket", "WSTREAM_ENGINE_SOCKET"), ("status-file", None)):
            path = flags.get(flag)
            if not path:
                continue
            hit = mount_for(agent, path)
            if hit is None:
                self.bad(m, f"{w}: --{flag} {path} is on no volume (the engine cannot see it)")
                continue
            mount, rel = hit
            vol = pod.volumes.get(mount.get("name")) or {}
            if mount.get("readOnly") or "emptyDir" not in vol:
                self.bad(m, f"{w}: --{flag} {path} needs a writable emptyDir")
            seen = [c for c in engines if path_in(c, mount.get("name"), rel)]
            if flag == "engine-socket" and not seen:
                self.bad(m, f"{w}: the engine socket's volume {mount.get('name')} "
                         "is mounted by no engine container")
            for c in seen:
                want = path_in(c, mount.get("name"), rel)
                have = env_value(c, env) if env else None
                if env and env in env_of(c) and have != want:
                    self.bad(m, f"{pod.where}: container {c.get('name')}: {env} "
                             f"{have!r} is not the agent's --{flag} ({want})")

    def layout_of(self, pod, agent, flags):
        m, w = pod.manifest, f"{pod.where}: wstream-agent"
        path = flags.get("layout")
        hit = mount_for(agent, path) if path else None
        if hit is None:
            if path:
                self.bad(m, f"{w}: --layout {path} is on no volume")
            return None
        mount, rel = hit
        vol = pod.volumes.get(mount.get("name")) or {}
        cm = vol.get("configMap")
        if not isinstance(cm, dict):
            return None  # written at run time (an engine-generated layout)
        key = rel
        if cm.get("items"):
            keys = [i.get("key") for i in cm["items"] if i.get("path") == rel]
            if not keys:
                self.bad(m, f"{w}: --layout {path}: no item of ConfigMap "
                         f"{cm.get('name')} has path {rel!r}")
                return None
            key = keys[0]
        target = self.by_kind.get("ConfigMap", {}).get(cm.get("name"))
        if target is None:
            return None  # reported by check_configmap_ref
        text = (target.get("data") or {}).get(key)
        owner = self.owner[id(target)]
        if not isinstance(text, str):
            self.bad(owner, f"ConfigMap {cm.get('name')}: no key {key!r} for --layout")
            return None
        try:
            layout = json.loads(text)
        except json.JSONDecodeError as e:
            self.bad(owner, f"ConfigMap {cm.get('name')}: {key}: not JSON: {e}")
            return None
        problems = check_layout(layout, self.dtypes)
        for p in problems:
            self.bad(owner, f"ConfigMap {cm.get('name')}: {key}: {p}")
        self.layouts.append((owner, layout, text))
        return None if problems else layout

    def check_live_memory(self, pod, agent, flags, engines, layout):
        m, w = pod.manifest, pod.where
        shm = layout.get("shm")
        staging = staging_bytes(layout, self.dtypes, int(flags.get("staging-slots", 2)))
        pinned = layout.get("shm_bytes", 0) if shm else 0
        lim = parse_quantity(((agent.get("resources") or {}).get("limits") or {}).get("memory"))
        need = pinned + staging + 256 * 2**20
        if lim is None or lim < need:
            shown = "none" if lim is None else f"{lim / 2**20:.0f} MiB"
            self.bad(m, f"{w}: wstream-agent memory limit {shown} < {need / 2**20:.0f} "
                     f"MiB (shm_bytes {pinned} + staging {staging} + 256 MiB)")
        if not shm:
            return
        hit = mount_for(agent, "/dev/shm/x")
        if hit is None or hit[0].get("mountPath").rstrip("/") != "/dev/shm":
            self.bad(m, f"{w}: the agent mounts no volume at /dev/shm (layout shm {shm})")
            return
        vname = hit[0].get("name")
        vol = pod.volumes.get(vname) or {}
        ed = vol.get("emptyDir")
        if not isinstance(ed, dict) or ed.get("medium") != "Memory":
            self.bad(m, f"{w}: /dev/shm must be an emptyDir with medium: Memory")
        else:
            size = parse_quantity(ed.get("sizeLimit"))
            if size is None or size < layout["shm_bytes"]:
                self.bad(m, f"{w}: /dev/shm sizeLimit {ed.get('sizeLimit')} < layout "
                         f"shm_bytes {layout['shm_bytes']}")
        for c in engines:
            if path_in(c, vname, "") != "/dev/shm":
                self.bad(m, f"{w}: container {c.get('name')} does not mount the "
                         "live memory's volume at /dev/shm")
        before = pod.inits[:pod.inits.index(agent)] if agent in pod.inits else []
        makers = [c for c in before if "WSTREAM_SHM_NAME" in env_of(c)]
        if not makers:
            self.bad(m, f"{w}: no init container before the agent creates the shm "
                     f"object {shm} (WSTREAM_SHM_NAME/WSTREAM_SHM_BYTES)")
        for c in makers:
            cw = f"{w}: init container {c.get('name')}"
            if c.get("restartPolicy") is not None:
                self.bad(m, f"{cw}: must be a plain init container (run to completion)")
            if env_value(c, "WSTREAM_SHM_NAME") != shm:
                self.bad(m, f"{cw}: WSTREAM_SHM_NAME {env_value(c, 'WSTREAM_SHM_NAME')!r} "
                         f"is not the layout's shm {shm!r}")
            if env_value(c, "WSTREAM_SHM_BYTES") != str(layout["shm_bytes"]):
                self.bad(m, f"{cw}: WSTREAM_SHM_BYTES {env_value(c, 'WSTREAM_SHM_BYTES')!r} "
                         f"is not the layout's shm_bytes {layout['shm_bytes']}")
            if path_in(c, vname, "") != "/dev/shm":
                self.bad(m, f"{cw}: does not mount {vname} at /dev/shm")

    # -- the trainer

    def check_trainer(self, pod, c):
        m = pod.manifest
        w = f"{pod.where}: container {c.get('name')}"
        spec = pod.doc.get("spec") or {}
        env = env_of(c)
        if pod.kind != "Job" or spec.get("completionMode") != "Indexed":
            self.bad(m, f"{pod.where}: trainer ranks come from an Indexed Job "
                     "(completionMode: Indexed)")
        world = spec.get("completions")
        if spec.get("parallelism") != world:
            self.bad(m, f"{pod.where}: parallelism {spec.get('parallelism')} != "
                     f"completions {world}: every rank must run at once")
        if env_value(c, "WSTREAM_WORLD_SIZE") != str(world):
            self.bad(m, f"{w}: WSTREAM_WORLD_SIZE {env_value(c, 'WSTREAM_WORLD_SIZE')!r} "
                     f"is not the Job's completions ({world}): world size mismatch")
        rank = env.get("WSTREAM_RANK") or {}
        path = (((rank.get("valueFrom") or {}).get("fieldRef")) or {}).get("fieldPath")
        if path != "metadata.annotations['batch.kubernetes.io/job-completion-index']" \
                and rank.get("value") != "$(JOB_COMPLETION_INDEX)":
            self.bad(m, f"{w}: WSTREAM_RANK must come from the completion index")
        caps = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
        if "IPC_LOCK" not in caps:
            self.bad(m, f"{w}: securityContext.capabilities.add needs IPC_LOCK")
        secret = env_value(c, "WST_AUTH_SECRET_FILE")
        if not secret:
            self.bad(m, f"{w}: WST_AUTH_SECRET_FILE is not set: the agents "
                     "refuse a sender without their secret")
        else:
            self.check_secret_file(m, w, pod, c, secret)
        lim = (c.get("resources") or {}).get("limits") or {}
        if not any(k.startswith("rdma/") for k in lim):
            self.bad(m, f"{w}: no rdma/... resource")
        if "nvidia.com/gpu" not in lim:
            self.bad(m, f"{w}: no nvidia.com/gpu")
        self.check_receivers(m, w, env_value(c, "WSTREAM_RECEIVERS") or "")

    def check_receivers(self, m, w, value):
        seen = {}
        for entry in value.split(","):
            host, port = parse_hostport(entry)
            if host is None:
                self.bad(m, f"{w}: WSTREAM_RECEIVERS entry {entry!r} is not host:port")
                continue
            parts = host.split(".")
            mm = re.fullmatch(r"(.+)-(\d+)", parts[0])
            sts = None
            if mm and len(parts) >= 2:
                sts = self.by_kind.get("StatefulSet", {}).get(mm.group(1))
            if sts is None or (sts.get("spec") or {}).get("serviceName") != parts[1] or \
                    not (len(parts) == 2 or parts[3:4] == ["svc"]):
                self.bad(m, f"{w}: receiver {host} is not <statefulset>-<n>.<its "
                         "headless service>[.<namespace>.svc...] of a StatefulSet here")
                continue
            n, replicas = int(mm.group(2)), (sts.get("spec") or {}).get("replicas", 1)
            if n >= replicas:
                self.bad(m, f"{w}: receiver {host}: StatefulSet {mm.group(1)} has "
                         f"{replicas} replica(s), no pod {n}")
            pod = next(p for p in self.pods if p.doc is sts)
            agent = pod.find("wstream-agent")
            _, listen = parse_hostport(self.agent_listen(agent))
            if port != listen:
                self.bad(m, f"{w}: receiver {entry}: port {port} is not the agent's "
                         f"--listen port {listen}")
            seen.setdefault(mm.group(1), []).append(n)
        for name, ns in seen.items():
            replicas = (self.by_kind["StatefulSet"][name].get("spec") or {}).get("replicas", 1)
            if sorted(ns) != list(range(replicas)):
                self.bad(m, f"{w}: WSTREAM_RECEIVERS names pods {sorted(ns)} of "
                         f"StatefulSet {name}, which has replicas 0..{replicas - 1}: "
                         "every agent must be listed once")

    def agent_listen(self, agent):
        if agent is None:
            return None
        args = [str(a) for a in agent.get("args") or []]
        for i, a in enumerate(args):
            if a == "--listen" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith("--listen="):
                return a.split("=", 1)[1]
        return "0.0.0.0:7070"  # the agent's default


# Manifests the kustomization leaves out on purpose, and why.
KUSTOMIZE_LEFT_OUT = {
    "trainer-job.yaml": "a training run is started on its own",
}


# ---------------------------------------------------------------------------
# The layout file (receiver/agent/layout_file.h)

INT64_MAX = 2**63 - 1


ALLOC_MAX = 65536


def check_allocations(d, num, out):
    """The top-level "allocations": {name: bytes} of its entries (problems
    into out); num reads an integer field as check_layout does."""
    if "shm" in d or "cuda_ipc" in d:
        out.append("'allocations' and the top-level 'shm'/'cuda_ipc' are exclusive")
    allocs = d["allocations"]
    if not isinstance(allocs, list) or len(allocs) > ALLOC_MAX:
        out.append(f"'allocations' must be a list of at most {ALLOC_MAX} entries")
        return {}
    sizes, objects, devices = {}, set(), set()
    for i, a in enumerate(allocs):
        where = f"allocations[{i}]"
        name = a.get("name") if isinstance(a, dict) else None
        if not isinstance(name, str) or not 0 < len(name.encode()) < 64:
            out.append(f"{where}: 'name' must be a string of 1..63 bytes")
            continue
        if name in sizes:
            out.append(f"{where}: allocation {name!r} twice")
        if ("shm" in a) == ("cuda_ipc" in a):
            out.append(f"{where}: needs exactly one of 'shm' and 'cuda_ipc'")
            continue
        if "shm" in a:
            if not isinstance(a["shm"], str) or not re.fullmatch(r"/[^/]{1,254}", a["shm"]):
                out.append(f"{where}: 'shm' {a['shm']!r}: a POSIX shm name is '/' "
                           "and a name without '/'")
            if "device" in a:
                out.append(f"{where}: 'device' is for 'cuda_ipc' entries, not 'shm'")
            obj = ("shm", a["shm"])
        else:
            if not isinstance(a["cuda_ipc"], str) or \
                    not re.fullmatch(r"[0-9a-f]{128}", a["cuda_ipc"]):
                out.append(f"{where}: 'cuda_ipc' must be 128 lowercase hex digits")
            devices.add(num(a, "device", where, required=False) or 0)
            obj = ("cuda_ipc", a["cuda_ipc"])
        if obj in objects:
            out.append(f"{where}: the same {obj[0]} as an earlier entry")
        objects.add(obj)
        size = num(a, "bytes", where)
        if size == 0:
            out.append(f"{where}: 'bytes' must be above 0")
        sizes[name] = size or 0
    if len(devices) > 1:
        out.append(f"'cuda_ipc' allocations on devices {sorted(devices)}: one agent serves one GPU")
    return sizes


def check_layout(d, dtypes):
    """Problems of a layout dict, by the rules of receiver/agent/layout_file.h."""
    out = []

    def num(obj, key, where, required=True):
        v = obj.get(key) if isinstance(obj, dict) else None
        if v is None:
            if required:
                out.append(f"{where}: '{key}' is required")
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < INT64_MAX:
            out.append(f"{where}: '{key}' must be an integer in [0, INT64_MAX)")
            return None
        return v

    if not isinstance(d, dict):
        return ["the layout must be a JSON object"]
    if d.get("format") != 1:
        out.append("'format' must be 1")
    num(d, "rank", "layout", required=False)
    shm, ipc = d.get("shm"), d.get("cuda_ipc")
    if shm is not None and ipc is not None:
        out.append("'shm' and 'cuda_ipc' are exclusive")
    limit = None
    if shm is not None:
        if not isinstance(shm, str) or not re.fullmatch(r"/[^/]{1,254}", shm):
            out.append(f"'shm' {shm!r}: a POSIX shm name is '/' and a name without '/'")
        limit = num(d, "shm_bytes", "layout")
    elif "shm_bytes" in d:
        out.append("'shm_bytes' without 'shm'")
    if ipc is not None:
        if not isinstance(ipc, str) or not re.fullmatch(r"[0-9a-f]{128}", ipc):
            out.append("'cuda_ipc' must be 128 lowercase hex digits")
        limit = num(d, "cuda_bytes", "layout")
        num(d, "cuda_device", "layout", required=False)
    elif "cuda_bytes" in d or "cuda_device" in d:
        out.append("'cuda_bytes'/'cuda_device' without 'cuda_ipc'")
    allocs = check_allocations(d, num, out) if "allocations" in d else None
    regions = {}
    spans = []
    for i, r in enumerate(d.get("regions") or []):
        where = f"regions[{i}]"
        name = r.get("name") if isinstance(r, dict) else None
        if not isinstance(name, str) or not name or len(name) >= 256:
            out.append(f"{where}: 'name' must be a string of 1..255 bytes")
            continue
        if name in regions:
            out.append(f"{where}: region {name!r} twice")
        alloc, r_limit = r.get("allocation"), limit
        if alloc is not None:
            if allocs is None:
                out.append(f"{where}: 'allocation' without a top-level 'allocations'")
                continue
            if alloc not in allocs:
                out.append(f"{where}: unknown allocation {alloc!r}")
                continue
            r_limit = allocs[alloc]
        off = num(r, "offset", where, required=r_limit is not None or alloc is not None) or 0
        size = num(r, "bytes", where)
        if size is None:
            continue
        regions[name] = size
        if r_limit is not None:
            if off + size > r_limit:
                out.append(f"{where}: {name} runs past the live memory"
                           f"{'' if alloc is None else f' of allocation {alloc}'} "
                           f"({off} + {size} > {r_limit})")
            spans.append((alloc or "", off, off + size, name))
    spans.sort()
    for (ak, a0, a1, an), (bk, b0, b1, bn) in zip(spans, spans[1:]):
        if ak == bk and b0 < a1:
            out.append(f"regions {an} and {bn} overlap")
    placed = {}
    for i, w in enumerate(d.get("wants") or []):
        where = f"wants[{i}]"
        if not isinstance(w, dict):
            out.append(f"{where}: must be an object")
            continue
        for key in ("tensor", "dtype", "shape", "start", "stop", "region"):
            if key not in w:
                out.append(f"{where}: '{key}' is required")
        if not all(k in w for k in ("dtype", "shape", "start", "stop", "region")):
            continue
        where = f"wants[{i}] {w.get('tensor')}"
        es = dtypes.get(w["dtype"])
        if es is None:
            out.append(f"{where}: unknown dtype {w['dtype']!r}")
            continue
        shape, start, stop = w["shape"], w["start"], w["stop"]
        if not (isinstance(shape, list) and isinstance(start, list) and isinstance(stop, list)
                and len(shape) == len(start) == len(stop) and 1 <= len(shape) <= 8
                and all(isinstance(x, int) and not isinstance(x, bool)
                        for x in shape + start + stop)):
            out.append(f"{where}: shape, start and stop must be integer lists of one rank (1..8)")
            continue
        if any(not 0 <= a <= b <= n for a, b, n in zip(start, stop, shape)):
            out.append(f"{where}: box [{start}, {stop}) is not inside shape {shape}")
            continue
        if w["region"] not in regions:
            out.append(f"{where}: region {w['region']!r} is not declared")
            continue
        off = num(w, "offset", where, required=False) or 0
        pitch = num(w, "row_pitch", where, required=False) or 0
        rows = 1
        for a, b in zip(start[:-1], stop[:-1]):
            rows *= b - a
        row = (stop[-1] - start[-1]) * es
        size = (rows - 1) * (pitch or row) + row if rows else 0
        if off + size > regions[w["region"]]:
            out.append(f"{where}: {off} + {size} bytes run past region "
                       f"{w['region']} ({regions[w['region']]} bytes)")
        if not pitch:
            placed.setdefault(w["region"], []).append((off, off + size, w.get("tensor")))
        ex = w.get("expert")
        if ex is not None:
            if not isinstance(ex, dict) or num(ex, "ep_size", where) in (None, 0) or \
                    (num(ex, "ep_rank", where) or 0) >= ex.get("ep_size", 0) or len(shape) < 2:
                out.append(f"{where}: 'expert' needs ep_rank < ep_size (>= 1) and >= 2 dims")
    for reg, spans in placed.items():
        spans.sort()
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                out.append(f"wants {an} and {bn} overlap in region {reg}")
    layers = set()
    for i, x in enumerate(d.get("experts") or []):
        where = f"experts[{i}]"
        if not isinstance(x, dict):
            out.append(f"{where}: must be an object")
            continue
        vals = {k: num(x, k, where) for k in ("layer", "experts", "ep_rank", "ep_size",
                                              "hidden", "inter")}
        if any(v is None for v in vals.values()):
            continue
        if vals["layer"] in layers:
            out.append(f"{where}: layer {vals['layer']} twice")
        layers.add(vals["layer"])
        loader = x.get("loader")
        if not isinstance(loader, str) or not 0 < len(loader) < 64:
            out.append(f"{where}: 'loader' must be a name of 1..63 bytes")
        es = dtypes.get(x.get("dtype"))
        if es is None:
            out.append(f"{where}: unknown dtype {x.get('dtype')!r}")
            continue
        if 0 in (vals["experts"], vals["ep_size"], vals["hidden"], vals["inter"]):
            out.append(f"{where}: experts, ep_size, hidden and inter must be nonzero")
            continue
        if vals["ep_rank"] >= vals["ep_size"]:
            out.append(f"{where}: ep_rank >= ep_size")
            continue
        local = vals["experts"] // vals["ep_size"]
        ids = x.get("expert_ids")
        if ids is not None and (not isinstance(ids, list) or len(ids) != local
                                or vals["experts"] % vals["ep_size"]):
            out.append(f"{where}: expert_ids must have experts/ep_size = {local} entries")
        tp = (x.get("inter_tp") or {}).get("size", 1) or 1
        inter = vals["inter"] // tp
        need = {"w13": local * 2 * inter * vals["hidden"] * es,
                "w2": local * vals["hidden"] * inter * es}
        for key, size in need.items():
            ref = x.get(key)
            if not isinstance(ref, dict) or ref.get("region") not in regions:
                out.append(f"{where}: '{key}' must name a declared region")
                continue
            off = num(ref, "offset", f"{where}.{key}") or 0
            if off + size > regions[ref["region"]]:
                out.append(f"{where}: {key} needs {size} bytes at {off} in region "
                           f"{ref['region']} ({regions[ref['region']]} bytes)")
    return out


def staging_bytes(layout, dtypes, slots):
    """Expert staging the agent allocates: slots x the largest MoE layer's
    local experts in checkpoint layout (gate, up, down)."""
    most = 0
    for x in layout.get("experts") or []:
        es = dtypes.get(x.get("dtype"), 0)
        tp = (x.get("inter_tp") or {}).get("size", 1) or 1
        local = x.get("experts", 0) // max(x.get("ep_size", 1), 1)
        most = max(most, 3 * local * (x.get("inter", 0) // tp) * x.get("hidden", 0) * es)
    return slots * most


# ---------------------------------------------------------------------------
# Driver

def validate(manifests, lint=None):
    """Runs schema and cross checks on loaded manifests (and 'lint' problems
    by path). Returns (notes, total problems)."""
    schema_notes = set()
    for m in manifests:
        for i, d in enumerate(m.docs):
            if isinstance(d, dict) and d.get("kind") == "Kustomization":
                if d.get("apiVersion") != "kustomize.config.k8s.io/v1beta1":
                    m.problems.append("Kustomization: apiVersion must be "
                                      "kustomize.config.k8s.io/v1beta1")
                continue
            s = Schema([])
            label = f"{d.get('kind', '?')}/{meta_name(d)}" if isinstance(d, dict) else f"doc {i}"
            s.check_document(d, label)
            m.problems.extend(s.problems)
            schema_notes |= s.newer_used
            if isinstance(d, dict):
                name = meta_name(d)
                rule = DNS_1035 if d.get("kind") == "Service" else DNS_SUBDOMAIN
                if not isinstance(name, str) or not rule.match(name):
                    m.problems.append(f"{label}: metadata.name {name!r} is not valid "
                                      f"for a {d.get('kind')}")
    cross = Cross(manifests)
    cross.run()
    for m in manifests:
        m.problems.extend((lint or {}).get(os.path.abspath(m.path), []))
    return sorted(schema_notes), cross, sum(len(m.problems) for m in manifests)


def describe(m):
    kinds = [f"Kustomization of {len(d.get('resources') or [])} files"
             if d.get("kind") == "Kustomization" else f"{d.get('kind')}/{meta_name(d)}"
             for d in m.docs if isinstance(d, dict)]
    return ", ".join(kinds) if kinds else "no documents"


def main_check(args, lint_cmd):
    manifests = load(args.deploy)
    config = os.path.join(args.deploy, ".yamllint")
    if not os.path.exists(config):
        print(f"FAIL {os.path.relpath(config, ROOT)}: missing")
        return 1
    paths = [m.path for m in manifests] + [config]
    lint = run_yamllint(lint_cmd, config, paths)
    notes, cross, total = validate(manifests, lint)
    for m in manifests:
        status = "ok  " if not m.problems else "FAIL"
        print(f"{status} {m.name}: {describe(m)}"
              + (f": {len(m.problems)} problem(s)" if m.problems else ""))
        for p in m.problems:
            print(f"       {p}")
    extra = lint.get(os.path.abspath(config), []) + lint.get("(yamllint)", [])
    print(f"{'ok  ' if not extra else 'FAIL'} {os.path.relpath(config, ROOT)}: "
          "yamllint configuration (linted too)")
    for p in extra:
        print(f"       {p}")
    total += len(extra)
    for n in notes:
        print(f"note: allowed though newer than client {CLIENT_VERSION}: {n}")
    total += check_kustomize_build(args.deploy, manifests)
    if args.agent:
        total += len(check_with_agent(args.agent, cross))
    print(f"{'ok' if total == 0 else 'FAIL'}: {len(manifests)} manifests, "
          f"{sum(len(m.docs) for m in manifests)} documents, {total} problem(s)")
    return 0 if total == 0 else 1


def check_kustomize_build(deploy, manifests):
    """kubectl kustomize, where kubectl is installed (it is not one of the
    project's packages): the build must give exactly the listed files'
    documents."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("skip kubectl kustomize: kubectl not installed (optional)")
        return 0
    r = subprocess.run([kubectl, "kustomize", deploy], capture_output=True, text=True)
    listed = [d.get("resources") or [] for m in manifests for d in m.docs
              if isinstance(d, dict) and d.get("kind") == "Kustomization"]
    want = sorted(f"{d.get('kind')}/{meta_name(d)}" for m in manifests
                  if os.path.basename(m.path) in sum(listed, [])
                  for d in m.docs if isinstance(d, dict))
    try:
        got = sorted(f"{d.get('kind')}/{meta_name(d)}"
                     for d in yaml.safe_load_all(r.stdout) if isinstance(d, dict))
    except yaml.YAMLError:
        got = None
    ok = r.returncode == 0 and got == want
    print(f"{'ok  ' if ok else 'FAIL'} kubectl kustomize {os.path.relpath(deploy, ROOT)}: "
          + (", ".join(got) if ok else (r.stderr.strip() or f"gave {got}, expected {want}")))
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# Checks against a built agent

def check_with_agent(agent_bin, cross, show=True):
    """Problems found with the built agent; a line per check when 'show'."""
    problems = []

    def report(ok, line, problem):
        if show:
            print(f"{'ok  ' if ok else 'FAIL'} {line}")
        if not ok:
            problems.append(problem)

    helptext = subprocess.run([agent_bin, "--help"], capture_output=True, text=True)
    listed = set(re.findall(r"^\s+--([a-z][a-z-]*)", helptext.stdout + helptext.stderr, re.M))
    listed -= {"help", "print-config"}
    report(listed == set(cross.flags),
           f"{agent_bin} --help: {len(listed)} flags, as read from receiver/agent/agent_main.c",
           f"--help lists {sorted(listed ^ set(cross.flags))} differently from "
           "receiver/agent/agent_main.c's table")
    for pod in cross.pods:
        agent = pod.find("wstream-agent")
        if agent is None:
            continue
        argv = [agent_bin] + [str(a) for a in agent.get("args") or []] + ["--print-config"]
        r = subprocess.run(argv, capture_output=True, text=True, env=agent_env())
        why = r.stderr.strip()
        report(r.returncode == 0,
               f"{pod.where}: the agent's option parser takes its args"
               + (f": {why}" if r.returncode else ""),
               f"{pod.where}: args refused by the agent: {why}")
    for owner, layout, text in cross.layouts:
        ok, msg = start_agent(agent_bin, layout)
        report(ok, f"{owner.name}: wstream-agent starts on the layout: {msg}",
               f"{owner.name}: the agent does not start on the layout: {msg}")
    return problems


def agent_env():
    """This environment without WST_* settings, which the agent would take
    over the manifest's flags (sanitizer options stay)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("WST_")}


def start_agent(agent_bin, layout):
    """Starts the real agent on 'layout' (its shm object created here under a
    private name), checks /healthz and /readyz, stops it."""
    layout = copy.deepcopy(layout)
    shm_file = None
    tmp = tempfile.mkdtemp(prefix="wst-deploy-")
    try:
        if layout.get("shm"):
            name = f"/wst-deploy-{os.getpid()}"
            shm_file = "/dev/shm" + name
            with open(shm_file, "wb") as f:
                f.truncate(layout["shm_bytes"])
            layout["shm"] = name
        path = os.path.join(tmp, "layout.json")
        with open(path, "w") as f:
            json.dump(layout, f)
        port_file = os.path.join(tmp, "metrics.port")
        secret = os.path.join(tmp, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        log = open(os.path.join(tmp, "agent.log"), "w+")
        proc = subprocess.Popen([agent_bin, "--layout", path, "--listen", "127.0.0.1:0",
                                 "--auth-secret-file", secret,
                                 "--metrics-listen", "127.0.0.1:0",
                                 "--metrics-port-file", port_file, "--log-format", "json"],
                                stdout=log, stderr=subprocess.STDOUT, env=agent_env())
        try:
            deadline = time.time() + 30
            while not os.path.exists(port_file) and proc.poll() is None \
                    and time.time() < deadline:
                time.sleep(0.05)
            if not os.path.exists(port_file):
                log.seek(0)
                return False, (f"exited {proc.poll()} before serving: "
                               + " | ".join(log.read().strip().splitlines()[-3:]))
            port = int(open(port_file).read())
            codes = {}
            for url in ("/healthz", "/readyz"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=5) as r:
                        codes[url] = r.status
                except urllib.error.HTTPError as e:
                    codes[url] = e.code
            if codes != {"/healthz": 200, "/readyz": 503}:
                return False, f"expected /healthz 200 and /readyz 503, got {codes}"
            log.seek(0)
            lines = [json.loads(x)["msg"] for x in log.read().splitlines() if x.startswith("{")]
            served = [x for x in lines if x.startswith("listening on")]
            return True, ("/healthz 200, /readyz 503 (no version yet); "
                          + (served[0].split(": ", 1)[-1] if served else ""))
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
    finally:
        if shm_file and os.path.exists(shm_file):
            os.unlink(shm_file)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# Self-test: every mutation must be caught.

def doc(ms, kind, name):
    for m in ms:
        for d in m.docs:
            if isinstance(d, dict) and d.get("kind") == kind and meta_name(d) == name:
                return d
    raise KeyError(f"{kind}/{name}")


def pod_spec(ms, kind, name):
    return doc(ms, kind, name)["spec"]["template"]["spec"]


def container(ms, kind, name, cname):
    ps = pod_spec(ms, kind, name)
    for c in (ps.get("initContainers") or []) + ps["containers"]:
        if c["name"] == cname:
            return c
    raise KeyError(cname)


def agent_c(ms):
    return container(ms, "StatefulSet", "engine", "wstream-agent")


def set_arg(c, flag, value):
    i = c["args"].index(flag)
    c["args"][i + 1] = value


def set_env(c, name, value):
    for e in c["env"]:
        if e["name"] == name:
            e["value"] = value
            return
    raise KeyError(name)


def edit_layout(ms, fn):
    cm = doc(ms, "ConfigMap", "wstream-layout")
    d = json.loads(cm["data"]["layout.json"])
    fn(d)
    cm["data"]["layout.json"] = json.dumps(d)


def _del(d, key):
    del d[key]


def _drop_arg(c, flag):
    i = c["args"].index(flag)
    del c["args"][i:i + 2]


def _drop_env(c, name):
    c["env"] = [e for e in c["env"] if e["name"] != name]


def volume(ms, kind, name, vol):
    for v in pod_spec(ms, kind, name)["volumes"]:
        if v["name"] == vol:
            return v
    raise KeyError(vol)


MUTATIONS = [
    ("unknown field in a container", "unknown field",
     lambda ms: container(ms, "StatefulSet", "engine", "engine").update(
         imagePullPolicyy="Always")),
    ("a field newer than the client and not allow-listed (resizePolicy, 1.27)",
     "unknown field",
     lambda ms: agent_c(ms).update(resizePolicy=[{"resourceName": "cpu",
                                                 "restartPolicy": "NotRequired"}])),
    ("unknown top-level spec field", "unknown field",
     lambda ms: doc(ms, "Service", "wstream-agents")["spec"].update(publishNotReady=True)),
    ("replicas as a string", "expected int",
     lambda ms: doc(ms, "StatefulSet", "engine")["spec"].update(replicas="2")),
    ("containerPort as a string", "expected int",
     lambda ms: agent_c(ms)["ports"][0].update(containerPort="7070")),
    ("an annotation value as a YAML boolean", "expected str",
     lambda ms: doc(ms, "StatefulSet", "engine")["spec"]["template"]["metadata"]
     ["annotations"].update({"prometheus.io/scrape": True})),
    ("publishNotReadyAddresses as a string", "expected bool",
     lambda ms: doc(ms, "Service", "wstream-agents")["spec"].update(
         publishNotReadyAddresses="true")),
    ("a list where a mapping belongs", "expected a mapping",
     lambda ms: agent_c(ms).update(securityContext=["IPC_LOCK"])),
    ("missing required serviceName", "missing required field 'serviceName'",
     lambda ms: _del(doc(ms, "StatefulSet", "engine")["spec"], "serviceName")),
    ("missing required container name", "missing required field 'name'",
     lambda ms: _del(container(ms, "Job", "wstream-trainer", "trainer"), "name")),
    ("unknown apiVersion/kind", "unknown apiVersion/kind",
     lambda ms: doc(ms, "Service", "engine").update(apiVersion="v2")),
    ("a bad quantity", "not a quantity",
     lambda ms: agent_c(ms)["resources"]["limits"].update(memory="1Gb")),
    ("an unknown capability", "not a Linux capability",
     lambda ms: agent_c(ms)["securityContext"]["capabilities"].update(add=["IPC_LOKC"])),
    ("a bad port name", "not a valid port name",
     lambda ms: agent_c(ms)["ports"][1].update(name="wstream-metrics-port")),
    ("headless Service selector matching no pod", "selects no pod",
     lambda ms: doc(ms, "Service", "wstream-agents")["spec"]["selector"].update(
         {"app.kubernetes.io/name": "engin"})),
    ("StatefulSet selector not matching its template", "does not match the pod",
     lambda ms: doc(ms, "StatefulSet", "engine")["spec"]["selector"]["matchLabels"].update(
         {"app.kubernetes.io/part-of": "other"})),
    ("volume naming a ConfigMap that does not exist", "ConfigMap 'wstream-layout-v2' is not",
     lambda ms: pod_spec(ms, "StatefulSet", "engine")["volumes"][0]["configMap"].update(
         name="wstream-layout-v2")),
    ("volume item naming a missing ConfigMap key", "has no key",
     lambda ms: pod_spec(ms, "StatefulSet", "engine")["volumes"][0]["configMap"]["items"][0]
     .update(key="layout-0.json")),
    ("probe on a port name the container lacks", "is not a port name of this container",
     lambda ms: agent_c(ms)["readinessProbe"]["httpGet"].update(port="metrics")),
    ("probe on an undeclared port number", "is not declared by this container",
     lambda ms: agent_c(ms)["livenessProbe"]["httpGet"].update(port=9401)),
    ("Service targetPort no container declares", "declared by no container",
     lambda ms: doc(ms, "Service", "wstream-agents")["spec"]["ports"][0].update(targetPort=7071)),
    ("sidecar without restartPolicy", "restartPolicy: Always",
     lambda ms: _del(agent_c(ms), "restartPolicy")),
    ("sidecar with restartPolicy OnFailure", "is not one of ['Always']",
     lambda ms: agent_c(ms).update(restartPolicy="OnFailure")),
    ("restartPolicy on a regular container", "only initContainers take it",
     lambda ms: container(ms, "StatefulSet", "engine", "engine").update(restartPolicy="Always")),
    ("agent moved to the regular containers", "must be an initContainers entry",
     lambda ms: (pod_spec(ms, "StatefulSet", "engine")["containers"].append(
         pod_spec(ms, "StatefulSet", "engine")["initContainers"].pop(1)),
         _del(pod_spec(ms, "StatefulSet", "engine")["containers"][-1], "restartPolicy"))),
    ("publishNotReadyAddresses false", "publishNotReadyAddresses must be true",
     lambda ms: doc(ms, "Service", "wstream-agents")["spec"].update(
         publishNotReadyAddresses=False)),
    ("agents' Service not headless", "must be headless",
     lambda ms: _del(doc(ms, "Service", "wstream-agents")["spec"], "clusterIP")),
    ("an agent flag that does not exist", "unknown agent flag --metrics-port",
     lambda ms: agent_c(ms)["args"].extend(["--metrics-port", "9400"])),
    ("a bad enum flag value", "is not one of",
     lambda ms: set_arg(agent_c(ms), "--log-format", "logfmt")),
    ("a bad log level (choices from common/log.c)", "is not one of",
     lambda ms: set_arg(agent_c(ms), "--log-level", "verbose")),
    ("agent without the deployment's secret", "--auth-secret-file is not set",
     lambda ms: _drop_arg(agent_c(ms), "--auth-secret-file")),
    ("agent's secret readable by others", "lets group or others read it",
     lambda ms: volume(ms, "StatefulSet", "engine", "auth")["secret"].update(
         defaultMode=0o644)),
    ("trainer without the secret", "WST_AUTH_SECRET_FILE is not set",
     lambda ms: _drop_env(container(ms, "Job", "wstream-trainer", "trainer"),
                          "WST_AUTH_SECRET_FILE")),
    ("--listen port not the data port", "--listen port 7071",
     lambda ms: set_arg(agent_c(ms), "--listen", "0.0.0.0:7071")),
    ("--metrics-listen on a host name", "expected IPv4:port",
     lambda ms: set_arg(agent_c(ms), "--metrics-listen", "localhost:9400")),
    ("prometheus.io/port not the metrics port", "prometheus.io/port",
     lambda ms: doc(ms, "StatefulSet", "engine")["spec"]["template"]["metadata"]
     ["annotations"].update({"prometheus.io/port": "9401"})),
    ("readiness on /healthz instead of /readyz", "readinessProbe must GET /readyz",
     lambda ms: agent_c(ms)["readinessProbe"]["httpGet"].update(path="/healthz")),
    ("agent without IPC_LOCK", "needs IPC_LOCK",
     lambda ms: agent_c(ms)["securityContext"]["capabilities"].update(add=[])),
    ("agent without an RDMA resource", "no rdma/",
     lambda ms: _del(agent_c(ms)["resources"]["limits"], "rdma/rdma_shared_device_a")),
    ("agent asking for its own GPU", "asks for its own GPU",
     lambda ms: agent_c(ms)["resources"]["limits"].update({"nvidia.com/gpu": 1})),
    ("engine socket on a path no volume holds", "is on no volume",
     lambda ms: set_arg(agent_c(ms), "--engine-socket", "/tmp/engine.sock")),
    ("state file in the container's own filesystem", "would forget its committed",
     lambda ms: set_arg(agent_c(ms), "--state-file", "/tmp/agent-state.json")),
    ("state file on the read-only layout volume", "--state-file /etc/wstream/s",
     lambda ms: set_arg(agent_c(ms), "--state-file", "/etc/wstream/state.json")),
    ("engine told another socket path", "is not the agent's --engine-socket",
     lambda ms: set_env(container(ms, "StatefulSet", "engine", "engine"),
                        "WSTREAM_ENGINE_SOCKET", "/run/wstream/agent.sock")),
    ("/dev/shm smaller than the live memory", "sizeLimit",
     lambda ms: volume(ms, "StatefulSet", "engine", "dshm")["emptyDir"].update(
         sizeLimit="8Mi")),
    ("agent memory limit below shm + staging", "memory limit",
     lambda ms: agent_c(ms)["resources"]["limits"].update(memory="128Mi")),
    ("shm creator's size not the layout's", "WSTREAM_SHM_BYTES",
     lambda ms: set_env(container(ms, "StatefulSet", "engine", "live-shm"),
                        "WSTREAM_SHM_BYTES", "4096")),
    ("layout regions overlapping", "overlap",
     lambda ms: edit_layout(ms, lambda d: d["regions"][1].update(offset=4096))),
    ("layout region past shm_bytes", "runs past the live memory",
     lambda ms: edit_layout(ms, lambda d: d.update(shm_bytes=4096))),
    ("layout allocations next to shm", "'allocations' and the top-level",
     lambda ms: edit_layout(ms, lambda d: d.update(
         allocations=[{"name": "a", "shm": "/other", "bytes": 4096}]))),
    ("layout allocations with one handle twice", "the same cuda_ipc as an earlier",
     lambda ms: edit_layout(ms, lambda d: d.update(allocations=[
         {"name": n, "cuda_ipc": "ab" * 64, "bytes": 4096} for n in ("a", "b")]))),
    ("layout region in an unknown allocation", "unknown allocation 'gpu9'",
     lambda ms: edit_layout(ms, lambda d: (
         d.update(allocations=[{"name": "a", "shm": "/other", "bytes": 4096}]),
         d["regions"][0].update(allocation="gpu9")))),
    ("layout want with an unknown dtype", "unknown dtype",
     lambda ms: edit_layout(ms, lambda d: d["wants"][0].update(dtype="bfloat16"))),
    ("layout want outside its region", "run past region",
     lambda ms: edit_layout(ms, lambda d: d["wants"][2].update(offset=786432))),
    ("layout experts with ep_rank >= ep_size", "ep_rank >= ep_size",
     lambda ms: edit_layout(ms, lambda d: d["experts"][0].update(ep_rank=1))),
    ("layout that is not JSON", "not JSON",
     lambda ms: doc(ms, "ConfigMap", "wstream-layout")["data"].update(
         {"layout.json": "{\"format\": 1,"})),
    ("trainer world size not the Job's completions", "world size mismatch",
     lambda ms: set_env(container(ms, "Job", "wstream-trainer", "trainer"),
                        "WSTREAM_WORLD_SIZE", "3")),
    ("trainer Job not Indexed", "Indexed Job",
     lambda ms: doc(ms, "Job", "wstream-trainer")["spec"].update(completionMode="NonIndexed")),
    ("trainer rank not from the completion index", "completion index",
     lambda ms: container(ms, "Job", "wstream-trainer", "trainer")["env"].__setitem__(
         0, {"name": "WSTREAM_RANK", "value": "0"})),
    ("receiver naming a replica that does not exist", "no pod 2",
     lambda ms: set_env(container(ms, "Job", "wstream-trainer", "trainer"), "WSTREAM_RECEIVERS",
                        "engine-0.wstream-agents:7070,engine-2.wstream-agents:7070")),
    ("receivers missing an agent", "every agent must be listed once",
     lambda ms: set_env(container(ms, "Job", "wstream-trainer", "trainer"), "WSTREAM_RECEIVERS",
                        "engine-0.wstream-agents:7070")),
    ("receiver through the wrong Service", "is not <statefulset>-<n>",
     lambda ms: set_env(container(ms, "Job", "wstream-trainer", "trainer"), "WSTREAM_RECEIVERS",
                        "engine-0.engine:7070,engine-1.wstream-agents:7070")),
    ("receiver on the metrics port", "is not the agent's --listen port",
     lambda ms: set_env(container(ms, "Job", "wstream-trainer", "trainer"), "WSTREAM_RECEIVERS",
                        "engine-0.wstream-agents:9400,engine-1.wstream-agents:7070")),
    ("trainer without IPC_LOCK", "needs IPC_LOCK",
     lambda ms: container(ms, "Job", "wstream-trainer", "trainer")["securityContext"]
     ["capabilities"].update(add=["SYS_NICE"])),
    ("kustomization naming a missing file", "is not a file in deploy/",
     lambda ms: next(d for m in ms for d in m.docs if d.get("kind") == "Kustomization")
     ["resources"].append("podmonitor.yaml")),
    ("kustomization forgetting a manifest", "neither listed nor left out",
     lambda ms: next(d for m in ms for d in m.docs if d.get("kind") == "Kustomization")
     ["resources"].remove("service.yaml")),
]

# With --agent: mutations only the built agent can catch (validate.py's own
# reading of flags and layouts lets them through).
AGENT_MUTATIONS = [
    ("a boolean flag value the agent's parser refuses", "args refused by the agent",
     lambda ms: agent_c(ms)["args"].append("--verify=maybe")),
    ("a repack loader the agent does not have", "no repack loader",
     lambda ms: edit_layout(ms, lambda d: d["experts"][0].update(loader="trtllm-fp4"))),
]

# A file that breaks the yamllint rules deploy/.yamllint turns on.
BAD_YAML = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n"
            "  enabled: yes\n  long: " + "x" * 130 + "\n")
BAD_YAML_RULES = ["document-start", "truthy", "line-length"]


def self_test(args, lint_cmd):
    base = load(args.deploy)
    _, _, total = validate(copy.deepcopy(base))
    failed = 0
    if total:
        print(f"FAIL baseline: the manifests have {total} problem(s) before any "
              "mutation (run without --self-test)")
        return 1
    print("ok   baseline: no problems before mutation")
    for what, expect, mutate in MUTATIONS:
        ms = copy.deepcopy(base)
        mutate(ms)
        validate(ms)
        found = [p for m in ms for p in m.problems]
        hit = [p for p in found if expect in p]
        if hit:
            print(f"ok   caught: {what}: {hit[0]}")
        else:
            failed += 1
            print(f"FAIL missed: {what}: no problem mentions {expect!r}"
                  + (f" (got: {found[:3]})" if found else ""))
    if args.agent:
        _, cross, _ = validate(copy.deepcopy(base))
        problems = check_with_agent(args.agent, cross, show=False)
        if problems:
            print(f"FAIL baseline with {args.agent}: {problems}")
            return 1
        print(f"ok   baseline with {args.agent}: no problems before mutation")
    for what, expect, mutate in AGENT_MUTATIONS if args.agent else []:
        ms = copy.deepcopy(base)
        mutate(ms)
        _, cross, _ = validate(ms)
        found = [p for m in ms for p in m.problems]
        found += check_with_agent(args.agent, cross, show=False)
        hit = [p for p in found if expect in p]
        print(f"{'ok   caught' if hit else 'FAIL missed'}: {what}"
              + (f": {hit[0]}" if hit else f": no problem mentions {expect!r}"))
        failed += 0 if hit else 1
    with tempfile.TemporaryDirectory(prefix="wst-lint-") as tmp:
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write(BAD_YAML)
        found = run_yamllint(lint_cmd, os.path.join(args.deploy, ".yamllint"), [bad])
        found = found.get(os.path.abspath(bad), [])
        for rule in BAD_YAML_RULES:
            hit = [p for p in found if f"({rule})" in p]
            print(f"{'ok   caught' if hit else 'FAIL missed'}: yamllint {rule}"
                  + (f": {hit[0]}" if hit else ""))
            failed += 0 if hit else 1
    n = len(MUTATIONS) + len(BAD_YAML_RULES) + (len(AGENT_MUTATIONS) if args.agent else 0)
    print(f"{'ok' if not failed else 'FAIL'}: {n - failed} of {n} mutations caught")
    return 0 if not failed else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deploy", default=DEPLOY, help="the manifests' folder (deploy/)")
    ap.add_argument("--self-test", action="store_true",
                    help="check that mutated manifests are refused")
    ap.add_argument("--agent", metavar="PATH",
                    help="a built wstream-agent to check flags and layout with")
    args = ap.parse_args()
    lint_cmd = yamllint_command()
    if lint_cmd is None:
        print("SKIP: yamllint not installed (Debian: apt install yamllint)")
        return SKIP
    if args.agent and not os.access(args.agent, os.X_OK):
        print(f"validate.py: --agent {args.agent}: not an executable", file=sys.stderr)
        return 2
    if args.self_test:
        return self_test(args, lint_cmd)
    return main_check(args, lint_cmd)


if __name__ == "__main__":
    sys.exit(main())
