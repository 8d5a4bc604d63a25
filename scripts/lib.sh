# shellcheck shell=bash
# scripts/lib.sh: what the scripts share, sourced (never run): free ports, fields of JSON
# files, background processes ended on exit, the emulator binaries, Python venvs, and the
# benchmarks' push load (h2load). Needs bash, python3 and, for what it runs, curl and h2load.
#
#   source "$(dirname "$0")/lib.sh"

# A TCP port on 127.0.0.1 that nobody listens on now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# json_field FILE EXPR: prints json.load(FILE)EXPR, e.g. json_field ready.json "['admin']".
json_field() { json_value "$2" < "$1"; }

# json_value EXPR: the same for the JSON document on stdin.
json_value() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# wait_for_file FILE [SECONDS]: waits (polling every 50 ms, 10 s by default) until FILE
# exists; returns 1 if it never did.
wait_for_file() {
  local tries=$(( ${2:-10} * 20 ))
  for _ in $(seq "$tries"); do [ -f "$1" ] && return 0; sleep 0.05; done
  return 1
}

# Background processes: start each with `command & pids+=($!)`; cleanup ends them (with
# $kill_signal, TERM unless set), waits for them and removes $work when set.
# with_cleanup makes $work and runs cleanup on exit, Ctrl-C included.
pids=()
work=""
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -"${kill_signal:-TERM}" "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  if [ -n "$work" ]; then rm -rf "$work"; fi
}
with_cleanup() {
  work="$(mktemp -d)"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

# The emulator under test: $APNS_EMULATOR_BIN, else the debug build's (in the directory
# `swift build --show-bin-path` names). Builds nothing.
emulator_binary() { echo "${APNS_EMULATOR_BIN:-$(swift build --show-bin-path)/apns-emulator}"; }

# The release build the benchmarks measure, built now; prints its path.
release_binary() {
  swift build -c release --product apns-emulator >&2
  echo "$(swift build -c release --show-bin-path)/apns-emulator"
}

# cpu_model: this machine's processor, for the benchmarks' "machine:" line.
cpu_model() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'; }

# median: of the numbers on stdin, one a line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# ensure_venv DIR PYTHON MESSAGE PIP_ARGUMENTS…: a venv made with PYTHON holding what
# `pip install PIP_ARGUMENTS` installs. Remade (MESSAGE on stderr) when the arguments, a
# requirements file they name or the interpreter changed.
ensure_venv() {
  local venv="$1" python="$2" message="$3"; shift 3
  local stamp want arg
  want="$( { printf '%s\n' "$@" "$python"; "$python" -V 2>&1
             for arg in "$@"; do if [ -f "$arg" ]; then cat "$arg"; fi; done; } | sha256sum | cut -d' ' -f1)"
  stamp="$venv/.requirements.sha256"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  echo "$message" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
  echo "$want" > "$stamp"
}

# ---- the benchmarks' push (scripts/bench, bench-cluster, bench-state, callgrind-request-path)
bench_team=BENCHTEAM1
bench_key_id=BENCHKEY01
bench_bundle=com.example.bench

# bench_credentials EXE: a fresh provider key ($work/key.p8, named by $bench_key), the
# payload ($work/payload.json), a provider token for them ($jwt) and the push's h2load
# arguments: push_headers (token, topic, push type) and push_body.
bench_credentials() {
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
  bench_key="$bench_team:$bench_key_id:$work/key.p8"
  printf '{"aps":{"alert":{"title":"Benchmark","body":"A push of typical size"},"badge":1},"id":42}' > "$work/payload.json"
  jwt=$("$1" jwt --key "$bench_key")
  push_headers=(-H "authorization: bearer $jwt" -H "apns-topic: $bench_bundle" -H "apns-push-type: alert")
  push_body=(-d "$work/payload.json")
}

# bench_device ADMIN: a new virtual device of the benchmark app; prints its token.
bench_device() {
  curl -sf -H 'content-type: application/json' -d "{\"bundleId\":\"$bench_bundle\",\"environment\":\"sandbox\"}" \
    "http://$1/api/v1/devices" | json_value '["token"]'
}

# h2load_push H2LOAD_OPTIONS… [URI]: h2load sending the benchmark push (with apns-priority
# 10); prints "req/s 2xx-count" from its summary.
h2load_push() {
  h2load "${push_headers[@]}" -H "apns-priority: 10" "${push_body[@]}" "$@" 2>&1 |
    awk '/^finished in/ {rps=$4} /^status codes:/ {ok=$3} END {print rps, ok}'
}
