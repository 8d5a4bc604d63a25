#!/usr/bin/env python3
"""Self-test of the example backend, standard library only: python3 examples/backend/test_backend.py

Starts backend.py (both variants) on a free loopback port and drives its endpoints as the
emulator's hooks and notify.py would. NotifyThroughEmulator also runs notify.py (aioapns)
against a real emulator; it is skipped unless both are found:
  APNS_EMULATOR_BIN  the apns-emulator binary (default: the repo's debug build, `swift build --show-bin-path`)
  NOTIFY_PYTHON      a python with aioapns      (default: .build/compat-venv/bin/python)
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PHONE = "phone-1"
APP = "com.example.app"
T1 = "aa" * 32
T2 = "bb" * 32


def start(argv, line_prefix, timeout=10, **kwargs):
    """Start a process and wait for the stdout line starting with line_prefix: (process, line)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kwargs)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()  # the backend prints its line at once; EOF if it died
        if line.startswith(line_prefix):
            return process, line.strip()
        if not line and process.poll() is not None:
            break
    process.kill()
    process.wait()
    raise RuntimeError(f"{argv[:2]} did not print {line_prefix!r}")


def stop(process):
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout:
        process.stdout.close()


def request(method, url, body=None, raw=None, headers=None):
    """(status, parsed JSON body, response headers); HTTP errors are results, not exceptions."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    outgoing = urllib.request.Request(url, data=data, method=method,
                                      headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(outgoing, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null"), response.headers
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read() or b"null"), error.headers


class BackendCase(unittest.TestCase):
    buggy = False

    def setUp(self):
        argv = [sys.executable, str(HERE / "backend.py"), "--port", "0"] + (["--buggy"] if self.buggy else [])
        self.process, line = start(argv, "listening on ", stderr=subprocess.DEVNULL)
        self.addCleanup(stop, self.process)
        self.base = line.removeprefix("listening on ")

    def call(self, method, path, body=None, **kwargs):
        return request(method, self.base + path, body, **kwargs)[:2]

    def ok(self, method, path, body=None, **kwargs):
        status, answer = self.call(method, path, body, **kwargs)
        self.assertIn(status, (200, 201), answer)
        return answer

    def register(self, token, user="", device=PHONE, environment="sandbox"):
        return self.ok("POST", "/devices/register", {"token": token, "deviceId": device, "bundleId": APP,
                                                     "environment": environment, "userId": user})

    def bind(self, token, user, device=PHONE):
        return self.ok("POST", "/sessions/bind", {"token": token, "userId": user, "deviceId": device,
                                                  "bundleId": APP, "environment": "sandbox"})

    def unbind(self, token, user):
        return self.ok("POST", "/sessions/unbind", {"token": token, "userId": user})

    def tokens(self, user):
        return [t["token"] for t in self.ok("GET", f"/users/{user}/tokens")["tokens"]]

    def a_logs_out_b_logs_in(self):
        self.register(T1)
        self.bind(T1, "alice")
        self.unbind(T1, "alice")
        self.bind(T1, "bob")


class Shared:
    """Behaviour both variants have."""

    def test_tokens_carry_what_the_provider_needs(self):
        self.register(T1, user="alice", environment="production")
        self.assertEqual(self.ok("GET", "/users/alice/tokens")["tokens"],
                         [{"token": T1, "environment": "production", "bundleId": APP, "deviceId": PHONE}])

    def test_a_new_token_for_the_device_replaces_the_old_and_keeps_the_user(self):
        self.register(T1)
        self.bind(T1, "alice")
        answer = self.register(T2)  # reinstall or rotation: same device and app, new token
        self.assertEqual(answer["replaced"], [T1])
        self.assertEqual(self.tokens("alice"), [T2])
        self.assertEqual([t["token"] for t in self.ok("GET", "/state")["tokens"]], [T2])

    def test_an_invalid_token_is_removed_everywhere(self):
        self.register(T1, user="alice")
        self.register(T2, user="alice", device="phone-2")
        self.ok("POST", f"/tokens/{T1}/invalid")
        self.assertEqual(self.tokens("alice"), [T2])
        state = self.ok("GET", "/state")
        self.assertEqual(state["invalidated"], [T1])
        self.assertNotIn(T1, [t["token"] for t in state["tokens"]])

    def test_message_fetch_is_recorded(self):
        message = self.ok("POST", "/messages", {"userId": "alice", "body": "hello"})
        fetched = self.ok("GET", f"/messages/{message['id']}", headers={"X-User-Id": "alice"})
        self.assertEqual(fetched, {"id": message["id"], "userId": "alice", "body": "hello"})
        self.assertEqual([(f["id"], f["byUser"]) for f in self.ok("GET", "/state")["fetched"]],
                         [(message["id"], "alice")])
        self.assertEqual(self.call("GET", "/messages/msg-999")[0], 404)

    def test_fail_makes_the_next_hook_calls_fail(self):
        self.ok("POST", "/fail", {"status": 503, "count": 2, "retryAfter": 1})
        status, answer, headers = request("POST", self.base + "/devices/register",
                                       {"token": T1, "deviceId": PHONE, "bundleId": APP, "environment": "sandbox"})
        self.assertEqual((status, headers["Retry-After"]), (503, "1"))
        self.assertEqual(self.ok("GET", "/state")["fail"]["remaining"], 1)  # not a hook: not failed
        self.assertEqual(self.call("GET", "/messages/msg-1")[0], 503)
        self.register(T1)  # the injected failures are used up
        statuses = [c["status"] for c in self.ok("GET", "/state")["calls"] if c["route"] == "register"]
        self.assertEqual(statuses, [503, 200])

    def test_bad_input_is_400_and_the_server_lives_on(self):
        bad = [
            ("POST", "/sessions/bind", b"{not json"),
            ("POST", "/sessions/bind", b"[1, 2]"),
            ("POST", "/sessions/bind", b"\xff\xfe"),
            ("POST", "/sessions/bind", b"[" * 100000),
            ("POST", "/sessions/bind", b""),
            ("POST", "/sessions/bind", json.dumps({"token": T1}).encode()),  # no userId
            ("POST", "/sessions/bind", json.dumps({"token": "{{token}}", "userId": "a"}).encode()),
            ("POST", "/devices/register", json.dumps({"token": T1, "deviceId": PHONE, "bundleId": APP,
                                                      "environment": "staging"}).encode()),
            ("POST", "/messages", json.dumps({"userId": "alice", "body": 7}).encode()),
            ("POST", "/fail", json.dumps({"status": 200}).encode()),
            ("POST", "/tokens/not-hex/invalid", None),
        ]
        for method, path, raw in bad:
            with self.subTest(path=path, raw=raw[:30] if raw else raw):
                status, answer = self.call(method, path, raw=raw)
                self.assertEqual(status, 400)
                self.assertIsInstance(answer["error"], str)
        self.assertEqual(self.call("GET", "/nowhere")[0], 404)
        self.assertEqual(self.call("GET", "/sessions/bind")[0], 405)
        # Garbage on the socket, then a normal request: still answering.
        with socket.create_connection(self.host_port(), timeout=5) as s:
            s.sendall(b"\x00\x01 nonsense\r\n\r\n")
            s.recv(1000)
        self.ok("GET", "/state")

    def test_keep_alive(self):
        connection = http.client.HTTPConnection(*self.host_port(), timeout=5)
        self.addCleanup(connection.close)
        for _ in range(3):
            connection.request("GET", "/state")
            response = connection.getresponse()
            self.assertEqual(response.status, 200)
            json.loads(response.read())

    def test_reset(self):
        self.register(T1, user="alice")
        self.ok("POST", "/reset")
        self.assertEqual(self.tokens("alice"), [])

    def host_port(self):
        host, port = self.base.removeprefix("http://").split(":")
        return host, int(port)


class CorrectBackend(Shared, BackendCase):
    def test_one_account_per_token(self):
        self.register(T1)
        self.bind(T1, "alice")
        self.bind(T1, "bob")  # even without a logout in between
        self.assertEqual(self.tokens("alice"), [])
        self.assertEqual(self.tokens("bob"), [T1])

    def test_a_logs_out_b_logs_in(self):
        self.a_logs_out_b_logs_in()
        self.assertEqual(self.tokens("alice"), [])
        self.assertEqual(self.tokens("bob"), [T1])

    def test_logout_removes_the_binding(self):
        self.register(T1)
        self.bind(T1, "alice")
        self.assertEqual(self.unbind(T1, "alice")["bindingsRemoved"], 1)
        self.assertEqual(self.tokens("alice"), [])

    def test_a_late_unbind_does_not_log_out_the_next_user(self):
        self.register(T1)
        self.bind(T1, "alice")
        self.bind(T1, "bob")
        self.unbind(T1, "alice")  # alice's logout arrives after bob's login
        self.assertEqual(self.tokens("bob"), [T1])


class BuggyBackend(Shared, BackendCase):
    buggy = True

    def test_a_token_stays_bound_to_two_accounts(self):
        self.register(T1)
        self.bind(T1, "alice")
        self.bind(T1, "bob")
        self.assertEqual(self.tokens("alice"), [T1])
        self.assertEqual(self.tokens("bob"), [T1])

    def test_a_logs_out_b_logs_in_keeps_both(self):
        self.a_logs_out_b_logs_in()
        self.assertEqual(self.tokens("alice"), [T1])  # the bug: pushes for alice reach bob's phone
        self.assertEqual(self.tokens("bob"), [T1])
        state = self.ok("GET", "/state")
        self.assertEqual(state["variant"], "buggy")
        self.assertIsNotNone(state["sessions"][0]["endedAt"])  # alice's session did end


def debug_build_binary():
    """apns-emulator in the directory `swift build --show-bin-path` names, or None."""
    if not shutil.which("swift"):
        return None
    answer = subprocess.run(["swift", "build", "--show-bin-path"], cwd=REPO, capture_output=True, text=True)
    return os.path.join(answer.stdout.strip(), "apns-emulator") if answer.returncode == 0 else None


def find_emulator():
    binary = os.environ.get("APNS_EMULATOR_BIN") or debug_build_binary() or ""
    python = os.environ.get("NOTIFY_PYTHON") or str(REPO / ".build/compat-venv/bin/python")
    if not (os.access(binary, os.X_OK) and os.access(python, os.X_OK) and shutil.which("openssl")):
        return None
    if subprocess.run([python, "-c", "import aioapns"], capture_output=True).returncode != 0:
        return None
    return binary, python


@unittest.skipUnless(find_emulator(), "no emulator binary or no python with aioapns (see the module doc)")
class NotifyThroughEmulator(unittest.TestCase):
    """notify.py with aioapns against a real emulator, the backend driven as the app would."""
    TEAM, KEY = "TEAM000001", "KEY0000001"

    @classmethod
    def setUpClass(cls):
        binary, cls.python = find_emulator()
        cls.work = tempfile.TemporaryDirectory()
        work = Path(cls.work.name)
        key = work / "key.p8"
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-out", str(key)], check=True, capture_output=True)
        ready = work / "ready.json"
        cls.emulator = subprocess.Popen(
            [binary, "serve", "--sandbox-listen", "127.0.0.1:0", "--production-listen", "127.0.0.1:0",
             "--channel-sandbox-listen", "off", "--channel-production-listen", "off",
             "--admin-listen", "127.0.0.1:0", "--device-listen", "off", "--certs-dir", str(work / "certs"),
             "--auth-key", f"{cls.TEAM}:{cls.KEY}:{key}", "--app", f"{cls.TEAM}:{APP}",
             "--demo", "off", "--quiet", "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text().strip().endswith("}")):
            if cls.emulator.poll() is not None or time.monotonic() > deadline:
                stop(cls.emulator)
                cls.work.cleanup()
                raise RuntimeError("the emulator did not start")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        cls.admin = f"http://{info['admin']}/api/v1"
        cls.env = {**os.environ, "APNS_KEY_PATH": str(key), "APNS_KEY_ID": cls.KEY, "APNS_TEAM_ID": cls.TEAM,
                   "APNS_CA": info["caFile"], "APNS_HOST": "127.0.0.1",
                   "APNS_PORT": info["sandbox"].rsplit(":", 1)[1],
                   "APNS_PRODUCTION_PORT": info["production"].rsplit(":", 1)[1]}

    @classmethod
    def tearDownClass(cls):
        stop(cls.emulator)
        cls.work.cleanup()

    def backend(self, buggy):
        argv = [sys.executable, str(HERE / "backend.py"), "--port", "0"] + (["--buggy"] if buggy else [])
        process, line = start(argv, "listening on ", stderr=subprocess.DEVNULL)
        self.addCleanup(stop, process)
        return line.removeprefix("listening on ")

    def device(self, environment="sandbox"):
        status, device, _ = request("POST", self.admin + "/devices", {"bundleId": APP, "environment": environment})
        self.assertEqual(status, 201, device)
        return device

    def notify(self, base, user):
        result = subprocess.run([self.python, str(HERE / "notify.py"), "--backend", base, "--user", user,
                                 "--payload", json.dumps({"aps": {"alert": f"for {user}"}})],
                                env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        return [json.loads(line) for line in result.stdout.splitlines()]

    def received(self, token):
        status, answer, _ = request("GET", f"{self.admin}/notifications?token={token}")
        self.assertEqual(status, 200)
        return [(n["status"], n["outcome"], n["payload"].get("uid")) for n in answer["notifications"]]

    def a_logs_out_b_logs_in(self, base, phone):
        app = {"token": phone["token"], "deviceId": phone["deviceId"], "bundleId": APP, "environment": "sandbox"}
        for path, body in [("/devices/register", {**app, "userId": ""}),
                           ("/sessions/bind", {**app, "userId": "alice"}),
                           ("/sessions/unbind", {"token": phone["token"], "userId": "alice"}),
                           ("/sessions/bind", {**app, "userId": "bob"})]:
            self.assertEqual(request("POST", base + path, body)[0], 200)

    def test_correct_backend_does_not_push_alice_to_bobs_phone(self):
        base, phone = self.backend(buggy=False), self.device()
        self.a_logs_out_b_logs_in(base, phone)
        self.assertEqual(self.notify(base, "alice"), [])
        self.assertEqual(self.received(phone["token"]), [])
        self.assertEqual(self.notify(base, "bob"), [{"token": phone["token"], "status": 200, "reason": None}])
        self.assertEqual(self.received(phone["token"]), [(200, "delivered", "bob")])

    def test_buggy_backend_pushes_alice_to_bobs_phone(self):
        base, phone = self.backend(buggy=True), self.device()
        self.a_logs_out_b_logs_in(base, phone)
        self.assertEqual(self.notify(base, "alice"), [{"token": phone["token"], "status": 200, "reason": None}])
        # Delivered to the phone bob is logged in on, addressed to alice: what the emulator's
        # cross-account detector flags (payload /uid vs the device's account).
        self.assertEqual(self.received(phone["token"]), [(200, "delivered", "alice")])

    def test_unregistered_tokens_are_reported_to_the_backend(self):
        base = self.backend(buggy=False)
        live, gone, production = self.device(), self.device(), self.device("production")
        status, _, _ = request("DELETE", f"{self.admin}/devices/{gone['deviceId']}/apps/{APP}")
        self.assertEqual(status, 200)
        for device, environment in [(live, "sandbox"), (gone, "sandbox"), (production, "production")]:
            request("POST", base + "/devices/register", {"token": device["token"], "deviceId": device["deviceId"],
                                                      "bundleId": APP, "environment": environment, "userId": "carol"})
        lines = self.notify(base, "carol")
        self.assertEqual([(line["status"], line["reason"]) for line in lines],
                         [(200, None), (410, "Unregistered"), (200, None)])
        self.assertTrue(lines[1]["invalidated"])
        _, answer, _ = request("GET", base + "/users/carol/tokens")
        self.assertEqual([t["token"] for t in answer["tokens"]], [live["token"], production["token"]])
        self.assertEqual(self.received(production["token"]), [(200, "delivered", "carol")])


if __name__ == "__main__":
    unittest.main(verbosity=2)
