"""aioapns 4.0 as a user would run it: host names and port 443 are built into the library,
trust comes from SSL_CERT_FILE (ssl.create_default_context())."""
import asyncio
from importlib.metadata import version

from aioapns import APNs, NotificationRequest, PushType

from compat_job import describe, load_job, marker, report, run_plan

job = load_job()
TIMEOUT = job["timeoutSeconds"]


async def push(client, case, n, token, background=False):
    if background:
        message = {"aps": {"content-available": 1}, "compat": marker(job, case, n)}
        request = NotificationRequest(device_token=token, message=message,
                                      push_type=PushType.BACKGROUND, priority=5)
    else:
        message = {"aps": {"alert": {"title": "compat", "body": f"{case} #{n}"}},
                   "compat": marker(job, case, n)}
        request = NotificationRequest(device_token=token, message=message,
                                      push_type=PushType.ALERT)
    try:
        result = await asyncio.wait_for(client.send_notification(request), TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, n, error=describe(exc))
        return
    # aioapns reports the status as a string ("200") and the apns-id it sent.
    report(case, n, status=int(result.status), reason=result.description,
           apns_id=result.notification_id, timestamp=result.timestamp)


async def main():
    key = open(job["keyPath"]).read()
    common = dict(key=key, key_id=job["keyId"], team_id=job["teamId"], topic=job["topic"])
    sandbox = APNs(use_sandbox=True, **common)      # api.development.push.apple.com:443
    production = APNs(use_sandbox=False, **common)  # api.push.apple.com:443
    await run_plan(job, push, sandbox, production, "aioapns " + version("aioapns"))


asyncio.run(main())
