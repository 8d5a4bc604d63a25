#!/usr/bin/env python3
"""Compatibility suite: real, unmodified APNs provider libraries against the real emulator.

Run through scripts/test-compat, which starts this inside a private network and mount
namespace (`unshare --net --mount`). In there this driver

  1. brings up loopback and bind-mounts a hosts file over /etc/hosts that maps Apple's host
     names (api.push.apple.com, api.sandbox.push.apple.com, api.development.push.apple.com,
     and the channel-management and broadcast names api-manage-broadcast.(sandbox.)push.apple.com,
     api-broadcast.(sandbox.)push.apple.com) to 127.0.0.1 — visible to this namespace only;
  2. starts the emulator on 127.0.0.1:443 and 127.0.0.1:2197, Apple's two push ports, and
     its channel-management listeners on 127.0.0.1:2195 (sandbox) and :2196 (production);
  3. creates virtual devices through the admin API;
  4. runs each provider (Tests/compat/*_provider.py, java/, node/) as a subprocess, configured
     only as a team would configure a test environment (a CA file to trust), and reads the
     JSON lines it prints: what the LIBRARY reported for each push;
  5. checks those results and the emulator's journal, and prints a table;
  6. for the libraries with Live Activity support (aioapns, kalyke-apns) and node's http2,
     declares a Live Activity type on a device and has the app start activities with update
     tokens (admin API), runs the library's *_live provider (push-to-start, update, end; for
     node also channel create/read/list/delete and a broadcast), and checks the answers, the
     journal's outcome for each push, the device's activities and the emulator's channels;
     a second table.

With --cluster N (scripts/test-compat --cluster 3) step 2 starts, in the same namespace, the
emulator as several instances sharing their state (docs/several-instances.md): one
redis-server on a free loopback port (no persistence, its own directory); N emulators with
--redis and the same key, apps and certs dir, each with two --listen TLS listeners, an admin
and a device listener on free ports of its own (the first is started and ready, so it made the
certs, before the others); and HAProxy (TCP mode, TLS passed through, so SNI still picks the
environment) on 127.0.0.1:443 and :2197 (and the channel listeners on :2195 and :2196),
round-robin over the instances' listeners. The libraries connect through HAProxy; devices are
made through the first instance's admin API and the journal is read from another's, whose
first read after the library's run must show every push. The records must also have
come through at least two instances (instance = connectionId >> 40); the table shows how
many each took. redis-server and haproxy must be installed (scripts/deps.sh test).

Exit status: 0 when every library passed, 1 otherwise.
"""
import argparse
import collections
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEAM_ID = "COMPAT0001"
KEY_ID = "COMPATKEY1"
PUSH_HOSTS = ["api.push.apple.com", "api.sandbox.push.apple.com", "api.development.push.apple.com"]
# Channel management (ports 2195 sandbox, 2196 production) and the broadcast names of Apple's
# examples: mapped too, as a team testing broadcasts would.
CHANNEL_HOSTS = ["api-manage-broadcast.sandbox.push.apple.com", "api-manage-broadcast.push.apple.com",
                 "api-broadcast.sandbox.push.apple.com", "api-broadcast.push.apple.com"]
APPLE_HOSTS = PUSH_HOSTS + CHANNEL_HOSTS
PORTS = [443, 2197]
CHANNEL_PORTS = [2195, 2196]

# What every provider sends, in this order (n is the number in the payload's "compat" key).
# Each case: expected status and reason, and the environment the journal must show.
PLAN = {
    "alert": (200, None, "sandbox"),
    "background": (200, None, "sandbox"),
    "wrong-environment": (400, "BadDeviceToken", "sandbox"),
    "unregistered": (410, "Unregistered", "sandbox"),
    "production": (200, None, "production"),
}
CASE_OF_N = {0: "alert", 1: "background", 2: "wrong-environment", 3: "unregistered", 4: "production"}
BURST_FIRST_N = 5
INSTANCE_SHIFT = 40         # with --redis, a connection id carries its instance in bits 40 and up

# The Live Activity and broadcast cases (Tests/compat/*_live.py, node/live.mjs), by name:
# expected status and reason, and the outcome of the push's journal record (None: a channel
# request or a broadcast, which has no device-push record). Each library sends its own subset
# (Library.live_cases), in its order.
LIVE_PLAN = {
    "start-readme": (200, None, "ignored"),   # kalyke's LiveActivityPayload start: see kalyke_live.py
    "plain-topic": (400, "InvalidPushType", "rejected"),  # liveactivity with the bare bundle id as topic
    "start": (200, None, "delivered"),        # push-to-start
    "start-channel": (200, None, "delivered"),  # push-to-start subscribing to the channel
    "update": (200, None, "delivered"),
    "end": (200, None, "delivered"),
    "channel-create": (201, None, None),
    "channel-read": (200, None, None),
    "channel-list": (200, None, None),
    "broadcast": (200, None, None),
    "channel-delete": (204, None, None),
    "read-deleted": (400, "ChannelNotRegistered", None),
    "broadcast-deleted": (400, "ChannelNotRegistered", None),
}
ATTRIBUTES_TYPE = "DeliveryAttributes"


@dataclass
class Library:
    name: str
    slug: str               # part of its bundle id, so its records can be filtered by topic
    exposes_status: bool    # does the library report the HTTP status?
    exposes_apns_id: str    # "all", "success" or "none"
    launch: object = None   # (job file without extension, trusted?) -> (argv, extra environment)
    live: object = None     # the same for its Live Activity / broadcast provider, if it has one
    live_cases: tuple = ()  # the LIVE_PLAN cases that provider sends

    @property
    def topic(self):
        return f"com.example.compat.{self.slug}"


def libraries(python, work, ca):
    """Each library and how a team would point it at the test CA (trusted=True), or not."""
    def python_provider(script):
        return lambda job, trusted: ([python, str(HERE / script), job + ".json"],
                                     {"SSL_CERT_FILE": str(ca)} if trusted else {})

    def python_provider_ca(script):  # a CA option of the library's own: the path as argv[2]
        return lambda job, trusted: ([python, str(HERE / script), job + ".json", *([str(ca)] if trusted else [])],
                                     {})

    def java(job, trusted):
        trust = [f"-Djavax.net.ssl.trustStore={work / 'truststore.p12'}",
                 "-Djavax.net.ssl.trustStorePassword=changeit", "-Djavax.net.ssl.trustStoreType=PKCS12"]
        return ["java", *(trust if trusted else []), "-cp", str(work / "java"), "ApnsProvider",
                job + ".properties"], {}

    def node(script):
        return lambda job, trusted: (["node", str(HERE / "node" / script), job + ".json"],
                                     {"NODE_EXTRA_CA_CERTS": str(ca)} if trusted else {})

    # apns2-up has no liveactivity push type, the JDK provider no Live Activity cases (node's
    # covers a provider without a library). pyapns-client's push() returns only on 200 and
    # raises for any other status (with status_code and apns_id): its apns-id comes with
    # failures only, which "none" is closest to (those ids are still checked in the journal).
    return [
        Library("aioapns", "aioapns", True, "all", python_provider("aioapns_provider.py"),
                python_provider("aioapns_live.py"), ("plain-topic", "start", "update", "end")),
        Library("apns2-up", "apns2", False, "none", python_provider("apns2_provider.py")),
        Library("kalyke-apns", "kalyke", False, "success", python_provider("kalyke_provider.py"),
                python_provider("kalyke_live.py"), ("start-readme", "start", "update", "end")),
        Library("pyapns-client", "pyapns", True, "none", python_provider_ca("pyapns_client_provider.py")),
        Library("jdk-httpclient", "jdk", True, "all", java),
        Library("node-http2", "node", True, "all", node("provider.mjs"), node("live.mjs"),
                ("channel-create", "channel-read", "channel-list", "start-channel", "update", "broadcast",
                 "channel-delete", "read-deleted", "broadcast-deleted")),
    ]


# ---------------------------------------------------------------------------- namespace

def same_namespace_as_init(kind):
    try:
        return os.readlink(f"/proc/self/ns/{kind}") == os.readlink(f"/proc/1/ns/{kind}")
    except OSError:
        return False  # /proc/1 unreadable: we are in a user namespace, not the host's


def enter_private_network(work):
    """Loopback up and Apple's names on 127.0.0.1, for this namespace only."""
    for kind in ("net", "mnt"):
        if same_namespace_as_init(kind):
            sys.exit(f"run.py: refusing to touch /etc/hosts and port 443: this is the host's {kind} "
                     "namespace. Run scripts/test-compat (it uses unshare --net --mount).")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = work / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 localhost\n"
                     f"127.0.0.1 {' '.join(APPLE_HOSTS)}\n")
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    for name in APPLE_HOSTS:
        address = socket.gethostbyname(name)
        if address != "127.0.0.1":
            sys.exit(f"run.py: {name} resolves to {address}, not 127.0.0.1; the hosts mapping did not take")


# ---------------------------------------------------------------------------- emulator

def die_with_parent():
    """preexec_fn: the child gets SIGTERM if this driver dies, so no emulator is left behind."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# Apple-style listeners on Apple's two ports: the SNI / :authority a library sends picks the
# environment, as on Apple's own hosts. Channel management on Apple's 2195 and 2196.
LISTEN_FLAGS = ["--listen", "127.0.0.1:443", "--listen", "127.0.0.1:2197",
                "--sandbox-listen", "off", "--production-listen", "off",
                "--channel-sandbox-listen", "127.0.0.1:2195", "--channel-production-listen", "127.0.0.1:2196"]


def make_key(work):
    key = work / f"AuthKey_{KEY_ID}.p8"
    subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-out", str(key)], check=True, capture_output=True, timeout=30)
    return key


def emulator_command(binary, work, libs, key, listen_flags, ready):
    """The same key, apps and certs dir for the single emulator and every cluster instance."""
    command = [binary, "serve", *listen_flags,
               "--certs-dir", str(work / "certs"), "--auth-key", f"{TEAM_ID}:{KEY_ID}:{key}",
               "--demo", "off", "--quiet", "--ready-file", str(ready)]
    for lib in libs:
        command += ["--app", f"{TEAM_ID}:{lib.topic}"]
    return command


def launch_emulator(command, log_path):
    log = open(log_path, "w")
    try:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    finally:
        log.close()


def wait_ready(process, ready, log_path, what="the emulator"):
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text().strip().endswith("}"):
        if process.poll() is not None:
            sys.exit(f"run.py: {what} exited with {process.returncode} before it was ready:\n"
                     + log_path.read_text()[-3000:])
        if time.monotonic() > deadline:
            process.kill()
            sys.exit(f"run.py: {what} was not ready within 30 s")
        time.sleep(0.05)
    return json.loads(ready.read_text())


def start_emulator(binary, work, libs, key):
    ready = work / "ready.json"
    command = emulator_command(binary, work, libs, key,
                               [*LISTEN_FLAGS, "--admin-listen", "127.0.0.1:0", "--device-listen", "off"], ready)
    process = launch_emulator(command, work / "emulator.log")
    info = wait_ready(process, ready, work / "emulator.log")
    for port in PORTS + CHANNEL_PORTS:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    return process, info, " ".join(command)


# ---------------------------------------------------------------------------- cluster

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process, name, seconds=10):
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        print(f"run.py: {name} did not stop within {seconds} s of SIGTERM; killing it", file=sys.stderr)
        process.kill()
        process.wait(5)


class Cluster:
    """redis-server, N emulator instances sharing their state through it, and HAProxy on
    Apple's two ports in front of their --listen listeners. Every process binds 127.0.0.1 only;
    stop() ends them all, also after a failed start."""

    def __init__(self, size, binary, work, libs, key):
        self.size, self.binary, self.work, self.libs, self.key = size, binary, work, libs, key
        self.redis = None
        self.haproxy = None
        self.instances = []   # (process, ready info, log path), instance k+1 at index k
        self.redis_port = None

    @property
    def processes(self):
        return ([("redis-server", self.redis)]
                + [(f"emulator {i + 1}", p) for i, (p, _, _) in enumerate(self.instances)]
                + [("haproxy", self.haproxy)])

    def start(self):
        for tool in ("redis-server", "haproxy"):
            if shutil.which(tool) is None:
                sys.exit(f"run.py: --cluster needs {tool}, which is not installed; "
                         "scripts/deps.sh test installs redis-server and haproxy")
        self.start_redis()
        # The first instance alone: it writes its start state into the empty Redis and makes
        # the CA and server certificate in the shared certs dir; the others then load both.
        # One after the other, so each takes the next instance number from Redis (INCR):
        # instance k (connectionId >> 40 == k) is the k-th started, server ek in haproxy.cfg.
        for k in range(1, self.size + 1):
            self.instances.append(self.start_instance(k))
        self.start_haproxy()

    def start_redis(self):
        directory = self.work / "redis"
        directory.mkdir()
        self.redis_port = free_port()
        log_path = self.work / "redis.log"
        with open(log_path, "w") as log:
            self.redis = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "",
                 "--appendonly", "no", "--dir", str(directory), "--daemonize", "no"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.redis.poll() is not None:
                sys.exit(f"run.py: redis-server exited with {self.redis.returncode}:\n" + log_path.read_text()[-3000:])
            if time.monotonic() > deadline:
                sys.exit("run.py: redis-server did not answer PING within 15 s:\n" + log_path.read_text()[-3000:])
            time.sleep(0.05)

    def start_instance(self, k):
        directory = self.work / f"instance-{k}"
        directory.mkdir()
        ready, log_path = directory / "ready.json", self.work / f"emulator-{k}.log"
        # Two Apple-style listeners, as the single emulator has (one behind :443, one behind
        # :2197): SNI / :authority picks the environment; the ports are the instance's own.
        flags = ["--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                 "--sandbox-listen", "off", "--production-listen", "off",
                 "--channel-sandbox-listen", "127.0.0.1:0", "--channel-production-listen", "127.0.0.1:0",
                 "--admin-listen", "127.0.0.1:0", "--device-listen", "127.0.0.1:0",
                 "--redis", f"redis://127.0.0.1:{self.redis_port}/0"]
        command = emulator_command(self.binary, self.work, self.libs, self.key, flags, ready)
        process = launch_emulator(command, log_path)
        self.instances.append((process, None, log_path))  # stopped with the others if it fails now
        info = wait_ready(process, ready, log_path, f"emulator instance {k}")
        return self.instances.pop()[0], info, log_path

    def start_haproxy(self):
        lines = ["global", "  maxconn 4096", "defaults", "  mode tcp", "  timeout connect 2s",
                 "  timeout client 120s", "  timeout server 120s", "  retries 3", "  option redispatch"]
        # Each instance's two Apple-style listeners behind :443 and :2197, and its channel
        # listeners behind :2195 (sandbox) and :2196 (production).
        backends = [(port, lambda info, index=index: info["listen"][index]) for index, port in enumerate(PORTS)]
        backends += [(CHANNEL_PORTS[0], lambda info: info["channelSandbox"]),
                     (CHANNEL_PORTS[1], lambda info: info["channelProduction"])]
        for port, address in backends:
            lines += [f"frontend apple-{port}", f"  bind 127.0.0.1:{port}", f"  default_backend instances-{port}",
                      f"backend instances-{port}", "  balance roundrobin"]
            for k, (_, info, _) in enumerate(self.instances, start=1):
                lines.append(f"  server e{k} {address(info)} check inter 200ms fall 1 rise 1")
        config = self.work / "haproxy.cfg"
        config.write_text("\n".join(lines) + "\n")
        log_path = self.work / "haproxy.log"
        with open(log_path, "w") as log:
            self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=log,
                                            stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 15
        for port in PORTS + CHANNEL_PORTS:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    if self.haproxy.poll() is not None:
                        sys.exit(f"run.py: haproxy exited with {self.haproxy.returncode}:\n"
                                 + log_path.read_text()[-3000:])
                    if time.monotonic() > deadline:
                        sys.exit(f"run.py: haproxy did not listen on 127.0.0.1:{port} within 15 s")
                    time.sleep(0.05)

    def exited(self):
        return [f"{name} exited with {p.returncode} during the run" for name, p in self.processes
                if p is not None and p.poll() is not None]

    def stop(self):
        # The balancer first (no new connections), then the instances, then their store.
        for name, process in reversed(self.processes):
            stop(process, name)


class Admin:
    def __init__(self, address):
        self.base = f"http://{address}/api/v1"

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} {path}: {error.code} {error.read()[:300]!r}") from None

    def notifications(self, query):
        """GET /notifications?QUERY, once: with several instances too, a read shows every push
        answered before it through any of them (docs/several-instances.md, "What each
        operation promises")."""
        return self.call("GET", f"/notifications?{query}")["notifications"]

    def device(self, bundle, environment):
        return self.call("POST", "/devices", {"bundleId": bundle, "environment": environment})


def write_job(path, job):
    """The job as JSON (Python, node) and as a .properties file (Java)."""
    Path(path + ".json").write_text(json.dumps(job, indent=1))
    tokens = job["tokens"]
    properties = {k: v for k, v in job.items() if k != "tokens"}
    properties.update({"token.sandbox": tokens["sandbox"], "token.production": tokens["production"],
                       "token.unregistered": tokens["unregistered"],
                       "burst.tokens": ",".join(tokens["burst"])})
    Path(path + ".properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))


def prepare(admin, lib, burst, work, key):
    """Devices for one library, and its job files: the full plan, and the alert alone for the
    run without the CA."""
    sandbox = admin.device(lib.topic, "sandbox")
    production = admin.device(lib.topic, "production")
    gone = admin.device(lib.topic, "sandbox")
    uninstall = admin.call("DELETE", f"/devices/{gone['deviceId']}/apps/{lib.topic}")
    burst_tokens = [admin.device(lib.topic, "sandbox")["token"] for _ in range(burst)]
    job = {"lib": lib.name, "teamId": TEAM_ID, "keyId": KEY_ID, "keyPath": str(key), "topic": lib.topic,
           "timeoutSeconds": 30,
           "tokens": {"sandbox": sandbox["token"], "production": production["token"],
                      "unregistered": gone["token"], "burst": burst_tokens}}
    write_job(str(work / f"job-{lib.name}"), job)
    write_job(str(work / f"job-{lib.name}-untrusted"),
              {**job, "lib": f"{lib.name}-untrusted", "only": "alert", "timeoutSeconds": 10})
    return uninstall["unregisteredAt"]


# ---------------------------------------------------------------------------- checks

@dataclass
class Outcome:
    lib: Library
    version: str = ""
    cells: dict = field(default_factory=dict)      # column -> short text
    failures: list = field(default_factory=list)
    seconds: float = 0.0
    burst_seconds: float = None
    pushes: int = 0
    untrusted_error: str = ""
    instances: collections.Counter = field(default_factory=collections.Counter)  # cluster: records per instance

    @property
    def passed(self):
        return not self.failures


def short(line):
    if line is None:
        return "no result"
    if line.get("error"):
        return line["error"][:60]
    parts = [str(line["status"]) if line.get("status") is not None else "",
             line.get("reason") or ("" if line.get("status") is not None else "ok")]
    return " ".join(p for p in parts if p)


def check_line(outcome, line, status, reason, unregistered_at=None, carries_apns_id=True):
    """Does one library result say what Apple would: the status (where the library reports
    it), the reason, and for a 410 a timestamp in milliseconds? carries_apns_id=False: an
    answer without apns-id (channel management, broadcasts)."""
    lib, problems = outcome.lib, []
    if line is None:
        return ["no result printed"]
    if line.get("error"):
        return [f"library error: {line['error']}"]
    if lib.exposes_status and line.get("status") != status:
        problems.append(f"status {line.get('status')}, expected {status}")
    if line.get("reason") != reason:
        problems.append(f"reason {line.get('reason')!r}, expected {reason!r}")
    if unregistered_at is not None and not problems:
        ts = line.get("timestamp")
        if not isinstance(ts, int) or abs(ts - unregistered_at) > 5000:
            problems.append(f"timestamp {ts!r}, expected milliseconds near {unregistered_at}")
    if carries_apns_id and (lib.exposes_apns_id == "all" or (lib.exposes_apns_id == "success" and status == 200)):
        if not line.get("apnsId"):
            problems.append("no apns-id reported")
    return problems


def check_results(outcome, lines, burst, unregistered_at):
    by_n = {}
    for line in lines:
        if line.get("case") != "summary":
            by_n.setdefault(line["n"], []).append(line)
    for n, dupes in by_n.items():
        if len(dupes) > 1:
            outcome.failures.append(f"push n={n} reported {len(dupes)} times")
    for n, case in CASE_OF_N.items():
        status, reason, _ = PLAN[case]
        line = by_n.get(n, [None])[0]
        problems = check_line(outcome, line, status, reason, unregistered_at if case == "unregistered" else None)
        outcome.cells[case] = "ok" if not problems else short(line)
        outcome.failures += [f"{case}: {p}" for p in problems]
    ok, wrong = 0, {}
    for i in range(burst):
        line = by_n.get(BURST_FIRST_N + i, [None])[0]
        problems = check_line(outcome, line, 200, None)
        if problems:
            wrong[short(line)] = wrong.get(short(line), 0) + 1
        else:
            ok += 1
    cell = f"{ok}/{burst}"
    if outcome.burst_seconds is not None:
        cell += f" in {outcome.burst_seconds:.2f}s"
    outcome.cells["burst"] = cell
    for text, count in sorted(wrong.items(), key=lambda kv: -kv[1]):
        outcome.failures.append(f"burst: {count} x {text}")
    return by_n


def records_of(records, name):
    """The journal records of one provider run, by the n in their payload."""
    mine = {}
    for record in records:
        compat = (record.get("payload") or {}).get("compat") if isinstance(record.get("payload"), dict) else None
        if isinstance(compat, dict) and compat.get("lib") == name:
            mine.setdefault(compat.get("n"), []).append(record)
    return mine


def check_journal(outcome, admin, by_n, burst, cluster=False):
    """Every push the library sent is in the journal exactly once, with the answer the library
    reported, and every apns-id the library reported names that push's record. In cluster
    mode, which instance took each record (connectionId >> 40) is counted."""
    lib = outcome.lib
    expected_ns = list(CASE_OF_N) + [BURST_FIRST_N + i for i in range(burst)]
    records = admin.notifications(f"topic={lib.topic}&limit=100000")
    mine = records_of(records, lib.name)
    if cluster:
        outcome.instances.update(r["connectionId"] >> INSTANCE_SHIFT for rs in mine.values() for r in rs)
    found, problems = 0, {}  # problem text -> the pushes (n) it applies to

    def problem(n, text):
        problems.setdefault(text, []).append(n)

    for n in expected_ns:
        case = CASE_OF_N.get(n, "burst")
        status, reason, environment = PLAN.get(case, (200, None, "sandbox"))
        recs = mine.get(n, [])
        if len(recs) != 1:
            problem(n, f"{case}: {len(recs)} journal records, expected 1")
            continue
        found += 1
        record = recs[0]
        if (record["status"], record["reason"], record["environment"]) != (status, reason, environment):
            problem(n, f"{case}: journal says {record['status']} {record['reason']} {record['environment']}, "
                       f"expected {status} {reason} {environment}")
        if case == "background" and (record["pushType"], record["priority"]) != ("background", 5):
            problem(n, f"{case}: journal push type {record['pushType']} priority {record['priority']}, "
                       "expected background 5")
        line = (by_n.get(n) or [None])[0]
        if line and line.get("apnsId") and line["apnsId"] != record["apnsId"]:
            problem(n, f"{case}: the library reported another apns-id than the journal has")
    extra = sum(len(v) for k, v in mine.items() if k not in set(expected_ns))
    if extra:
        problem(None, f"{extra} journal records for pushes the plan does not have")
    # The filters agree with the full listing (status filter, apnsId filter).
    accepted = admin.call("GET", f"/notifications?topic={lib.topic}&status=200&limit=100000")["notifications"]
    if len(accepted) != 3 + burst:
        problem(None, f"filter status=200 lists {len(accepted)} records, expected {3 + burst}")
    ids = [line["apnsId"] for lines in by_n.values() for line in lines if line.get("apnsId")]
    if ids:
        hit = admin.call("GET", f"/notifications?apnsId={ids[0]}")["notifications"]
        if len(hit) != 1:
            problem(None, f"filter apnsId={ids[0]} lists {len(hit)} records, expected 1")
        try:
            admin.call("GET", f"/notifications/{ids[0]}")
        except RuntimeError as error:
            problem(None, f"GET /notifications/{{apnsId}} for a reported apns-id: {error}")
    journal_ids = {r["apnsId"] for rs in mine.values() for r in rs}
    checked_ids = sum(1 for i in ids if i in journal_ids)
    if checked_ids != len(ids):
        problem(None, f"{len(ids) - checked_ids} apns-ids the library reported are not in the journal")
    outcome.cells["journal"] = f"{found}/{len(expected_ns)}" + (
        f", ids {checked_ids}/{len(ids)}" if lib.exposes_apns_id != "none" else ", ids n/a")
    for text, ns in problems.items():
        ns = [n for n in ns if n is not None]
        where = "" if not ns else f" (n={ns[0]})" if len(ns) == 1 else f" ({len(ns)} pushes, n={ns[0]}…{ns[-1]})"
        outcome.failures.append(f"journal: {text}{where}")


def launch(lib, work, variant, trusted, timeout, launcher=None):
    """Run one provider (lib.launch, or launcher); returns (JSON lines it printed, its stderr,
    problems with the run itself)."""
    argv, extra_env = (launcher or lib.launch)(str(work / f"job-{variant}"), trusted)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")}
    env.update(extra_env)
    problems = []
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=die_with_parent)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as expired:
        stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        stderr = expired.stderr.decode() if isinstance(expired.stderr, bytes) else (expired.stderr or "")
        code = None
        problems.append(f"provider did not finish within {timeout} s (killed)")
    (work / f"{variant}.stdout").write_text(stdout)
    (work / f"{variant}.stderr").write_text(stderr)
    if code not in (0, None):
        problems.append(f"provider exited with {code} (see {work / (variant + '.stderr')})")
    lines = []
    for raw in stdout.splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            pass  # a library's own chatter on stdout
    return lines, stderr, problems


def check_untrusted(outcome, admin, work):
    """Without the CA setting the library must not get through: proves the documented setting
    is what makes it trust the emulator, and that the library verifies certificates."""
    lib = outcome.lib
    lines, stderr, problems = launch(lib, work, f"{lib.name}-untrusted", trusted=False, timeout=30)
    line = next((x for x in lines if x.get("n") == 0), None)
    records = admin.call("GET", f"/notifications?topic={lib.topic}&limit=100000")["notifications"]
    got_through = [r for r in records if isinstance(r.get("payload"), dict)
                   and (r["payload"].get("compat") or {}).get("lib") == f"{lib.name}-untrusted"]
    if problems:
        outcome.failures += [f"without the CA: {p}" for p in problems]
    if line is None:
        outcome.failures.append("without the CA: the provider printed no result")
        outcome.cells["no CA"] = "no result"
    elif not line.get("error") or got_through:
        outcome.failures.append(f"without the CA the push still got through ({short(line)}; "
                                f"{len(got_through)} journal records): the trust setting is not what decides")
        outcome.cells["no CA"] = "NOT refused"
    else:
        # The failure must be the certificate, not something else (aioapns only says
        # MaxAttemptsExceeded; the reason is in its log on stderr).
        why = next((text for text in [line["error"], *stderr.splitlines()] if "certif" in text.lower() or "PKIX" in text), None)
        if why is None:
            outcome.failures.append(f"without the CA the push failed, but not over the certificate: {line['error']}")
            outcome.cells["no CA"] = "other error"
        else:
            outcome.cells["no CA"] = "refused"
            outcome.untrusted_error = why.strip() if why == line["error"] else f"{line['error']} ({why.strip()})"


def run_library(lib, admin, journal, work, burst, key, timeout, cluster):
    """admin makes the devices, journal is read for the checks: the same emulator, or two
    instances of a cluster."""
    outcome = Outcome(lib)
    unregistered_at = prepare(admin, lib, burst, work, key)
    started = time.monotonic()
    lines, _, problems = launch(lib, work, lib.name, trusted=True, timeout=timeout)
    outcome.seconds = time.monotonic() - started
    outcome.failures += problems
    summary = next((line for line in lines if line.get("case") == "summary"), {})
    outcome.burst_seconds = summary.get("burstSeconds")
    outcome.version = summary.get("version", lib.name)
    outcome.pushes = sum(1 for line in lines if line.get("case") != "summary")
    by_n = check_results(outcome, lines, burst, unregistered_at)
    check_journal(outcome, journal, by_n, burst, cluster)
    check_untrusted(outcome, journal, work)
    return outcome


# ---------------------------------------------------------------------------- Live Activities

@dataclass
class LiveOutcome:
    lib: Library
    cells: dict = field(default_factory=dict)      # case or check -> short text
    failures: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self):
        return not self.failures


def prepare_live(admin, lib, work, key):
    """A device whose app declares DeliveryAttributes (its push-to-start token) and has
    activities it started itself with update tokens (Activity.request(pushType: .token)): one
    for the update, and one for the end, so that each push's effect shows on its own."""
    device = admin.device(lib.topic, "sandbox")
    base = f"/devices/{device['deviceId']}/apps/{lib.topic}"
    declared = admin.call("PUT", f"{base}/live-activities", {"types": [ATTRIBUTES_TYPE]})
    setup = {
        "attributes": {"orderId": f"{lib.slug}-1", "store": "compat"},
        "startState": {"status": "confirmed", "etaMinutes": 30},
        "updateState": {"status": "on the way", "etaMinutes": 12},
        "endState": {"status": "delivered", "etaMinutes": 0},
        "broadcastState": {"status": "storm delays", "etaMinutes": 45},
    }
    def app_activity(order):
        return admin.call("POST", f"{base}/activities", {
            "attributesType": ATTRIBUTES_TYPE, "attributes": {"orderId": order},
            "contentState": {"status": "ordered", "etaMinutes": 40}, "pushToken": True})
    updated = app_activity(f"{lib.slug}-app-1")
    ended = app_activity(f"{lib.slug}-app-2") if "end" in lib.live_cases else None
    job = {"lib": f"{lib.name}-live", "teamId": TEAM_ID, "keyId": KEY_ID, "keyPath": str(key),
           "topic": lib.topic, "timeoutSeconds": 30, "attributesType": ATTRIBUTES_TYPE,
           "pushToStartToken": declared["pushToStartTokens"][ATTRIBUTES_TYPE],
           "updateToken": updated["pushToken"], "endToken": ended and ended["pushToken"], **setup}
    Path(work / f"job-{lib.name}-live.json").write_text(json.dumps(job, indent=1))
    return device["deviceId"], {"update": updated["activityId"], "end": ended and ended["activityId"]}, job


def check_live_journal(outcome, admin, lib, by_case, job):
    """Each device push once in the journal, with the answer the library reported, the
    liveactivity push type and topic, and the device's outcome."""
    mine = {}
    for record in admin.call("GET", "/notifications?pushType=liveactivity&limit=100000")["notifications"]:
        compat = (record.get("payload") or {}).get("compat") if isinstance(record.get("payload"), dict) else None
        if isinstance(compat, dict) and compat.get("lib") == job["lib"]:
            mine.setdefault(compat.get("case"), []).append(record)
    for case in lib.live_cases:
        status, reason, wanted = LIVE_PLAN[case]
        if wanted is None:
            continue
        recs = mine.get(case, [])
        if len(recs) != 1:
            outcome.failures.append(f"journal: {case}: {len(recs)} records, expected 1")
            continue
        r = recs[0]
        topic = lib.topic if case == "plain-topic" else f"{lib.topic}.push-type.liveactivity"
        got = (r["status"], r["reason"], r["pushType"], r["topic"], r.get("outcome"))
        if got != (status, reason, "liveactivity", topic, wanted):
            outcome.failures.append(f"journal: {case}: {got}, expected {(status, reason, 'liveactivity', topic, wanted)}"
                                    f" ({r.get('explanation')})")
        line = (by_case.get(case) or [{}])[0]
        if line.get("apnsId") and line["apnsId"].upper() != r["apnsId"].upper():
            outcome.failures.append(f"journal: {case}: the library reported another apns-id than the journal has")
        if case == "start-readme" and "attributes-type is missing" not in (r.get("explanation") or ""):
            outcome.failures.append(f"journal: start-readme: explanation {r.get('explanation')!r}, "
                                    "expected the missing attributes-type")


def check_live_device(outcome, admin, lib, device_id, activity_ids, job, channel, broadcast_record):
    """What the pushes did on the device: the app's activities updated and ended, one activity
    started by push per accepted start, with the start's attributes and content (the
    broadcast's content for the one on the channel, which the broadcast's record names)."""
    problems = []
    activities = admin.call("GET", f"/devices/{device_id}/activities")["activities"]
    # (state, content, updates counted, a dismissal date?): an end is not counted as an update,
    # and its dismissal-date (an hour ahead) keeps the ended activity on the Lock Screen.
    for case, want in (("update", ("active", job["updateState"], 1, False)),
                       ("end", ("ended", job["endState"], 0, True))):
        if case not in lib.live_cases:
            continue
        mine = next((a for a in activities if a["activityId"] == activity_ids[case]), None)
        got = mine and (mine["state"], mine["contentState"], mine["updates"], mine["dismissalDate"] is not None)
        if got != want:
            problems.append(f"the activity the {case} push went to is (state, content, updates, dismissal date) {got}, "
                            f"expected {want}")
    started = [a for a in activities if a.get("startedBy") == "push"]
    starts = [c for c in lib.live_cases if c in ("start", "start-channel")]
    if len(started) != len(starts):
        problems.append(f"{len(started)} activities started by push, expected {len(starts)}"
                        + (" (the start-readme push must not start one)" if "start-readme" in lib.live_cases else ""))
    for a in started:
        # The activity on the channel shows what the broadcast sent after its start.
        content = job["broadcastState"] if "start-channel" in starts else job["startState"]
        if (a["attributesType"], a["attributes"], a["contentState"]) != (ATTRIBUTES_TYPE, job["attributes"], content):
            problems.append(f"activity started by push has {a['attributesType']} {a['attributes']} {a['contentState']}, "
                            f"expected {ATTRIBUTES_TYPE} {job['attributes']} {content}")
        if "start-channel" in starts and a.get("channel") != channel:
            problems.append(f"activity started by push is on channel {a.get('channel')!r}, expected {channel!r}")
    if "start-channel" in starts and broadcast_record is not None and len(started) == 1:
        deliveries = (broadcast_record.get("broadcast") or {}).get("deliveries") or []
        named = [(d.get("deviceId"), d.get("activityId")) for d in deliveries]
        if named != [(device_id, started[0]["activityId"])]:
            problems.append(f"the broadcast's deliveries name (device, activity) {named}, "
                            f"expected [{(device_id, started[0]['activityId'])}]")
    outcome.cells["device"] = "ok" if not problems else "wrong"
    outcome.failures += [f"device: {p}" for p in problems]


def check_live_channels(outcome, admin, lib, by_case, job):
    """The channel requests' answers and what the emulator kept: one channel, deleted, that took
    the one broadcast sent while it was live, which reached the one subscribed activity. Returns
    (channel id, the broadcast's journal record or None)."""
    problems = []

    def line(case):
        return (by_case.get(case) or [{}])[0]

    channel = line("channel-create").get("channelId")
    if not channel:
        problems.append("channel-create: no apns-channel-id")
    if line("channel-read").get("body") != {"message-storage-policy": 1, "push-type": "LiveActivity"}:
        problems.append(f"channel-read: body {line('channel-read').get('body')!r}")
    if channel not in ((line("channel-list").get("body") or {}).get("channels") or []):
        problems.append(f"channel-list: {channel} not in {line('channel-list').get('body')!r}")
    sent = line("broadcast")
    if not sent.get("requestId") or sent.get("requestId") != sent.get("sentRequestId"):
        problems.append(f"broadcast: apns-request-id {sent.get('requestId')!r}, expected the sent {sent.get('sentRequestId')!r}")
    kept = admin.call("GET", f"/channels?bundleId={lib.topic}")["channels"]
    if len(kept) != 1 or kept[0]["id"] != channel:
        problems.append(f"GET /api/v1/channels lists {[c['id'] for c in kept]}, expected [{channel}]")
    else:
        # Deleting the channel does not dismiss the activity the start-channel push made, so it
        # still counts as the channel's one subscriber.
        c = kept[0]
        got = (c["live"], c["deletedAt"] is not None, c["broadcasts"], c["messageStoragePolicy"], c.get("subscribers"))
        if got != (False, True, 1, 1, 1):
            problems.append(f"channel (live, deleted, broadcasts, policy, subscribers) {got}, "
                            "expected (False, True, 1, 1, 1)")
    # The broadcast's own journal record, under the request id node sent: it reached the one
    # activity the start-channel push subscribed, which was on a connected (virtual) device.
    delivery_problems = []
    record = None
    if sent.get("sentRequestId"):
        try:
            record = admin.call("GET", f"/notifications/{sent['sentRequestId']}")
        except RuntimeError as error:
            delivery_problems.append(f"broadcast journal record: {error}")
    if record is not None:
        b = record.get("broadcast") or {}
        got = (record.get("outcome"), b.get("channel"), b.get("subscribers"), b.get("reached"),
               b.get("outcomes"), b.get("deliveriesOmitted"))
        want = ("delivered", channel, 1, 1, {"delivered": 1}, 0)
        if got != want:
            delivery_problems.append(f"broadcast journal record (outcome, channel, subscribers, reached, outcomes, "
                                     f"deliveriesOmitted) {got}, expected {want}")
        deliveries = b.get("deliveries") or []
        if len(deliveries) != 1 or (deliveries[0].get("outcome"), deliveries[0].get("fromStore")) != ("delivered", False):
            delivery_problems.append(f"broadcast deliveries {deliveries!r}, expected one delivered, not from the store")
    elif not delivery_problems:
        delivery_problems.append("broadcast: no apns-request-id sent, so no journal record to check")
    outcome.cells["delivery"] = "1 of 1" if not delivery_problems else "wrong"
    problems += delivery_problems
    outcome.cells["channels"] = "ok" if not problems else "wrong"
    outcome.failures += [f"channels: {p}" for p in problems]
    return channel, record


def run_live(lib, admin, work, key, timeout):
    """The library's Live Activity (and, for node, broadcast channel) cases against one emulator."""
    outcome = LiveOutcome(lib)
    device_id, activity_ids, job = prepare_live(admin, lib, work, key)
    started = time.monotonic()
    lines, _, problems = launch(lib, work, f"{lib.name}-live", trusted=True, timeout=timeout, launcher=lib.live)
    outcome.seconds = time.monotonic() - started
    outcome.failures += problems
    by_case = {}
    for line in lines:
        by_case.setdefault(line.get("case"), []).append(line)
    for case in lib.live_cases:
        status, reason, journaled = LIVE_PLAN[case]
        found = by_case.get(case, [None])
        issues = check_line(outcome, found[0], status, reason, carries_apns_id=journaled is not None) + (
            [f"reported {len(found)} times"] if len(found) > 1 else [])
        outcome.cells[case] = "ok" if not issues else short(found[0])
        outcome.failures += [f"{case}: {p}" for p in issues]
    check_live_journal(outcome, admin, lib, by_case, job)
    channel, record = None, None
    if "channel-create" in lib.live_cases:
        channel, record = check_live_channels(outcome, admin, lib, by_case, job)
    check_live_device(outcome, admin, lib, device_id, activity_ids, job, channel, record)
    return outcome


def print_live_table(outcomes):
    cases = [c for c in LIVE_PLAN if any(c in o.lib.live_cases for o in outcomes)]
    checks = ["device"] + (["channels", "delivery"] if any("channel-create" in o.lib.live_cases for o in outcomes) else [])
    rows = [["library"] + cases + checks + ["time", "result"]]
    for o in outcomes:
        rows.append([o.lib.name] + [o.cells.get(c, "-") for c in cases + checks]
                    + [f"{o.seconds:.1f}s", "PASS" if o.passed else "FAIL"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


# ---------------------------------------------------------------------------- output

COLUMNS = [("library", None), ("alert", "alert"), ("background", "background"),
           ("wrong env", "wrong-environment"), ("unregistered", "unregistered"),
           ("production", "production"), ("burst", "burst"), ("journal", "journal"),
           ("no CA", "no CA")]


def per_instance(counter, size):
    return " ".join(f"e{k}:{counter.get(k, 0)}" for k in range(1, size + 1))


def print_table(outcomes, cluster_size=0):
    columns = COLUMNS + ([("records per instance", "instances")] if cluster_size else [])
    rows = [[h for h, _ in columns] + ["pushes", "time", "result"]]
    for o in outcomes:
        if cluster_size:
            o.cells["instances"] = per_instance(o.instances, cluster_size)
        rows.append([o.version or o.lib.name] + [o.cells.get(key, "-") for _, key in columns[1:]]
                    + [str(o.pushes), f"{o.seconds:.1f}s", "PASS" if o.passed else "FAIL"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the apns-emulator binary")
    parser.add_argument("--work", default=str(HERE.parent.parent / ".build" / "compat-run"),
                        help="scratch directory, emptied first; logs stay there")
    parser.add_argument("--python", default=sys.executable, help="python of the venv with the libraries")
    parser.add_argument("--libs", default="", help="comma-separated subset of library names")
    parser.add_argument("--burst", type=int, default=500, help="pushes in each library's burst")
    parser.add_argument("--timeout", type=int, default=60, help="seconds each provider may take")
    parser.add_argument("--cluster", type=int, default=0, metavar="N",
                        help="N >= 2: N emulator instances sharing Redis behind HAProxy on :443 and :2197 "
                             "(default 0: one emulator)")
    args = parser.parse_args()
    if args.cluster == 1 or args.cluster < 0:
        parser.error("--cluster N needs N >= 2 (0 = one emulator)")
    suite_started = time.monotonic()

    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ca = work / "certs" / "ca.pem"
    libs = libraries(args.python, work, ca)
    if args.libs:
        wanted = args.libs.split(",")
        unknown = set(wanted) - {lib.name for lib in libs}
        if unknown:
            sys.exit(f"run.py: unknown libraries {sorted(unknown)}; known: {[lib.name for lib in libs]}")
        libs = [lib for lib in libs if lib.name in wanted]

    enter_private_network(work)
    key = make_key(work)
    emulator = cluster = None
    suite_failures = []  # cluster mode: what is wrong with the run as a whole
    try:
        if args.cluster:
            cluster = Cluster(args.cluster, args.bin, work, libs, key)
            cluster.start()
            # Devices are made through the first instance, the journal is read from the last.
            admin, journal = Admin(cluster.instances[0][1]["admin"]), Admin(cluster.instances[-1][1]["admin"])
            print(f"cluster: {args.cluster} instances of {args.bin} sharing redis://127.0.0.1:{cluster.redis_port}/0, "
                  f"behind haproxy (round-robin, TCP) on 127.0.0.1:443 and :2197")
            for k, (_, info, _) in enumerate(cluster.instances, start=1):
                role = ("; devices made here" if k == 1 else "") + \
                    ("; journal read here" if k == len(cluster.instances) else "")
                print(f"  e{k}: --listen {', '.join(info['listen'])} (behind :443, :2197), "
                      f"admin {info['admin']}, devices {info['device']}{role}")
        else:
            emulator, info, command = start_emulator(args.bin, work, libs, key)
            admin = journal = Admin(info["admin"])
            print(f"emulator: {args.bin} (--listen) on 127.0.0.1:443 and :2197, admin {info['admin']}")
        print(f"hosts: {', '.join(APPLE_HOSTS)} -> 127.0.0.1 (this namespace only); CA {ca}")
        if any(lib.name == "jdk-httpclient" for lib in libs):
            subprocess.run(["javac", "-d", str(work / "java"), str(HERE / "java" / "ApnsProvider.java")],
                           check=True, timeout=120)
            subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "apns-emulator-test-ca",
                            "-file", str(ca), "-keystore", str(work / "truststore.p12"),
                            "-storetype", "PKCS12", "-storepass", "changeit"],
                           check=True, capture_output=True, timeout=60)
        outcomes = []
        for lib in libs:
            print(f"running {lib.name} …", flush=True)
            outcomes.append(run_library(lib, admin, journal, work, args.burst, key, args.timeout, cluster is not None))
        # With --cluster the activities, channels and broadcasts go through HAProxy too, so
        # they are made, updated and read through different instances sharing one state.
        live_outcomes = []
        for lib in (lib for lib in libs if lib.live):
            print(f"running {lib.name}: Live Activities{' and broadcast channels' if 'broadcast' in lib.live_cases else ''} …",
                  flush=True)
            live_outcomes.append(run_live(lib, admin, work, key, args.timeout))
        if emulator is not None and emulator.poll() is not None:
            for o in outcomes + live_outcomes:
                o.failures.append(f"the emulator exited with {emulator.returncode} during the run")
        if cluster is not None:
            suite_failures += cluster.exited()
    finally:
        stop(emulator, "the emulator")
        if cluster is not None:
            cluster.stop()

    print()
    print_table(outcomes, args.cluster)
    if cluster is not None:
        total = collections.Counter()
        for o in outcomes:
            total.update(o.instances)
        print(f"\njournal records per instance (connectionId >> {INSTANCE_SHIFT}, read from e{args.cluster}): "
              f"{per_instance(total, args.cluster)}")
        strangers = sorted(k for k in total if not 1 <= k <= args.cluster)
        if strangers:
            suite_failures.append(f"journal records from instances {strangers}, which this run did not start")
        if len([k for k in total if total[k]]) < 2:
            suite_failures.append(f"the journal's records came through {len([k for k in total if total[k]])} instance(s), expected at least 2")
    if live_outcomes:
        print("\nLive Activities and broadcast channels (sandbox):")
        print_live_table(live_outcomes)
    refused = [o for o in outcomes if o.untrusted_error]
    if refused:
        print("\nwithout the CA setting, each library refused the emulator's certificate:")
        for o in refused:
            print(f"  {o.lib.name}: {o.untrusted_error[:150]}")
    failed = [o for o in outcomes if not o.passed]
    live_failed = [o for o in live_outcomes if not o.passed]
    for o in failed + live_failed:
        print(f"\n{o.lib.name}{' (Live Activities)' if o in live_failed else ''} FAILED:")
        for text in o.failures[:25]:
            print(f"  - {text}")
        if len(o.failures) > 25:
            print(f"  - … and {len(o.failures) - 25} more")
        logs = f"{work / 'emulator.log'}" if not args.cluster else f"{work}/emulator-*.log, haproxy.log, redis.log"
        name = o.lib.name + ("-live" if o in live_failed else "")
        print(f"  logs: {work / (name + '.stdout')}, {work / (name + '.stderr')}, {logs}")
    if suite_failures:
        print("\ncluster FAILED:")
        for text in suite_failures:
            print(f"  - {text}")
        print(f"  logs: {work}/emulator-*.log, haproxy.log, redis.log")
    total = sum(o.pushes for o in outcomes)
    print(f"\n{len(outcomes) - len(failed)}/{len(outcomes)} libraries passed"
          + (f" through {args.cluster} instances" if args.cluster else "")
          + (f", {len(live_outcomes) - len(live_failed)}/{len(live_outcomes)} with Live Activities" if live_outcomes else "")
          + f"; {total} pushes; {time.monotonic() - suite_started:.1f} s")
    return 1 if failed or live_failed or suite_failures else 0


if __name__ == "__main__":
    sys.exit(main())
