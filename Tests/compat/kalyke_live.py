"""kalyke-apns 1.5.0's Live Activity support used as its README shows: LiveActivityClient,
LiveActivityApnsConfig (the topic must end in .push-type.liveactivity) and
LiveActivityPayload (event start, update or end). Host and trust as in kalyke_provider.py.

The cases (run.py, LIVE_PLAN): start-readme, a push-to-start built with LiveActivityPayload;
start, the same start as a plain dict (send_message takes a dict too); update and end, to the
update tokens of two activities the app started."""
import asyncio
from datetime import datetime, timedelta

from kalyke import LiveActivityApnsConfig, LiveActivityClient, LiveActivityEvent, LiveActivityPayload, PayloadAlert
from kalyke.exceptions import ApnsProviderException

from compat_job import describe, live_marker, load_job, report

job = load_job()
TIMEOUT = job["timeoutSeconds"]
client = LiveActivityClient(use_sandbox=True, team_id=job["teamId"], auth_key_id=job["keyId"],
                            auth_key_filepath=job["keyPath"])
config = LiveActivityApnsConfig(topic=f"{job['topic']}.push-type.liveactivity")


async def push(case, token, payload):
    try:
        apns_id = await asyncio.wait_for(
            client.send_message(device_token=token, payload=payload, apns_config=config), TIMEOUT)
    except ApnsProviderException as exc:
        report(case, None, reason=type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, None, error=describe(exc))
    else:
        report(case, None, apns_id=apns_id)


async def main():
    alert = PayloadAlert(title="compat", body="your order")
    # LiveActivityPayload insists on attributes_type and attributes for a start (it raises
    # ValueError without them), but its dict() leaves both out of the payload.
    await push("start-readme", job["pushToStartToken"], LiveActivityPayload(
        alert=alert, event=LiveActivityEvent.START, content_state=job["startState"],
        attributes_type=job["attributesType"], attributes=job["attributes"],
        custom={"compat": live_marker(job, "start-readme")}))
    await push("start", job["pushToStartToken"], {
        "aps": {"timestamp": int(datetime.now().timestamp()), "event": "start",
                "content-state": job["startState"], "attributes-type": job["attributesType"],
                "attributes": job["attributes"], "alert": {"title": "compat", "body": "your order"}},
        "compat": live_marker(job, "start")})
    await push("update", job["updateToken"], LiveActivityPayload(
        event=LiveActivityEvent.UPDATE, content_state=job["updateState"],
        custom={"compat": live_marker(job, "update")}))
    await push("end", job["endToken"], LiveActivityPayload(
        event=LiveActivityEvent.END, content_state=job["endState"],
        dismissal_date=datetime.now() + timedelta(hours=1),
        custom={"compat": live_marker(job, "end")}))


asyncio.run(main())
