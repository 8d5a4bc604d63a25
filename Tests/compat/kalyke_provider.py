"""kalyke-apns 1.5.0 (on httpx2) as a user would run it: https://api.sandbox.push.apple.com
and https://api.push.apple.com on port 443 are built in, one new HTTP/2 connection per
message; trust comes from SSL_CERT_FILE (read by httpcore2's default SSL context)."""
import asyncio
from importlib.metadata import version

from kalyke import ApnsClient, ApnsConfig, ApnsPriority, ApnsPushType, Payload
from kalyke.exceptions import ApnsProviderException

from compat_job import describe, load_job, marker, report, run_plan

job = load_job()
TIMEOUT = job["timeoutSeconds"]
common = dict(team_id=job["teamId"], auth_key_id=job["keyId"], auth_key_filepath=job["keyPath"])
sandbox = ApnsClient(use_sandbox=True, **common)
production = ApnsClient(use_sandbox=False, **common)


async def push(client, case, n, token, background=False):
    if background:
        payload = Payload(content_available=True, custom={"compat": marker(job, case, n)})
        config = ApnsConfig(topic=job["topic"], push_type=ApnsPushType.BACKGROUND,
                            priority=ApnsPriority.BASED_ON_POWER)
    else:
        payload = Payload(alert=f"{case} #{n}", custom={"compat": marker(job, case, n)})
        config = ApnsConfig(topic=job["topic"])
    # kalyke returns the apns-id on success and raises the exception named after Apple's
    # reason on failure (the rest of the body, e.g. timestamp, is in exc.error).
    try:
        apns_id = await asyncio.wait_for(
            client.send_message(device_token=token, payload=payload, apns_config=config), TIMEOUT)
    except ApnsProviderException as exc:
        report(case, n, reason=type(exc).__name__, timestamp=exc.error.get("timestamp"))
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, n, error=describe(exc))
    else:
        report(case, n, apns_id=apns_id)


asyncio.run(run_plan(job, push, sandbox, production, "kalyke-apns " + version("kalyke-apns")))
