"""Checks of rendered Kubernetes objects, for deploy_test.py's `render` check; a file of its own
so that deploy_test.py stays readable. Six kinds:

  secret files   a file kvgate reads (admin.token_file, cluster.password_file) comes from a
                 Secret volume it may read and other users may not
  NetworkPolicy  a policy selects the pods and opens each port only to the peers named
  cluster engine the Redis through which the central and sidecar overlays' replicas share state
                 (issue 29): the Service kvgate's `cluster.redis` names, its pod's probes,
                 resources, restricted securityContext, no persistence, the password from the
                 same Secret kvgate mounts and never in argv, and a fence admitting only kvgate
  pod security   every pod meets the `restricted` Pod Security Standard (issue 33)
  namespace      nothing names a namespace: the overlays apply with `kubectl apply -n ANY`
  placement      a DaemonSet runs only on the nodes a label picks

A failure prints FAIL and exits 1, as deploy_test.py's own checks do.
"""
import os
import re
import sys
import urllib.parse

# The label the kvgate pods carry (base/deployment.yaml), which the Redis fence admits.
KVGATE_PODS = ("app.kubernetes.io/name", "kvgate")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def find(objects, kind, name=None):
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


# ---------------------------------------------------------------------------------- secret files
def secret_volume_for(overlay, what, path, pod, container):
    """The Secret behind the file `path` (config key `what`) in `container`: mounted as a
    directory (a subPath mount is never updated), holding the file, with no bits for other
    users (kvgate refuses such a file) and an fsGroup so the non-root kvgate reads it through
    its group. Returns (secretName, key)."""
    directory, name = os.path.split(path)
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == directory]
    if len(mounts) != 1 or "subPath" in mounts[0]:
        fail(f"{overlay}: no volume mounted at {directory} ({what}), or a subPath one "
             "(never updated)")
    vol = next((v for v in pod.get("volumes", []) if v["name"] == mounts[0]["name"]), {})
    secret = vol.get("secret")
    if not secret or not secret.get("secretName"):
        fail(f"{overlay}: {what}'s volume is not a Secret")
    mode = secret.get("defaultMode", 0o644)
    key = name
    items = secret.get("items")
    if items is not None:
        item = next((i for i in items if i["path"] == name), None)
        if item is None:
            fail(f"{overlay}: the Secret volume for {what} has no item at {name}")
        key, mode = item["key"], item.get("mode", mode)
    if mode & 0o007:
        fail(f"{overlay}: the Secret volume for {what} is readable by other users (mode "
             f"{oct(mode)}): kvgate refuses such a file")
    if not (pod.get("securityContext") or {}).get("fsGroup"):
        fail(f"{overlay}: no fsGroup: the non-root kvgate cannot read a 0440 Secret ({what})")
    return secret["secretName"], key


# --------------------------------------------------------------------------------- NetworkPolicy
def peer_is(peer, label):
    """Whether a NetworkPolicy peer selects only pods with `label` (key, value)."""
    sel = peer.get("podSelector") or {}
    key, value = label
    return (sel.get("matchLabels", {}).get(key) == value or
            any(e["key"] == key and e["operator"] == "In" and e["values"] == [value]
                for e in sel.get("matchExpressions", [])))


def check_network_policy(overlay, objs, pod_labels, open_ports, closed=()):
    """A NetworkPolicy selects the pods, and each of `open_ports` (port name -> the one peer
    label allowed) is reachable only from that peer; no rule admits everyone, and none the
    `closed` ports."""
    pols = [p for p in find(objs, "NetworkPolicy")
            if p["spec"]["podSelector"].get("matchLabels")
            and p["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()]
    if len(pols) != 1:
        fail(f"{overlay}: expected one NetworkPolicy selecting pods {pod_labels}, got {len(pols)}")
    spec = pols[0]["spec"]
    if "Ingress" not in spec.get("policyTypes", []):
        fail(f"{overlay}: NetworkPolicy {pols[0]['metadata']['name']} does not restrict ingress")
    for rule in spec.get("ingress", []):
        if not rule.get("from"):
            fail(f"{overlay}: a NetworkPolicy rule admits every peer: {rule}")
        ports = {p.get("port") for p in rule.get("ports", [])}
        if not rule.get("ports"):
            # Every port: only for peers no listed port is kept from.
            ports = set(open_ports) | set(closed)
        if ports & set(closed):
            fail(f"{overlay}: a NetworkPolicy rule opens {sorted(ports & set(closed))}: {rule}")
        for port in ports & set(open_ports):
            if not all(peer_is(peer, open_ports[port]) for peer in rule["from"]):
                fail(f"{overlay}: port {port} is open to peers other than {open_ports[port]}: {rule}")
    for port, peer in open_ports.items():
        if not any(port in {p.get("port") for p in r.get("ports", [])} and
                   any(peer_is(x, peer) for x in r["from"]) for r in spec.get("ingress", [])):
            fail(f"{overlay}: port {port} is not open to {peer}")


# -------------------------------------------------------------------------------- cluster engine
def quantity_bytes(q):
    """A Kubernetes memory quantity (512Mi, 1Gi, 1G, bytes) in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    if not m:
        fail(f"unreadable memory quantity {q!r}")
    mult = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return int(m.group(1)) * mult


def redis_bytes(n, unit):
    """A Redis memory size (redis.conf's units: mb = 2^20, m = 10^6) in bytes."""
    return int(n) * {"": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20,
                     "g": 10**9, "gb": 2**30}[unit.lower()]


def check_cluster(overlay, objs, cfg, pod, kv, kvgate_labels):
    """kvgate's `cluster:` names a Redis Service of this overlay and a password file mounted
    from the Secret Redis takes its password from; the Redis pod is sound (redis_pod_problems)
    and fenced to kvgate's pods."""
    cl = cfg.get("cluster") or {}
    url = urllib.parse.urlsplit(cl.get("redis", ""))
    if url.scheme != "redis" or not url.hostname:
        fail(f"{overlay}: cluster.redis {cl.get('redis')!r} is not redis://SERVICE:PORT")
    if not cl.get("name"):
        fail(f"{overlay}: cluster.name is empty")
    if cl.get("replica"):
        fail(f"{overlay}: cluster.replica is set: every pod would carry that one name; leave it "
             "empty (hostname:pid, the pod's name)")
    if cl.get("password") or cl.get("password_env") or not cl.get("password_file"):
        fail(f"{overlay}: the Redis password must come from cluster.password_file (a mounted "
             "Secret), not inline nor from the environment")
    secret = secret_volume_for(overlay, "cluster.password_file", cl["password_file"], pod, kv)

    svcs = find(objs, "Service", url.hostname)
    if len(svcs) != 1:
        fail(f"{overlay}: cluster.redis names {url.hostname}, which is no rendered Service "
             f"({[s['metadata']['name'] for s in find(objs, 'Service')]})")
    svc = svcs[0]["spec"]
    if svc.get("type", "ClusterIP") != "ClusterIP":
        fail(f"{overlay}: the Redis Service is {svc['type']}, not ClusterIP")
    sport = next((p for p in svc.get("ports", []) if p["port"] == (url.port or 6379)), None)
    if sport is None:
        fail(f"{overlay}: Service {url.hostname} has no port {url.port or 6379}")
    deps = [d for d in find(objs, "Deployment")
            if svc.get("selector") and svc["selector"].items() <=
            d["spec"]["template"]["metadata"]["labels"].items()]
    if len(deps) != 1:
        fail(f"{overlay}: Service {url.hostname} selects {len(deps)} Deployments, expected one")
    dep = deps[0]
    if dep["spec"].get("replicas", 1) != 1 or dep["spec"].get("strategy", {}).get("type") != "Recreate":
        fail(f"{overlay}: the Redis Deployment must run one pod and be replaced, not rolled "
             "(two at once would split the replicas between them)")
    rpod = dep["spec"]["template"]["spec"]
    target = sport.get("targetPort", sport["port"])
    redis = [c for c in rpod["containers"]
             if any(target in (p.get("name"), p["containerPort"]) for p in c.get("ports", []))]
    if len(redis) != 1:
        fail(f"{overlay}: no single container serves the Redis Service's port {target}")
    port_name = next((p.get("name") for p in redis[0]["ports"]
                      if target in (p.get("name"), p["containerPort"])), None)
    problems = redis_pod_problems(rpod, redis[0], secret, port_name)
    if problems:
        fail(f"{overlay}: the Redis pod: " + "; ".join(problems))
    if not port_name:
        fail(f"{overlay}: the Redis port has no name for the NetworkPolicy to open")
    if not peer_is({"podSelector": {"matchLabels": kvgate_labels}}, KVGATE_PODS):
        fail(f"{overlay}: kvgate's pods lack {KVGATE_PODS}, the label the Redis fence admits")
    check_network_policy(overlay, objs, dep["spec"]["template"]["metadata"]["labels"],
                         {port_name: KVGATE_PODS})


def redis_pod_problems(pod, c, secret, port_name):
    """What is wrong with the Redis container `c` in `pod`, whose password must be the key
    secret = (secretName, key), as a list of sentences."""
    out = []
    if not re.search(r"(^|/)redis:\d[\w.-]*$", c.get("image", "")):
        out.append(f"image {c.get('image')!r} is not redis:<pinned version>")
    script = " ".join(c.get("command", []) + c.get("args", []))
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in c.get("env", [])}
    pw_vars = [n for n, ref in env.items()
               if ref and (ref.get("name"), ref.get("key")) == secret]
    if "requirepass" not in script or re.search(r"--requirepass\b", script):
        out.append("no requirepass, or --requirepass, which puts the password in argv")
    elif not any(re.search(r"requirepass\s+\"?\$\{?%s\b" % v, script) for v in pw_vars):
        out.append(f"requirepass is not taken from an env var holding the Secret {secret}")
    if not re.search(r"--save\s+(\"\"|'')", script) or not re.search(r"--appendonly\s+no\b", script):
        out.append("persistence is on (needs --save \"\" and --appendonly no)")
    mm = re.search(r"maxmemory\s+(\d+)([kmg]b?)?\b", script, re.I)
    policy = re.search(r"maxmemory-policy\s+(\S+)", script)
    limit = (c.get("resources", {}).get("limits") or {}).get("memory")
    if not mm or not policy or policy.group(1) not in ("allkeys-lru", "noeviction"):
        out.append("needs maxmemory and maxmemory-policy allkeys-lru or noeviction")
    elif not limit or redis_bytes(mm.group(1), mm.group(2) or "") >= quantity_bytes(limit):
        out.append(f"maxmemory is not below the memory limit {limit}")
    req = c.get("resources", {}).get("requests") or {}
    if not req.get("cpu") or not req.get("memory"):
        out.append("no cpu and memory requests")
    for probe in ("readinessProbe", "livenessProbe"):
        p = c.get(probe) or {}
        if "tcpSocket" in p:
            if p["tcpSocket"].get("port") not in (port_name, 6379):
                out.append(f"{probe} checks another port than Redis's")
        elif "exec" in p:
            cmd = " ".join(p["exec"].get("command", []))
            # redis-cli exits 0 on a NOAUTH answer: the probe must look for PONG, and
            # authenticate through REDISCLI_AUTH (from the Secret), not -a in argv.
            if ("redis-cli" not in cmd or "PONG" not in cmd or re.search(r"\s(-a|--pass)\b", cmd)
                    or "REDISCLI_AUTH" not in pw_vars):
                out.append(f"{probe} is not an authenticated redis-cli ping that checks PONG")
        else:
            out.append(f"no tcpSocket or exec {probe}")
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    sc = {**psc, **csc}
    if sc.get("runAsNonRoot") is not True or sc.get("runAsUser", 1) == 0:
        out.append("may run as root")
    if csc.get("readOnlyRootFilesystem") is not True or csc.get("allowPrivilegeEscalation") is not False:
        out.append("needs readOnlyRootFilesystem and no privilege escalation")
    if "ALL" not in (csc.get("capabilities") or {}).get("drop", []):
        out.append("capabilities are not all dropped")
    if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        out.append("no RuntimeDefault seccomp profile")
    if pod.get("automountServiceAccountToken") is not False:
        out.append("mounts a ServiceAccount token it has no use for")
    # A read-only root: Redis's --dir must be a writable emptyDir.
    d = re.search(r"--dir\s+(\S+)", script)
    mount = next((m for m in c.get("volumeMounts", []) if d and m["mountPath"] == d.group(1)), None)
    vol = next((v for v in pod.get("volumes", []) if mount and v["name"] == mount["name"]), {})
    if "emptyDir" not in vol or mount.get("readOnly"):
        out.append("its --dir is not a writable emptyDir mount")
    return out


# ------------------------------------------------------------------------- Pod Security Standards
# The `restricted` profile of the Pod Security Standards (Kubernetes 1.32; it contains every
# `baseline` rule), so that an overlay applies in a namespace labelled
# pod-security.kubernetes.io/enforce=restricted. Written from the published table of controls,
# not from the admission plugin's code.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_CAPS = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t",
                 "container_engine_t"}
GOOD_SECCOMP = {"RuntimeDefault", "Localhost"}
POD_CONTROLLERS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                   "ReplicationController", "Job", "PodTemplate"}


def pod_templates(obj):
    """The pod (metadata, spec) an object runs, if it runs one."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    if kind == "Pod":
        return [(obj.get("metadata") or {}, spec)]
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    elif kind not in POD_CONTROLLERS:
        return []
    t = obj.get("template") if kind == "PodTemplate" else spec.get("template")
    return [((t or {}).get("metadata") or {}, (t or {}).get("spec") or {})]


def restricted_problems(meta, pod):
    """Every way the pod breaks the `restricted` profile, as sentences."""
    out = []
    psc = pod.get("securityContext") or {}
    # A few controls do not apply to Windows pods (the profile says so).
    linux = (pod.get("os") or {}).get("name") != "windows"
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            out.append(f"{f} is set")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("the pod is a HostProcess pod")
    for v in pod.get("volumes") or []:
        bad = sorted(set(v) - {"name"} - RESTRICTED_VOLUMES)
        if bad:
            out.append(f"volume {v['name']} is of type {', '.join(bad)} (allowed: "
                       f"{', '.join(sorted(RESTRICTED_VOLUMES))})")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')} is not in the safe set")
    annotations = meta.get("annotations") or {}
    for k, v in annotations.items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                v == "runtime/default" or v.startswith("localhost/")):
            out.append(f"AppArmor annotation {k}: {v}")
        if "seccomp.security.alpha.kubernetes.io/" in k and v == "unconfined":
            out.append(f"seccomp annotation {k}: unconfined")

    def context_problems(who, sc):
        se = sc.get("seLinuxOptions") or {}
        if se.get("type") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"{who}: seLinuxOptions {se}")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{who}: AppArmor profile Unconfined")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{who}: seccomp profile Unconfined")
        if sc.get("runAsNonRoot") is False:
            out.append(f"{who}: runAsNonRoot is false")
        if sc.get("runAsUser") == 0:
            out.append(f"{who}: runAsUser is 0")

    context_problems("pod", psc)
    containers = [(k[:-1], c) for k in ("initContainers", "containers", "ephemeralContainers")
                  for c in pod.get(k) or []]
    for kind, c in containers:
        who = f"{kind} {c['name']}"
        sc = c.get("securityContext") or {}
        context_problems(who, sc)
        if sc.get("privileged"):
            out.append(f"{who}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{who}: a HostProcess container")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{who}: procMount {sc['procMount']}")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{who}: hostPort {p['hostPort']}")
        if sc.get("runAsNonRoot") is not True and psc.get("runAsNonRoot") is not True:
            out.append(f"{who}: runAsNonRoot is not true (container or pod)")
        caps = sc.get("capabilities") or {}
        added = set(caps.get("add") or [])
        if added - BASELINE_CAPS:
            out.append(f"{who}: adds capabilities {sorted(added - BASELINE_CAPS)}")
        elif linux and added - RESTRICTED_CAPS:
            out.append(f"{who}: adds capabilities {sorted(added - RESTRICTED_CAPS)} (only "
                       "NET_BIND_SERVICE may be added)")
        if not linux:
            continue
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{who}: allowPrivilegeEscalation is not false")
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{who}: capabilities.drop lacks ALL")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in GOOD_SECCOMP:
            out.append(f"{who}: no RuntimeDefault or Localhost seccomp profile (container or pod)")
    return out


def check_restricted(where, objs):
    """Every pod the rendered objects run meets the `restricted` profile."""
    for o in objs:
        for meta, pod in pod_templates(o):
            problems = restricted_problems(meta, pod)
            if problems:
                fail(f"{where}: {o['kind']}/{o['metadata']['name']} breaks the restricted Pod "
                     "Security Standard: " + "; ".join(problems))


# ------------------------------------------------------------------------------------- namespace
# The overlays are applied with `kubectl apply -n NAMESPACE` into any namespace (docs/deploy.md),
# so nothing may name one: an object's namespace, a RoleBinding subject's, kvgate's
# discovery.kubernetes[].namespace (it defaults to the pod's own), or a cluster DNS name
# (SERVICE.NAMESPACE.svc...; kvgate's discovery.dns uses no search domains, so a name inside the
# cluster must be such a name: use discovery.kubernetes, or a short name where the system
# resolver looks it up).
CLUSTER_DNS = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc\b")


def namespaced_dns_name(s):
    """The first SERVICE.NAMESPACE.svc in s, but kubernetes.default.svc itself (the API server:
    the same name from every namespace)."""
    for m in CLUSTER_DNS.finditer(s):
        whole = m.start() == 0 or not re.match(r"[-._a-z0-9]", s[m.start() - 1])
        if not (whole and m.group(0) == "kubernetes.default.svc"):
            return m.group(0)
    return None


def strings_in(value, path=""):
    """(path, string) for every string in a parsed YAML value; a ConfigMap's YAML file is
    walked as YAML (its comments may show example names)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from strings_in(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings_in(v, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


def check_no_fixed_namespace(where, objs, yaml_load):
    """No rendered object ties the overlay to one namespace."""
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if (o.get("metadata") or {}).get("namespace"):
            fail(f"{where}: {name} sets metadata.namespace {o['metadata']['namespace']!r}; the "
                 "namespace is the one `kubectl apply -n` names")
        for s in o.get("subjects") or []:
            if s.get("namespace"):
                fail(f"{where}: {name} names namespace {s['namespace']!r} for subject {s['name']}")
        body = dict(o)
        if o["kind"] == "ConfigMap":
            data = {}
            for k, v in (o.get("data") or {}).items():
                parsed = yaml_load(v) if k.endswith((".yaml", ".yml")) else v
                data[k] = parsed
                if k == "kvgate.yaml" and isinstance(parsed, dict):
                    for src in ((parsed.get("discovery") or {}).get("kubernetes") or []):
                        if src.get("namespace"):
                            fail(f"{where}: {name}: discovery.kubernetes names namespace "
                                 f"{src['namespace']!r}; leave it empty (the pod's own)")
            body["data"] = data
        for path, s in strings_in(body):
            dns = namespaced_dns_name(s)
            if dns:
                fail(f"{where}: {name} {path}: {s!r} is a cluster DNS name with a fixed "
                     f"namespace ({dns})")
        if o["kind"] == "NetworkPolicy":
            for rule in (o.get("spec") or {}).get("ingress") or []:
                for peer in rule.get("from") or []:
                    sel = peer.get("namespaceSelector") or {}
                    if "kubernetes.io/metadata.name" in (sel.get("matchLabels") or {}) or any(
                            e.get("key") == "kubernetes.io/metadata.name"
                            for e in sel.get("matchExpressions") or []):
                        fail(f"{where}: {name} selects a namespace by its name")


# -------------------------------------------------------------------------------- node placement
def check_daemonsets_placed(where, objs):
    """A DaemonSet runs on every node unless told otherwise: each one here (the store's data
    nodes, 17 GiB each) is placed by a node label, a nodeSelector or a required node affinity."""
    for ds in find(objs, "DaemonSet"):
        pod = ds["spec"]["template"]["spec"]
        terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
                     "nodeSelectorTerms") or []
        if not pod.get("nodeSelector") and not any(t.get("matchExpressions") or
                                                   t.get("matchFields") for t in terms):
            fail(f"{where}: DaemonSet {ds['metadata']['name']} has no nodeSelector or required "
                 "node affinity: it would run on every node")
