#!/usr/bin/env python3
"""The measuring half of scripts/bench-broadcast (which starts the emulator, makes the channel
and the virtual devices, and runs this): opens the device sockets, declares a Live Activity
type and starts one activity subscribed to the channel on every device, reads the emulator's
RSS around that, then sends the broadcasts over one HTTP/2 connection and times each.

Times are the kernel's: every socket is read with SO_TIMESTAMPNS, so the moment a device's
`activity` frame or the provider's 200 arrived does not depend on how fast this script gets
to it (the TLS of the provider connection runs over a MemoryBIO for that reason). The send
time is taken just before the request's bytes are written. Standard library only.
"""
import argparse
import http.client
import json
import os
import selectors
import socket
import ssl
import struct
import sys
import threading
import time
import uuid

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
ANC = socket.CMSG_SPACE(16)


def kernel_ns(ancdata):
    """The receive time of a recvmsg, from its SCM_TIMESTAMPNS (CLOCK_REALTIME), else now."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            return sec * 1_000_000_000 + nsec
    return time.time_ns()


def stamped(sock):
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    return sock


def host_port(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def cpu_ms(pid):
    """The process's user + system CPU time so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS for the emulator")


class Devices:
    """The device sockets, read by one thread: it answers what needs an answer (acks) and
    keeps, per device, the kernel time of each `activity` frame by (change, seq)."""

    def __init__(self, address, count, bundle, deadline):
        self.sel = selectors.DefaultSelector()
        self.count = count
        self.welcomed = set()
        self.errors = []
        self.seen = [dict() for _ in range(count)]  # (change, seq) -> first kernel ns
        self.lock = threading.Lock()
        self.stop = False
        self.buffers = [b""] * count
        self.socks = []
        host, port = host_port(address)
        for i in range(count):
            s = stamped(socket.create_connection((host, port), timeout=10))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = {"type": "hello", "version": 1, "deviceId": f"bench-b-{i + 1}",
                     "apps": [{"bundleId": bundle, "environment": "sandbox"}]}
            s.sendall(json.dumps(hello).encode() + b"\n")
            s.setblocking(False)
            self.socks.append(s)
            self.sel.register(s, selectors.EVENT_READ, i)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        while len(self.welcomed) < count and time.monotonic() < deadline and not self.errors:
            time.sleep(0.05)
        if len(self.welcomed) < count:
            raise SystemExit(f"FAIL: {len(self.welcomed)} of {count} device sockets welcomed; errors: {self.errors[:3]}")

    def run(self):
        while not self.stop:
            for key, _ in self.sel.select(0.2):
                i = key.data
                try:
                    data, anc, _, _ = key.fileobj.recvmsg(1 << 16, ANC)
                except BlockingIOError:
                    continue
                except OSError as e:
                    self.errors.append(f"device {i + 1}: {e}")
                    self.sel.unregister(key.fileobj)
                    continue
                if not data:
                    self.errors.append(f"device {i + 1}: closed by the emulator")
                    self.sel.unregister(key.fileobj)
                    continue
                at = kernel_ns(anc)
                lines = (self.buffers[i] + data).split(b"\n")
                self.buffers[i] = lines.pop()
                for line in lines:
                    if line:
                        self.take(i, json.loads(line), at)

    def take(self, i, frame, at):
        kind = frame.get("type")
        if kind == "welcome":
            with self.lock:
                self.welcomed.add(i)
        elif kind == "notification":
            self.socks[i].send(json.dumps({"type": "ack", "id": frame["id"]}).encode() + b"\n")
        elif kind == "error":
            self.errors.append(f"device {i + 1}: {frame}")
        elif kind == "activity":
            seq = ((frame.get("activity") or {}).get("contentState") or {}).get("seq")
            with self.lock:
                self.seen[i].setdefault((frame.get("change"), seq), at)

    def times(self, event, seq):
        with self.lock:
            return [s.get((event, seq)) for s in self.seen]

    def close(self):
        self.stop = True
        self.thread.join(2)
        for s in self.socks:
            s.close()


class Admin:
    """Keep-alive HTTP/1.1 to the admin API, one connection per thread."""

    def __init__(self, address):
        self.host, self.port = host_port(address)
        self.local = threading.local()

    def call(self, method, path, body=None):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
        r = conn.getresponse()
        text = r.read()
        if r.status >= 300:
            raise SystemExit(f"FAIL: {method} {path}: {r.status} {text[:300]!r}")
        return json.loads(text) if text else None


def run_calls(admin, ids, call, threads):
    """call(admin, device_id) for every id on `threads` threads; returns the finish time of
    each call (monotonic seconds), in order of finishing."""
    done, lock, errors = [], threading.Lock(), []
    parts = [ids[k::threads] for k in range(threads)]

    def work(part):
        try:
            for d in part:
                call(admin, d)
                t = time.monotonic()
                with lock:
                    done.append(t)
        except BaseException as e:  # SystemExit from Admin.call included
            errors.append(str(e))

    ts = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit(errors[0])
    return sorted(done)


def rate_summary(start, done):
    """Calls per second overall, in the first and in the last 1,000 calls."""
    n = len(done)
    total = n / (done[-1] - start)
    k = min(1000, n // 2)
    first = k / (done[k - 1] - start)
    last = k / (done[-1] - done[-k - 1])
    return {"calls": n, "seconds": round(done[-1] - start, 2), "perSecond": round(total), "first1000": round(first),
            "last1000": round(last)}


# --- a minimal HTTP/2 client: one connection, one request at a time -----------------------

def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(v), 7) + v


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class Provider:
    def __init__(self, address, ca, deadline):
        host, port = host_port(address)
        ctx = ssl.create_default_context(cafile=ca)
        ctx.check_hostname = False
        ctx.set_alpn_protocols(["h2"])
        self.sock = stamped(socket.create_connection((host, port), timeout=10))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_side=False)
        self.deadline = deadline
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                self.fill()
        self.flush()
        if self.tls.selected_alpn_protocol() != "h2":
            raise SystemExit("FAIL: the provider listener did not select h2")
        self.plain = b""
        self.stream = 1
        self.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(8, 0, 0, struct.pack(">I", 1 << 24)))

    def flush(self):
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def fill(self):
        """Reads what the kernel has; returns its receive time."""
        self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
        data, anc, _, _ = self.sock.recvmsg(1 << 16, ANC)
        if not data:
            raise SystemExit("FAIL: the provider connection was closed")
        self.incoming.write(data)
        return kernel_ns(anc)

    def send(self, data):
        self.tls.write(data)
        self.flush()

    def next_frame(self):
        """(type, flags, stream, payload, kernel receive time of its last bytes)."""
        at = None
        while True:
            try:
                self.plain += self.tls.read(1 << 16)
            except ssl.SSLWantReadError:
                pass
            if len(self.plain) >= 9:
                length = int.from_bytes(self.plain[:3], "big")
                if len(self.plain) >= 9 + length:
                    head, self.plain = self.plain[:9 + length], self.plain[9 + length:]
                    kind, flags = head[3], head[4]
                    stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
                    return kind, flags, stream, head[9:], at or time.time_ns()
            if time.monotonic() > self.deadline:
                raise SystemExit("FAIL: no answer from the provider endpoint in time")
            at = self.fill()

    def broadcast(self, headers, body):
        """Sends one POST; returns (status, send ns, kernel ns of the answer's HEADERS)."""
        stream, self.stream = self.stream, self.stream + 2
        block = b"".join(hpack_literal(k, v) for k, v in headers)
        data = frame(1, 0x4, stream, block) + frame(0, 0x1, stream, body)
        sent = time.time_ns()
        self.send(data)
        status = None
        while True:
            kind, flags, sid, payload, at = self.next_frame()
            if kind == 4 and not flags & 1:      # SETTINGS: ack it
                self.send(frame(4, 1, 0))
            elif kind == 6 and not flags & 1:    # PING
                self.send(frame(6, 1, 0, payload))
            elif kind == 7:
                raise SystemExit(f"FAIL: GOAWAY {payload[8:]!r}")
            elif sid == stream and kind == 1:
                # nghttp2 encodes ":status: 200" as the static table's entry 8 (0x88); anything
                # else is looked up in the journal by the caller.
                status = 200 if payload[:1] == b"\x88" else 0
                answered = at
                if flags & 1:
                    return status, sent, answered
            elif sid == stream and kind == 0 and flags & 1 and status is not None:
                return status, sent, answered
            elif sid == stream and kind == 3:
                raise SystemExit("FAIL: the broadcast stream was reset")


def main():
    p = argparse.ArgumentParser()
    for name in ("admin", "provider", "device", "ca", "jwt", "bundle", "channel"):
        p.add_argument("--" + name, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--virtual-prefix", required=True)
    p.add_argument("--virtual", type=int, required=True)
    p.add_argument("--sockets", type=int, required=True)
    p.add_argument("--broadcasts", type=int, default=5)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--timeout", type=float, default=60, help="seconds for each wait")
    a = p.parse_args()
    admin = Admin(a.admin)
    out = {}

    t0 = time.monotonic()
    devices = Devices(a.device, a.sockets, a.bundle, t0 + a.timeout)
    out["socketsConnectSeconds"] = round(time.monotonic() - t0, 2)
    ids = [f"{a.virtual_prefix}{i + 1}" for i in range(a.virtual)] + [f"bench-b-{i + 1}" for i in range(a.sockets)]
    time.sleep(0.5)
    rss0 = rss_kb(a.pid)

    def declare(admin, d):
        admin.call("PUT", f"/api/v1/devices/{d}/apps/{a.bundle}/live-activities", {"types": ["DeliveryAttributes"]})

    def start(admin, d):
        admin.call("POST", f"/api/v1/devices/{d}/apps/{a.bundle}/activities",
                   {"attributesType": "DeliveryAttributes", "attributes": {"orderId": d},
                    "contentState": {"seq": 0, "status": "preparing"}, "channel": a.channel})

    t = time.monotonic()
    out["declare"] = rate_summary(t, run_calls(admin, ids, declare, a.threads))
    time.sleep(0.5)
    rss1 = rss_kb(a.pid)
    t = time.monotonic()
    out["start"] = rate_summary(t, run_calls(admin, ids, start, a.threads))
    # Every socket device is told its activity started.
    while None in devices.times("started", 0) and time.monotonic() < t + a.timeout:
        time.sleep(0.05)
    missing = devices.times("started", 0).count(None)
    if missing:
        raise SystemExit(f"FAIL: {missing} device sockets were not told their activity started")
    time.sleep(0.5)
    rss2 = rss_kb(a.pid)
    n = len(ids)
    out["rssKB"] = [rss0, rss1, rss2]
    out["bytesPerDeclaration"] = round((rss1 - rss0) * 1024 / n)
    out["bytesPerSubscribedActivity"] = round((rss2 - rss1) * 1024 / n)
    channels = admin.call("GET", "/api/v1/channels")
    subscribers = next((c.get("subscribers") for c in channels.get("channels", []) if c.get("channelId", c.get("id")) == a.channel), None)
    out["subscribers"] = subscribers
    if subscribers != n:
        raise SystemExit(f"FAIL: the channel has {subscribers} subscribers, not {n}")

    provider = Provider(a.provider, a.ca, time.monotonic() + a.timeout)
    runs = []
    base = int(time.time())
    for k in range(1, a.broadcasts + 1):
        request_id = str(uuid.uuid4())
        body = json.dumps({"aps": {"event": "update", "timestamp": base + k,
                                   "content-state": {"seq": k, "status": "on the way"}}}).encode()
        headers = [(":method", "POST"), (":scheme", "https"), (":path", f"/4/broadcasts/apps/{a.bundle}"),
                   (":authority", a.provider), ("authorization", f"bearer {a.jwt}"), ("apns-channel-id", a.channel),
                   ("apns-push-type", "LiveActivity"), ("apns-priority", "10"), ("apns-expiration", "0"),
                   ("apns-request-id", request_id), ("content-type", "application/json")]
        provider.deadline = time.monotonic() + a.timeout
        cpu_before = cpu_ms(a.pid)
        status, sent, answered = provider.broadcast(headers, body)
        record = admin.call("GET", f"/api/v1/notifications/{request_id}")
        if status != 200:
            raise SystemExit(f"FAIL: broadcast {k} was not answered 200: {json.dumps(record)[:400]}")
        wait_until = time.monotonic() + a.timeout
        while None in devices.times("updated", k) and time.monotonic() < wait_until:
            time.sleep(0.02)
        got = devices.times("updated", k)
        cpu = cpu_ms(a.pid) - cpu_before
        if None in got:
            raise SystemExit(f"FAIL: broadcast {k}: {got.count(None)} device sockets got no activity update")
        reach = record.get("broadcast") or {}
        delivered = (reach.get("outcomes") or {}).get("delivered")
        if reach.get("reached") != n or delivered != n:
            raise SystemExit(f"FAIL: broadcast {k}: reached {reach.get('reached')}, delivered {delivered}, of {n}")
        ms = lambda ns: round(ns / 1e6, 2)
        runs.append({"answerMs": ms(answered - sent), "lastFrameMs": ms(max(got) - sent), "firstFrameMs": ms(min(got) - sent),
                     "after200Ms": ms(max(got) - answered), "emulatorCpuMs": round(cpu), "reached": reach.get("reached"), "outcomes": reach.get("outcomes")})
        time.sleep(0.3)  # under the channel's broadcast rate (--channel-broadcast-rate, 10/s)
    out["broadcasts"] = runs
    out["socketErrors"] = devices.errors[:5]
    devices.close()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
