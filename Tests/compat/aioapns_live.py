"""aioapns 4.0's Live Activity support: PushType.LIVEACTIVITY and a per-request apns_topic
(the client's topic, given at construction, is the bundle id). The payload is a plain dict;
aioapns has no Live Activity payload helper. Host and trust as in aioapns_provider.py.

The cases (run.py, LIVE_PLAN): plain-topic, an update with push_type LIVEACTIVITY and no
apns_topic (so the client's bundle-id topic); start, to the push-to-start token; update and
end, to the update tokens of two activities the app started."""
import asyncio
import time

from aioapns import APNs, NotificationRequest, PushType

from compat_job import describe, live_marker, load_job, report

job = load_job()
TIMEOUT = job["timeoutSeconds"]
LIVE_TOPIC = f"{job['topic']}.push-type.liveactivity"


async def push(client, case, token, aps, topic=LIVE_TOPIC):
    request = NotificationRequest(device_token=token, push_type=PushType.LIVEACTIVITY, apns_topic=topic,
                                  message={"aps": {"timestamp": int(time.time()), **aps},
                                           "compat": live_marker(job, case)})
    try:
        result = await asyncio.wait_for(client.send_notification(request), TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - anything the library raises is a result
        report(case, None, error=describe(exc))
        return
    report(case, None, status=int(result.status), reason=result.description, apns_id=result.notification_id)


async def main():
    client = APNs(key=open(job["keyPath"]).read(), key_id=job["keyId"], team_id=job["teamId"],
                  topic=job["topic"], use_sandbox=True)
    update = {"event": "update", "content-state": job["updateState"]}
    await push(client, "plain-topic", job["updateToken"], update, topic=None)
    await push(client, "start", job["pushToStartToken"], {
        "event": "start", "content-state": job["startState"], "attributes-type": job["attributesType"],
        "attributes": job["attributes"], "alert": {"title": "compat", "body": "your order"}})
    await push(client, "update", job["updateToken"], update)
    await push(client, "end", job["endToken"], {
        "event": "end", "content-state": job["endState"], "dismissal-date": int(time.time()) + 3600})


asyncio.run(main())
