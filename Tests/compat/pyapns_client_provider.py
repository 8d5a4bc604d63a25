"""pyapns-client 2.0.6 (on httpx with http2) as a user would run it (its README):
APNSClient(mode=MODE_DEV or MODE_PROD, root_cert_path=…, auth_key_path=…, auth_key_id=…,
team_id=…) and push(). The hosts are built in, https://api.development.push.apple.com:443 and
https://api.push.apple.com:443; its httpx client (one connection, max_keepalive_connections=0)
opens a new HTTP/2 connection for each push. Trust comes from root_cert_path, the CA file the
README documents (the test CA, its path in argv[2]; httpx loads it as cafile). Without it
(None) httpx trusts SSL_CERT_FILE, which run.py leaves unset, or else certifi's bundle."""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

from pyapns_client import (APNSClient, APNSConnectionException, APNSException, IOSNotification,
                           IOSPayload, IOSPayloadAlert, UnregisteredException)

from compat_job import describe, load_job, marker, report_summary
from compat_job import report as report_line

job = load_job()
root_cert_path = sys.argv[2] if len(sys.argv) > 2 else None
common = dict(root_cert_path=root_cert_path, auth_key_path=job["keyPath"],
              auth_key_id=job["keyId"], team_id=job["teamId"])
sandbox = APNSClient(mode=APNSClient.MODE_DEV, **common)
production = APNSClient(mode=APNSClient.MODE_PROD, **common)
topic = job["topic"]
tokens = job["tokens"]
printing = threading.Lock()  # print() writes the line and its newline separately


def report(*args, **fields):
    with printing:
        report_line(*args, **fields)


def alert(case, n):
    payload = IOSPayload(alert=IOSPayloadAlert(body=f"{case} #{n}"), custom={"compat": marker(job, case, n)})
    return IOSNotification(payload=payload, topic=topic)


def push(client, case, n, token, notification):
    # push() returns only on status 200 and otherwise raises the exception named after Apple's
    # reason (<reason>Exception), carrying status_code, apns_id and, for 410, timestamp. It
    # surfaces no apns-id on success. (It retries APNSServerException twice by itself.)
    try:
        client.push(notification=notification, device_token=token)
    except UnregisteredException as exc:
        report(case, n, status=exc.status_code, reason="Unregistered", apns_id=exc.apns_id,
               timestamp=exc.timestamp)
    except APNSConnectionException as exc:
        # No answer (after its 3 tries): the cause, e.g. the certificate, is the httpx error
        # it was raised while handling.
        cause = exc.__context__
        report(case, n, error=describe(exc) + (f" ({type(cause).__name__}: {cause})" if cause else ""))
    except APNSException as exc:
        reason = type(exc).__name__.removesuffix("Exception")
        report(case, n, status=exc.status_code, reason=reason, apns_id=exc.apns_id)
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, n, error=describe(exc))
    else:
        report(case, n, status=200)


try:
    push(sandbox, "alert", 0, tokens["sandbox"], alert("alert", 0))
    if job.get("only") == "alert":  # run.py's check that the CA setting is what lets it connect
        raise SystemExit(0)
    # The priority goes into the header as given: httpx takes str only, so "5", not
    # IOSNotification.PRIORITY_LOW (the int 5, which httpx rejects).
    background = IOSNotification(
        payload=IOSPayload(content_available=True, custom={"compat": marker(job, "background", 1)}),
        topic=topic, push_type=IOSNotification.PUSH_TYPE_BACKGROUND, priority="5")
    push(sandbox, "background", 1, tokens["sandbox"], background)
    push(sandbox, "wrong-environment", 2, tokens["production"], alert("wrong-environment", 2))
    push(sandbox, "unregistered", 3, tokens["unregistered"], alert("unregistered", 3))
    push(production, "production", 4, tokens["production"], alert("production", 4))

    # The burst: push() blocks, so threads, 50 at a time, each with an APNSClient of its own.
    # One client shared by the threads does not work: httpx's sync HTTP/2 connection hands
    # several threads the same stream id (httpcore takes get_next_available_stream_id()
    # outside any lock), and on the resulting errors the client closes itself under the others.
    local = threading.local()
    clients = []

    def burst_push(n, token):
        if not hasattr(local, "client"):
            local.client = APNSClient(mode=APNSClient.MODE_DEV, **common)
            clients.append(local.client)
        push(local.client, "burst", n, token, alert("burst", n))

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            for i, token in enumerate(tokens["burst"]):
                pool.submit(burst_push, 5 + i, token)
    finally:
        for client in clients:
            client.close()
    report_summary(burstSeconds=round(time.monotonic() - started, 3),
                   version="pyapns-client " + version("pyapns-client"))
finally:
    sandbox.close()
    production.close()
