# Shared by bench/proxy/run.sh, idle.sh, syscalls.sh, cpu.sh and cadence.sh (sourced): start
# and stop one proxy target in front of the upstream on port $UP. Sourcing it creates the run's
# scratch folder (tmp) and the array pids (processes killed at exit, with tmp removed). The
# caller sets BIN, POLICY, UP (or calls start_fake_upstream or start_static) and optionally
# KVGATE_ARGS and KVGATE_BEFORE (the binary of the kvgate-before target, for an A/B in one
# run). Targets:
# direct, nginx, haproxy, haproxy-nodelay, kvgate, kvgate-before; NAME-tls for TLS.
TSCHEME=http
tmp=$(mktemp -d)
chmod 755 "$tmp"  # nginx workers (user nobody) write request bodies under it
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# The chunked fake worker (two threads, 8 chunks an answer) on a port it picks -> UP.
start_fake_upstream() {
  "$BIN/kvgate-fake-upstream" --threads 2 --chunks 8 >"$tmp/fake.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q port= "$tmp/fake.out" && break; sleep 0.05; done
  UP=$(sed -n 's/port=//p' "$tmp/fake.out")
}

# The static upstream: one nginx worker, keep-alive without limit, a fixed 4 KiB answer.
start_static() {
  local port dir=$tmp/static content
  port=$(free_port); mkdir -p "$dir"
  content=$(head -c 2000 /dev/zero | tr '\0' 'a')  # used twice: nginx takes <= 4 KiB a parameter
  cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path $dir/body;
  client_body_buffer_size 64k;
  client_max_body_size 32m;  # the 1 MB rows (nginx refuses more than 1 MiB by default)
  server {
    listen 127.0.0.1:$port;
    location / {
      default_type application/json;
      set \$half '$content';
      return 200 '{"id":"cmpl-1","object":"chat.completion","model":"fake-model","choices":[{"index":0,"message":{"role":"assistant","content":"\$half\$half"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1024,"completion_tokens":1000,"total_tokens":2024}}';
    }
  }
}
EOF
  nginx -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;' 2>"$dir/stderr" &
  pids+=($!)
  wait_port "$port"
  UP=$port
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do curl -sk -o /dev/null "$TSCHEME://127.0.0.1:$1/" && return 0; sleep 0.05; done; }

start_target() {  # start_target NAME THREADS -> sets TPORT, TPID, TSCHEME
  local name=$1 t=$2 ssl="" ssl_files="" hssl="" kssl=""
  TPID=""
  TSCHEME=http
  case $name in
    *-tls)
      name=${name%-tls}; TSCHEME=https; ssl=" ssl"
      ssl_files="ssl_certificate $tmp/cert.pem; ssl_certificate_key $tmp/key.pem;"
      hssl=" ssl crt $tmp/both.pem"; kssl="--tls-cert $tmp/cert.pem --tls-key $tmp/key.pem" ;;
  esac
  case $name in
    direct) TPORT=$UP; return ;;
    nginx)
      TPORT=$(free_port); mkdir -p "$tmp/nginx"
      sed -e "s#@WORKERS@#$t#; s#@DIR@#$tmp/nginx#g; s#@UPSTREAM_PORT@#$UP#; s#@PORT@#$TPORT#" \
        -e "s#@SSL@#$ssl#; s#@SSL_FILES@#$ssl_files#" \
        bench/proxy/nginx.conf.in >"$tmp/nginx/nginx.conf"
      nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx.err" &
      TPID=$! ;;
    haproxy | haproxy-nodelay)
      local options=""
      [ "$name" = haproxy-nodelay ] && options="  option http-no-delay"
      TPORT=$(free_port); mkdir -p "$tmp/haproxy"
      sed -e "s#@THREADS@#$t#; s#@DIR@#$tmp/haproxy#g; s#@UPSTREAM_PORT@#$UP#; s#@PORT@#$TPORT#" \
        -e "s#@SSL@#$hssl#; s#@OPTIONS@#$options#" \
        bench/proxy/haproxy.cfg.in >"$tmp/haproxy/haproxy.cfg"
      haproxy -f "$tmp/haproxy/haproxy.cfg" -db >"$tmp/haproxy.log" 2>&1 &
      TPID=$! ;;
    kvgate | kvgate-before)
      TPORT=$(free_port)
      local bin=$BIN/kvgate
      [ "$name" = kvgate-before ] && bin=$KVGATE_BEFORE
      # shellcheck disable=SC2086
      "$bin" --listen "127.0.0.1:$TPORT" --worker "http://127.0.0.1:$UP" --threads "$t" \
        --policy "$POLICY" --log-level warn $kssl ${KVGATE_ARGS:-} >"$tmp/kvgate.log" 2>&1 &
      TPID=$! ;;
  esac
  pids+=("$TPID")
  wait_port "$TPORT"
}

stop_target() {
  if [ -n "$TPID" ]; then kill "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
}

# Router-overhead quantiles from kvgate's histogram (linear interpolation inside buckets).
overhead() {
  curl -sk "$TSCHEME://127.0.0.1:$1/metrics" | /usr/bin/python3 -c '
import sys, re
b = []
for line in sys.stdin:
    m = re.match(r"kvgate_router_overhead_seconds_bucket\{le=\"([^\"]+)\"\} (\S+)", line)
    if m: b.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
total = b[-1][1] if b else 0
def q(p):
    target, prev_le, prev_c = p * total, 0.0, 0.0
    for le, c in b:
        if c >= target:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * ((target - prev_c) / max(c - prev_c, 1e-9))
        prev_le, prev_c = le, c
    return 0
print("%.1f %.1f %d" % (q(0.5) * 1e6, q(0.99) * 1e6, total))'
}

# load_in_background KIND CONNS SECONDS OUT -> LOAD_PID: wrk warms the target up for a second,
# then loads it for SECONDS in the background (its report in OUT) and one second passes, so a
# caller measures from the steady state on (cpu.sh, perf.sh). Needs start_target first.
load_in_background() {
  request_kind "$1" 512
  # shellcheck disable=SC2086  # KIND_ENV is a list of assignments
  env $KIND_ENV wrk -t1 -c"$2" -d1s -s bench/proxy/post.lua "http://127.0.0.1:$TPORT$KIND_PATH" >/dev/null
  # shellcheck disable=SC2086
  env $KIND_ENV wrk -t1 -c"$2" -d"$3"s -s bench/proxy/post.lua "http://127.0.0.1:$TPORT$KIND_PATH" >"$4" &
  LOAD_PID=$!
  sleep 1
}

# request_kind KIND REPLY_CHUNK_BYTES -> KIND_ENV (post.lua's environment) and KIND_PATH: the
# request kinds of run.sh and syscalls.sh; a non-streamed reply is 8 chunks of REPLY_CHUNK_BYTES.
request_kind() {
  local c=$2
  KIND_PATH=/v1/chat/completions
  case $1 in
    4k) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=512 BODY_BYTES=4096" ;;
    sse) KIND_ENV="STREAM=1 CHUNKS=100 CHUNK_BYTES=0 BODY_BYTES=4096" ;;
    ssepaced) KIND_ENV="STREAM=1 CHUNKS=100 CHUNK_BYTES=0 BODY_BYTES=4096 DELAY_MS=10" ;;
    chat90k) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=92160 PROMPT=agentic" ;;
    agentic) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=409600 PROMPT=agentic" ;;
    agentictools) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=409600 PROMPT=agentic TOOLS=after" ;;
    agentic1m) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=1048576 PROMPT=agentic" ;;
    msg90k) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=92160 API=messages"; KIND_PATH=/v1/messages ;;
    msg400k) KIND_ENV="STREAM=0 CHUNKS=8 CHUNK_BYTES=$c BODY_BYTES=409600 API=messages"; KIND_PATH=/v1/messages ;;
    *) echo "unknown request kind $1" >&2; exit 2 ;;
  esac
}
