"""Example APNs provider for docker-compose.yml.

It is an ordinary aioapns program: aioapns connects to Apple's own host name
(api.development.push.apple.com:443 for the sandbox, api.push.apple.com:443 for production)
and verifies the server certificate against the default trust store. Inside the compose
network those names lead to the emulator, and SSL_CERT_FILE points the trust store at the
emulator's TEST ONLY CA. Nothing in aioapns is patched or configured for the emulator.

A real backend learns device tokens from its app. Here the "app" is the compose `device`
service, and its token is read from the emulator's admin API.

Prints one JSON line per push and exits 0 when every push was accepted (HTTP 200).
"""

import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request

from aioapns import APNs, NotificationRequest, PushType

ENV = os.environ
KEY_FILE = ENV.get("APNS_KEY_FILE", "/config/AuthKey_TESTKEY001.p8")
KEY_ID = ENV.get("APNS_KEY_ID", "TESTKEY001")
TEAM_ID = ENV.get("APNS_TEAM_ID", "TESTTEAM01")
TOPIC = ENV.get("APNS_TOPIC", "com.example.app")
USE_SANDBOX = ENV.get("APNS_USE_SANDBOX", "1") not in ("0", "false", "no", "")
ADMIN_URL = ENV.get("EMULATOR_ADMIN_URL", "http://apns-emulator:8197").rstrip("/")
# Only when the emulator runs with APNS_EMULATOR_ADMIN_TOKEN (the compose file does not).
ADMIN_TOKEN = ENV.get("EMULATOR_ADMIN_TOKEN", "")
DEVICE_ID = ENV.get("DEVICE_ID", "compose-iphone")
CA_FILE = ENV.get("SSL_CERT_FILE", "")
WAIT_SECONDS = float(ENV.get("PROVIDER_WAIT_SECONDS", "120"))
SEND_TIMEOUT = float(ENV.get("PROVIDER_SEND_TIMEOUT", "30"))


def log(message):
    print(f"provider: {message}", file=sys.stderr, flush=True)


def wait_for_file(path, deadline):
    """The emulator writes its CA into the shared volume on first start."""
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"provider: {path} did not appear (is the certs volume mounted?)")
        time.sleep(0.5)


def device_token(deadline):
    """Ask the emulator's admin API for the token the device was issued for our topic."""
    url = f"{ADMIN_URL}/api/v1/devices/{DEVICE_ID}"
    environment = "sandbox" if USE_SANDBOX else "production"
    last_problem = "no answer yet"
    while time.monotonic() < deadline:
        try:
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"} if ADMIN_TOKEN else {}
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
                device = json.load(response)
            for app in device.get("apps", []):
                if app.get("bundleId") == TOPIC and app.get("environment") == environment:
                    token = app.get("tokens", {}).get("app") or app.get("token")
                    if token:
                        return token
            last_problem = f"device {DEVICE_ID} has no {environment} token for {TOPIC} yet"
        except urllib.error.HTTPError as error:
            last_problem = f"{url}: HTTP {error.code}"
        except (urllib.error.URLError, OSError, ValueError) as error:
            last_problem = f"{url}: {error}"
        time.sleep(0.5)
    raise SystemExit(f"provider: gave up waiting for the device token ({last_problem})")


def pushes(token):
    """(name, request) pairs: what a backend typically sends."""
    return [
        ("alert", NotificationRequest(
            device_token=token,
            message={"aps": {"alert": "Hello from aioapns in a container"}},
            push_type=PushType.ALERT,
        )),
        ("alert-rich", NotificationRequest(
            device_token=token,
            message={
                "aps": {
                    "alert": {"title": "Order shipped", "body": "Your order #42 is on its way."},
                    "badge": 1,
                    "sound": "default",
                },
                "orderId": 42,
            },
            push_type=PushType.ALERT,
            priority=10,
            collapse_key="order-42",
        )),
        ("background", NotificationRequest(
            device_token=token,
            message={"aps": {"content-available": 1}, "sync": "inbox"},
            push_type=PushType.BACKGROUND,
            priority=5,
        )),
    ]


async def send_all(token):
    key = open(KEY_FILE).read()
    # Built inside the running loop (aioapns takes the current loop when it is created).
    client = APNs(key=key, key_id=KEY_ID, team_id=TEAM_ID, topic=TOPIC,
                  use_sandbox=USE_SANDBOX, max_connection_attempts=3)
    accepted = 0
    batch = pushes(token)
    for name, request in batch:
        try:
            result = await asyncio.wait_for(client.send_notification(request), SEND_TIMEOUT)
            status, reason = result.status, result.description
        except Exception as error:  # connection problems: report and count as rejected
            status, reason = "error", f"{type(error).__name__}: {error}"
        ok = status == "200"
        accepted += ok
        print(json.dumps({"push": name, "status": status, "reason": reason,
                          "apnsId": request.notification_id}), flush=True)
    return accepted, len(batch)


def main():
    deadline = time.monotonic() + WAIT_SECONDS
    if CA_FILE:
        wait_for_file(CA_FILE, deadline)
    token = device_token(deadline)
    host = "api.development.push.apple.com" if USE_SANDBOX else "api.push.apple.com"
    log(f"device {DEVICE_ID} token {token[:8]}…; pushing to {host}:443 as {TEAM_ID}/{KEY_ID}, "
        f"topic {TOPIC}, trusting {CA_FILE or 'the system store'}")
    accepted, total = asyncio.run(send_all(token))
    summary = {"summary": {"accepted": accepted, "sent": total}}
    print(json.dumps(summary), flush=True)
    return 0 if accepted == total else 1


if __name__ == "__main__":
    sys.exit(main())
