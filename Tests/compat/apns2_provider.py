"""apns2-up 0.9.0 (PyAPNs2 on hyper-up) as a user would run it: Apple's host names are built
in (sandbox: api.development.push.apple.com), port 443 or 2197 with use_alternative_port;
trust comes from SSL_CERT_FILE (hyper calls set_default_verify_paths())."""
import socket
import time
from importlib.metadata import version

from apns2.client import APNsClient, Notification, NotificationPriority
from apns2.credentials import TokenCredentials
from apns2.errors import APNsException, Unregistered
from apns2.payload import Payload

from compat_job import describe, load_job, marker, report, report_summary

job = load_job()
# hyper has no timeout setting of its own; a socket default bounds every wait.
socket.setdefaulttimeout(job["timeoutSeconds"])

credentials = TokenCredentials(job["keyPath"], job["keyId"], job["teamId"])
# The sandbox on Apple's alternative port 2197, production on 443.
sandbox = APNsClient(credentials, use_sandbox=True, use_alternative_port=True)
production = APNsClient(credentials, use_sandbox=False)
topic = job["topic"]
tokens = job["tokens"]


def alert(case, n):
    return Payload(alert=f"{case} #{n}", custom={"compat": marker(job, case, n)})


def push(client, case, n, token, payload, **options):
    # apns2 reports success by returning and failure by raising the exception named after
    # Apple's reason; it does not surface the HTTP status or the apns-id.
    try:
        client.send_notification(token, payload, topic=topic, **options)
    except Unregistered as exc:
        report(case, n, reason="Unregistered", timestamp=exc.timestamp)
    except APNsException as exc:
        report(case, n, reason=type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, n, error=describe(exc))
    else:
        report(case, n, reason=None)


push(sandbox, "alert", 0, tokens["sandbox"], alert("alert", 0))
if job.get("only") == "alert":  # run.py's check that the CA setting is what lets it connect
    raise SystemExit(0)
# No alert, badge or sound: apns2 infers apns-push-type background from the payload.
push(sandbox, "background", 1, tokens["sandbox"],
     Payload(content_available=True, custom={"compat": marker(job, "background", 1)}),
     priority=NotificationPriority.Delayed)
push(sandbox, "wrong-environment", 2, tokens["production"], alert("wrong-environment", 2))
push(sandbox, "unregistered", 3, tokens["unregistered"], alert("unregistered", 3))
push(production, "production", 4, tokens["production"], alert("production", 4))

# The burst: send_notification_batch keeps as many streams open as the server's
# MAX_CONCURRENT_STREAMS allows and returns {token: "Success" | reason | (reason, timestamp)}.
batch = [Notification(token=token, payload=alert("burst", 5 + i))
         for i, token in enumerate(tokens["burst"])]
started = time.monotonic()
try:
    results = sandbox.send_notification_batch(batch, topic=topic)
except Exception as exc:  # noqa: BLE001
    results = {}
    error = describe(exc)
else:
    error = "no result for this token"
seconds = time.monotonic() - started
for i, token in enumerate(tokens["burst"]):
    result = results.get(token)
    if result is None:
        report("burst", 5 + i, error=error)
    elif result == "Success":
        report("burst", 5 + i, reason=None)
    elif isinstance(result, tuple):
        report("burst", 5 + i, reason=result[0], timestamp=result[1])
    else:
        report("burst", 5 + i, reason=result)
report_summary(burstSeconds=round(seconds, 3), version="apns2-up " + version("apns2-up"))
