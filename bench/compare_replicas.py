"""bench/compare_replicas.py: the replicated gateway of `bench/compare --replicas N` (issue 29).

A fleet of gateways is what replica sync is for, so it is measured as one would deploy it: N
kvgate processes with the same config, one redis-server they share state through (unless
--no-sync), and HAProxy in TCP mode balancing connections round robin in front of them. The
replayer opens a connection per request, so the turns of one session reach different replicas
and a replica routes turns whose earlier prompts another one routed. This module starts and
stops those processes, waits until the replicas see each other, and afterwards reads what they
say about the sync (/admin/cluster and the kvgate_cluster_* metrics) and asks two of them
(/admin/explain) where each of a sample of the replayed requests would go: how often they
agree. bench/compare calls it; on its own it does nothing.
"""
import itertools
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request

# Headers kvgate-replay sent that a POST to /admin/explain must not repeat.
TRANSPORT_HEADERS = {"host", "content-length", "connection", "transfer-encoding"}


def label_suffix(replicas, sync):
    """` x3` or ` x3 no-sync`, appended to a row's policy so replicated rows stand apart."""
    if replicas <= 1:
        return ""
    return f" x{replicas}" + ("" if sync else " no-sync")


def strip_suffix(label):
    return re.sub(r" x\d+(?: no-sync)?$", "", label)


def free_port():
    """A loopback port nobody listens on now (for servers that want a port number: Redis and
    HAProxy cannot report one they chose). A race with another process is retried by callers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _serve_on_free_port(what, launch, wait_for, stop, attempts=3):
    """Starts `launch(port)` on a free port and waits until it accepts; another port if the
    process exits first (a port taken between free_port and the bind)."""
    for attempt in range(attempts):
        port = free_port()
        proc, log_path = launch(port)
        try:
            wait_for(lambda: accepts(port) or proc.poll() is not None, 20, what)
        except BaseException:  # wait_for exits on a timeout: not with the process left running
            stop(proc)
            raise
        if proc.poll() is None:
            return proc, port
        stop(proc)
        if attempt == attempts - 1:
            with open(log_path) as f:
                sys.exit(f"compare: {what} did not start:\n{f.read()[-2000:]}")
    return None


def start_redis(tmp, tag, start, wait_for, stop):
    """A private redis-server on loopback: no persistence, so nothing outlives the run."""
    def launch(port):
        log_path = os.path.join(tmp, f"redis-{tag}.log")
        return start(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                      "--bind", "127.0.0.1"], log_path), log_path
    return _serve_on_free_port("redis-server", launch, wait_for, stop)


def haproxy_config(port, backends):
    """TCP mode, round robin over connections (one thread: a strict rotation, and the cores
    stay with the gateways); long timeouts, streams can last minutes."""
    lines = ["global", "  nbthread 1", "  maxconn 8192", "defaults", "  mode tcp",
             "  timeout connect 5s", "  timeout client 1h", "  timeout server 1h",
             "frontend replay", f"  bind 127.0.0.1:{port}", "  default_backend kvgate",
             "backend kvgate", "  balance roundrobin"]
    lines += [f"  server r{i} 127.0.0.1:{p}" for i, p in enumerate(backends)]
    return "\n".join(lines) + "\n"


def start_haproxy(tmp, tag, backends, start, wait_for, stop):
    def launch(port):
        cfg = os.path.join(tmp, f"haproxy-{tag}.cfg")
        with open(cfg, "w") as f:
            f.write(haproxy_config(port, backends))
        log_path = os.path.join(tmp, f"haproxy-{tag}.log")
        return start(["haproxy", "-db", "-f", cfg], log_path), log_path
    return _serve_on_free_port("haproxy", launch, wait_for, stop)


def replica_config(base_path, path, redis_port, name, replica):
    """The shared config plus an admin listener of the replica's own (kvgate serves /admin/*
    on the API listener only with an admin token) and its cluster section (none without
    sync)."""
    with open(base_path) as f:
        text = f.read()
    text += 'admin: {listen: "127.0.0.1:0"}\n'
    if redis_port is not None:
        text += (f'cluster: {{redis: "redis://127.0.0.1:{redis_port}", name: "{name}", '
                 f'replica: "{replica}"}}\n')
    with open(path, "w") as f:
        f.write(text)


RUN_IDS = itertools.count(1)


def start_gateways(n, sync, tmp, tag, config, kvgate, owned, start, stop, wait_for, port_of):
    """The run's gateway: one kvgate on `config` (n == 1, as bench/compare always did), or n
    replicas of it, ready (and, with sync, seeing each other), with their redis-server and
    HAProxy in front. Every process is appended to `owned` as it starts, so that the caller
    stops them all whatever fails. `port_of(proc, log)` is kvgate's API port once it listens.
    Returns (the kvgates' API ports, their admin ports (none for one kvgate), the port to
    replay against)."""
    redis_port = None
    if n > 1 and sync:
        redis, redis_port = start_redis(tmp, tag, start, wait_for, stop)
        owned.append(redis)
    cluster = f"compare-{os.getpid()}-{next(RUN_IDS)}"  # one fleet of replicas per run
    ports, admin = [], []
    for i in range(n):
        log_path = os.path.join(tmp, f"gw-{tag}.log" if n == 1 else f"gw-{tag}-r{i}.log")
        cfg = config
        if n > 1:
            cfg = os.path.join(tmp, f"kvgate-{tag}-r{i}.yaml")
            replica_config(config, cfg, redis_port, cluster, f"r{i}")
        proc = start([kvgate, "--config", cfg], log_path)
        owned.append(proc)
        ports.append(wait_for(lambda: port_of(proc, log_path), 30, "kvgate"))
        if n > 1:
            admin.append(admin_port(log_path))
    if n == 1:
        return ports, [], ports[0]
    wait_ready(ports, admin, sync, wait_for)
    haproxy, port = start_haproxy(tmp, tag, ports, start, wait_for, stop)
    owned.append(haproxy)
    return ports, admin, port


def admin_port(log_path):
    """The admin listener's port: kvgate logs it before the API listener's."""
    with open(log_path) as f:
        text = f.read()
    m = re.search(r"admin API listening on [^ ]+:(\d+)", text)
    if not m:
        sys.exit(f"compare: no admin listener in {log_path}:\n{text[-2000:]}")
    return int(m.group(1))


def get(port, path, timeout=10):
    """(status, body) of GET http://127.0.0.1:port/path; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError:
        return 0, ""


def wait_ready(ports, admin, sync, wait_for):
    """Every replica's /ready (API `ports`); with sync, every replica's /admin/cluster (`admin`
    ports) listing the others. A kvgate without the cluster module (404) is logged and not
    waited for."""
    for i, port in enumerate(ports):
        wait_for(lambda port=port: get(port, "/ready")[0] == 200, 60, f"replica r{i} /ready")
    if not sync:
        return
    if 404 in [get(port, "/admin/cluster")[0] for port in admin]:
        print("compare: /admin/cluster is not served (a kvgate without the cluster module); "
              "not waiting for the replicas to see each other", file=sys.stderr, flush=True)
        return

    def sees_all(port):
        code, body = get(port, "/admin/cluster")
        view = json.loads(body) if code == 200 else {}
        return bool(view.get("connected")) and len(view.get("peers") or []) >= len(admin) - 1
    for i, port in enumerate(admin):
        wait_for(lambda port=port: sees_all(port), 60,
                 f"replica r{i} to see its {len(admin) - 1} peers in /admin/cluster")


CLUSTER_COUNTERS = {"messages_sent": "kvgate_cluster_messages_sent_total",
                    "messages_received": "kvgate_cluster_messages_received_total",
                    "messages_lost": "kvgate_cluster_messages_lost_total",
                    "bytes_sent": "kvgate_cluster_bytes_sent_total",
                    "bytes_received": "kvgate_cluster_bytes_received_total",
                    "connected": "kvgate_cluster_connected", "peers": "kvgate_cluster_peers"}
LAG_BUCKET = "kvgate_cluster_visibility_lag_seconds_bucket"


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cpu_seconds(port):
    """process_cpu_seconds_total of the kvgate on `port` (its API listener), None if unread."""
    code, text = get(port, "/metrics")
    return metric_sum(text, "process_cpu_seconds_total") if code == 200 else None


def lag_buckets(text):
    """The visibility-lag histogram's cumulative buckets, summed over its series: {le: n}."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(LAG_BUCKET + "{"):
            continue
        m = re.search(r'le="([^"]+)"', line)
        if m:
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            out[le] = out.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def quantile_le(buckets, q):
    """The upper bound of the first bucket holding the q-quantile (None without samples)."""
    items = sorted(buckets.items())
    total = items[-1][1] if items else 0
    return next((le for le, n in items if total and n >= q * total), None)


def routed_requests(text):
    """Requests the replica answered through a worker (kvgate_http_requests_total with a
    worker label): how HAProxy spread the replay."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("kvgate_http_requests_total{") and re.search(r'worker="[^"]', line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def scrape_replica(port):
    """One replica's /admin/cluster (None when not served), the requests it routed and its
    cluster metrics (None when it exports none)."""
    code, body = get(port, "/admin/cluster")
    view = json.loads(body) if code == 200 else None
    code, text = get(port, "/metrics")
    metrics = None
    if code == 200 and "kvgate_cluster_" in text:
        metrics = {k: metric_sum(text, name) for k, name in CLUSTER_COUNTERS.items()}
        metrics["lag_buckets"] = {("+Inf" if le == float("inf") else repr(le)): n
                                  for le, n in lag_buckets(text).items()}
    return {"admin_cluster": view, "requests": routed_requests(text) if code == 200 else None,
            "metrics": metrics}


def explain_agreement(ports, sample_path, timeout=60):
    """Posts each sampled request to /admin/explain of replicas r0 and r1: the share of those
    both could explain for which they chose the same worker."""
    compared = agreed = 0
    failures = {}
    with open(sample_path) as f:
        sample = [json.loads(line) for line in f if line.strip()]
    for req in sample:
        headers = {k: v for k, v in req["headers"].items()
                   if k.lower() not in TRANSPORT_HEADERS}
        headers["x-kvgate-endpoint"] = req["path"]
        chosen = []
        for port in ports[:2]:
            r = urllib.request.Request(f"http://127.0.0.1:{port}/admin/explain",
                                       data=req["body"].encode(), headers=headers, method="POST")
            try:
                with urllib.request.urlopen(r, timeout=timeout) as resp:
                    chosen.append(json.loads(resp.read()).get("chosen"))
            except urllib.error.HTTPError as e:
                failures[f"http_{e.code}"] = failures.get(f"http_{e.code}", 0) + 1
                break
            except OSError as e:
                failures[type(e).__name__] = failures.get(type(e).__name__, 0) + 1
                break
        if len(chosen) == 2:
            compared += 1
            agreed += chosen[0] == chosen[1]
    return {"sampled": len(sample), "compared": compared, "agreed": agreed,
            "share": agreed / compared if compared else None, "failures": failures}


def index_views(port):
    """What a replica's indexes hold (GET /admin/workers?blocks=1): per worker URL, the
    approximate index's block hashes and precise mode's engine block ids (None when the worker
    has no KV events)."""
    code, body = get(port, "/admin/workers?blocks=1", timeout=60)
    if code != 200:
        return None
    views = {}
    for w in json.loads(body)["workers"]:
        precise = w.get("precise")
        ranks = None
        if precise:
            ranks = [{tier: sorted(ids) for tier, ids in (r.get("engine_block_ids") or {}).items()}
                     for r in precise.get("ranks", [])]
        views[w["url"]] = {"approx": w["index"].get("gpu_block_hashes", []), "precise": ranks}
    return views


def index_agreement(ports):
    """After a replay: whether every replica's indexes equal replica 0's, block for block
    (approximate learning, and precise mode's KV-event view), and how many blocks they hold."""
    views = [index_views(port) for port in ports]
    if any(v is None for v in views):
        return None
    out = {}
    for kind in ("approx", "precise"):
        first = {url: w[kind] for url, w in views[0].items()}
        if all(w is None for w in first.values()):
            continue
        differing = sorted({url for v in views[1:] for url, w in v.items()
                            if w[kind] != first.get(url)})
        blocks = sum(len(w) if kind == "approx" else sum(len(ids) for r in w for ids in r.values())
                     for w in first.values() if w)
        out[kind] = {"equal": not differing, "differing_workers": differing, "blocks": blocks}
    return out


def collect(ports, sync, sample_path, requests):
    """What the run's JSON keeps of the replicas (`ports`: their admin listeners): each one's
    view and metrics, fleet totals per replayed request, the lag quantiles of the merged
    histogram, and decision agreement."""
    per = [scrape_replica(port) for port in ports]
    out = {"replicas": len(ports), "sync": sync, "per_replica": per,
           "requests_per_replica": [p["requests"] for p in per]}
    metrics = [p["metrics"] for p in per if p["metrics"]]
    if metrics:
        total = {k: sum(m[k] for m in metrics) for k in CLUSTER_COUNTERS}
        merged = {}
        for m in metrics:
            for le, n in m["lag_buckets"].items():
                key = float("inf") if le == "+Inf" else float(le)
                merged[key] = merged.get(key, 0.0) + n
        out["totals"] = total
        out["messages_sent_per_request"] = total["messages_sent"] / requests if requests else None
        out["bytes_sent_per_request"] = total["bytes_sent"] / requests if requests else None
        out["lag_p50_le"] = quantile_le(merged, 0.50)
        out["lag_p99_le"] = quantile_le(merged, 0.99)
        out["lag_samples"] = max(merged.values()) if merged else 0
    views = [p["admin_cluster"] for p in per if p["admin_cluster"]]
    if views:
        out["min_peers_seen"] = min(len(v.get("peers") or []) for v in views)
        out["messages_lost"] = sum(v.get("messages_lost", 0) for v in views)
    # Learning still in flight when the replay ended has landed a moment later.
    time.sleep(1)
    out["indexes"] = index_agreement(ports)
    if sample_path and os.path.exists(sample_path) and len(ports) >= 2:
        started = time.time()
        out["agreement"] = explain_agreement(ports, sample_path)
        out["agreement"]["wall_s"] = round(time.time() - started, 1)
    return out


def _ms(le):
    return "n/a" if le is None else "∞" if le == float("inf") else f"≤ {le * 1000:g} ms"


def summary(rep):
    """One line for stderr as a run ends."""
    a = rep.get("agreement") or {}
    agree = (f"r0/r1 agree on {a['agreed']}/{a['compared']} sampled requests"
             if a.get("compared") else "no decision agreement measured")
    if a.get("failures"):
        agree += f" (explain failures {a['failures']})"
    sync = (("cluster metrics: none (kvgate without the cluster module)" if rep["sync"]
             else "no cluster section") if "totals" not in rep else
            f"{rep['messages_sent_per_request']:.2f} messages, "
            f"{rep['bytes_sent_per_request']:.0f} bytes sent/request, "
            f"{rep['totals']['messages_lost']:.0f} lost, lag p50 {_ms(rep['lag_p50_le'])} "
            f"p99 {_ms(rep['lag_p99_le'])}")
    spread = "/".join("?" if n is None else f"{n:.0f}" for n in rep["requests_per_replica"])
    agree += "; indexes " + ", ".join(
        f"{kind} {'equal' if v['equal'] else 'differ on ' + str(len(v['differing_workers']))}"
        f" ({v['blocks']} blocks)" for kind, v in (rep.get("indexes") or {}).items())
    return (f"{rep['replicas']} replicas ({'sync' if rep['sync'] else 'no sync'}, requests "
            f"{spread}): {sync}; {agree}")


def table(rows):
    """The replicated rows' sync figures, one line per row of the main table ("" if none)."""
    out = ["| policy | replicas | requests per replica | peers seen (min) "
           "| messages sent / request "
           "| bytes sent / request | messages lost | visibility lag p50 | p99 "
           "| r0/r1 same worker (explain) | indexes equal after the replay |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in rows:
        rep = x.get("replicas")
        if not rep:
            continue
        spread = " / ".join("n/a" if n is None else f"{n:.0f}"
                            for n in rep.get("requests_per_replica") or [])
        cells = [x["policy"], f"{rep['replicas']}{'' if rep['sync'] else ' (no sync)'}",
                 spread or "n/a", str(rep.get("min_peers_seen", "n/a"))]
        if "totals" in rep:
            cells += [f"{rep['messages_sent_per_request']:.2f}",
                      f"{rep['bytes_sent_per_request']:,.0f}",
                      f"{rep['totals']['messages_lost']:.0f}", _ms(rep["lag_p50_le"]),
                      _ms(rep["lag_p99_le"])]
        else:
            cells += ["n/a"] * 5
        a = rep.get("agreement") or {}
        cells.append(f"{a['share'] * 100:.1f}% of {a['compared']}" if a.get("compared") else "n/a")
        cells.append(", ".join(
            f"{kind}: {'yes' if v['equal'] else 'no (' + str(len(v['differing_workers'])) + ' workers)'}"
            for kind, v in (rep.get("indexes") or {}).items()) or "n/a")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) if len(out) > 2 else ""


def markdown(rows, replicas, sync):
    """The docs' lines for the replicated rows: what was run, and table()."""
    sync_table = table(rows)
    if not sync_table:
        return []
    return [f"{replicas} kvgate replicas behind HAProxy (TCP, round robin; a connection per "
            f"request), " + ("synced through one redis-server." if sync else "no sync.")
            + " Sync traffic per replayed request, messages lost, the visibility lag "
            "(kvgate_cluster_visibility_lag_seconds, all replicas), and the share of 50 sampled "
            "requests for which replicas r0 and r1 pick the same worker (POST /admin/explain "
            "after the replay):", "", sync_table, ""]
