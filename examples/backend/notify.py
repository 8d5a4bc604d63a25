#!/usr/bin/env python3
"""The provider side of the example backend: push to every token a user has, with aioapns.

    notify.py --backend http://127.0.0.1:8080 --user alice --payload '{"aps": {"alert": "Hi"}}'

1. GET {backend}/users/{user}/tokens: the tokens the backend has bound to the user.
2. One push per token through aioapns (a real provider library, unmodified), with the token's
   bundle id as apns-topic and its environment choosing sandbox or production. The payload
   gets "uid": USER unless it has one: the addressee the emulator's cross-account detector
   reads (hooks.json, addresseePointer "/uid").
3. For each token APNs calls dead (410 Unregistered / ExpiredToken, 400 BadDeviceToken):
   POST {backend}/tokens/{token}/invalid, so the backend stops pushing to it.

Prints one JSON line per push: {"token", "status", "reason"} (plus "invalidated": true when
reported, "error" when no answer came). Exit status: 0 when every push got an answer and none
was refused for the provider's own request (any 200, 410, 429 or 5xx; a dead token reported);
1 when a push got none, a dead token could not be reported, or a push was refused for the
provider's credentials or request (403, or a 400 other than BadDeviceToken: a wrong key, team
or topic would otherwise pass for a run that pushed), 2 on setup errors.

Credentials and the APNs address come from flags or the environment: APNS_KEY_PATH,
APNS_KEY_ID, APNS_TEAM_ID, APNS_CA (the emulator's certs/ca.pem), APNS_HOST and APNS_PORT
(and APNS_PRODUCTION_PORT when production is on another port, as with the emulator's
default listeners 127.0.0.1:2197 sandbox / :2198 production). Without APNS_HOST/APNS_PORT
aioapns dials Apple's own hosts on 443, as it always does.
"""
import argparse
import asyncio
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

try:
    from aioapns import APNs, NotificationRequest, PushType
    from aioapns.connection import APNsKeyConnectionPool
except ImportError:  # a setup error like any other (exit 2): say what to install
    print("notify.py: aioapns is not installed (pip install -r Tests/compat/requirements.txt, "
          "or use .build/compat-venv/bin/python)", file=sys.stderr)
    sys.exit(2)

DEAD_TOKEN_REASONS = {(410, "Unregistered"), (410, "ExpiredToken"), (400, "BadDeviceToken")}


class SetupError(Exception):
    pass


def backend_call(base, method, path, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def dial_override(client, host, port):
    """Make one aioapns client connect to host:port instead of Apple's host on 443.

    aioapns 4.0 has no host or port option: the pool connects to its protocol class's
    APNS_SERVER/APNS_PORT (class attributes). This replaces only where the TCP connection goes,
    like curl --connect-to: the TLS server name, the certificate check and the :authority/host
    header still say api.development.push.apple.com or api.push.apple.com, so everything aioapns
    sends is what it would send to Apple. It relies on the pool's private _create_connection
    (checked for below); the pinned aioapns is 4.0 (Tests/compat/requirements.txt).
    """
    pool = client.pool
    if not isinstance(pool, APNsKeyConnectionPool) or not hasattr(pool, "_create_connection"):
        raise SetupError("this aioapns has no APNsKeyConnectionPool._create_connection to redirect; "
                         "notify.py was written against aioapns 4.0")
    server_name = pool.protocol_class.APNS_SERVER

    async def create_connection(protocol_factory):
        _, protocol = await pool.loop.create_connection(
            protocol_factory, host=host or server_name, port=port, ssl=pool.ssl_context,
            server_hostname=server_name)
        return protocol

    pool._create_connection = create_connection


def build_payload(text, user, message_id, background):
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise SetupError(f"--payload is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise SetupError("--payload must be a JSON object")
    payload.setdefault("uid", user)
    if message_id is not None:
        payload["messageId"] = message_id
    aps = payload.setdefault("aps", {})
    if background and isinstance(aps, dict):
        aps.setdefault("content-available", 1)  # what makes it a background push on the device
    return payload


async def quiet(request, result):
    """aioapns logs every non-200 as an error; here each answer is printed as a result line."""


async def send_all(args, tokens, payload):
    context = ssl.create_default_context(cafile=args.ca) if args.ca else None
    redirect = args.apns_host is not None or args.apns_port is not None
    clients = {}  # environment -> APNs; the topic is set per push

    def client_for(environment, topic):
        if environment not in clients:
            # Created inside the running loop: aioapns takes the current loop at construction.
            client = APNs(key=args.key, key_id=args.key_id, team_id=args.team_id, topic=topic,
                          use_sandbox=environment != "production", ssl_context=context,
                          max_connection_attempts=2, err_func=quiet)
            if redirect:
                port = args.apns_production_port if environment == "production" else args.apns_port
                dial_override(client, args.apns_host, port or args.apns_port or 443)
            clients[environment] = client
        return clients[environment]

    all_answered = True
    try:
        for entry in tokens:
            token = entry["token"]
            environment = entry.get("environment") or "sandbox"
            topic = entry.get("bundleId") or args.topic
            if args.topic and entry.get("bundleId") not in (None, args.topic):
                continue  # another app of this user's: --topic restricts the run to one app
            line = {"token": token, "status": None, "reason": None}
            request = NotificationRequest(
                device_token=token, message=payload, apns_topic=topic,
                push_type=PushType.BACKGROUND if args.background else PushType.ALERT,
                priority=5 if args.background else None)  # Apple requires 5 for background
            try:
                if topic is None:
                    raise SetupError("the backend knows no bundle id for this token; pass --topic")
                result = await asyncio.wait_for(
                    client_for(environment, topic).send_notification(request), args.timeout)
                line["status"], line["reason"] = int(result.status), result.description
            except Exception as error:  # no answer: report it, go on
                line["error"] = f"{type(error).__name__}: {error}".rstrip(": ")
                all_answered = False
            status = line["status"]
            if status == 403 or (status == 400 and (status, line["reason"]) not in DEAD_TOKEN_REASONS):
                print(f"notify.py: the push to {token} was refused: {status} {line['reason']} "
                      "(check the key, team id and topic)", file=sys.stderr)
                all_answered = False
            if (line["status"], line["reason"]) in DEAD_TOKEN_REASONS:
                try:
                    backend_call(args.backend, "POST", f"/tokens/{urllib.parse.quote(token)}/invalid")
                    line["invalidated"] = True
                except (urllib.error.URLError, OSError, ValueError) as error:
                    print(f"notify.py: could not report {token} as invalid: {error}", file=sys.stderr)
                    line["invalidated"] = False
                    all_answered = False
            print(json.dumps(line), flush=True)
    finally:
        for client in clients.values():
            client.pool.close()
    return all_answered


def main():
    env = os.environ
    parser = argparse.ArgumentParser(description="Push to every token the backend has for a user (aioapns).")
    parser.add_argument("--backend", required=True, help="the backend's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--user", required=True, help="the user to notify")
    parser.add_argument("--payload", default='{"aps": {"alert": "You have a new message"}}',
                        help='the APNs payload (JSON object); "uid": USER is added unless present')
    parser.add_argument("--message", help="store this text on the backend (POST /messages) and put its "
                                          "id in the payload as messageId, for the app's fetch hook")
    parser.add_argument("--topic", help="push only to this app's tokens (and the topic for tokens "
                                        "the backend has no bundle id for)")
    parser.add_argument("--background", action="store_true",
                        help="apns-push-type background, priority 5, aps.content-available 1")
    parser.add_argument("--key-path", default=env.get("APNS_KEY_PATH"), help="the .p8 signing key [APNS_KEY_PATH]")
    parser.add_argument("--key-id", default=env.get("APNS_KEY_ID"), help="[APNS_KEY_ID]")
    parser.add_argument("--team-id", default=env.get("APNS_TEAM_ID"), help="[APNS_TEAM_ID]")
    parser.add_argument("--ca", default=env.get("APNS_CA"), help="CA file to trust, e.g. the emulator's certs/ca.pem [APNS_CA]")
    parser.add_argument("--apns-host", default=env.get("APNS_HOST"),
                        help="connect here instead of Apple's host name [APNS_HOST]")
    parser.add_argument("--apns-port", type=int, default=env.get("APNS_PORT"), help="[APNS_PORT] (default 443)")
    parser.add_argument("--apns-production-port", type=int, default=env.get("APNS_PRODUCTION_PORT"),
                        help="port for production tokens [APNS_PRODUCTION_PORT] (default: --apns-port)")
    parser.add_argument("--timeout", type=float, default=30, help="seconds to wait for each push's answer")
    args = parser.parse_args()
    args.backend = args.backend.rstrip("/")

    try:
        missing = [flag for flag, value in (("--key-path", args.key_path), ("--key-id", args.key_id),
                                            ("--team-id", args.team_id)) if not value]
        if missing:
            raise SetupError(f"missing {', '.join(missing)} (or APNS_KEY_PATH, APNS_KEY_ID, APNS_TEAM_ID)")
        try:
            with open(args.key_path) as f:
                args.key = f.read()
        except OSError as error:
            raise SetupError(f"cannot read the key: {error}") from None
        if args.ca and not os.path.isfile(args.ca):
            raise SetupError(f"no CA file at {args.ca}")
        message_id = None
        try:
            if args.message is not None:
                message_id = backend_call(args.backend, "POST", "/messages",
                                          {"userId": args.user, "body": args.message})["id"]
            payload = build_payload(args.payload, args.user, message_id, args.background)
            tokens = backend_call(args.backend, "GET",
                                  f"/users/{urllib.parse.quote(args.user, safe='')}/tokens")["tokens"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as error:
            raise SetupError(f"backend {args.backend}: {error}") from None
        print(f"notify.py: {len(tokens)} token(s) for {args.user}", file=sys.stderr, flush=True)
        return 0 if asyncio.run(send_all(args, tokens, payload)) else 1
    except SetupError as error:
        print(f"notify.py: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
