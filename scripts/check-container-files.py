#!/usr/bin/env python3
"""The project's own rules for its container files, on top of what `docker compose config`
and hadolint check in general (scripts/test-containers runs all three).

    docker compose --profile cluster config --format json > compose.json   (with the
        compose variables set to the values given below)
    scripts/check-container-files.py --compose compose.json --serve-help serve.txt \\
        --device-help device.txt [--root .] [--admin-port N --cluster-admin-port N --image TAG]

compose.json is the compose model as docker compose resolved it (anchors merged, variables
filled in, long syntax). After checking the real files it checks broken copies of them and
fails unless each is caught, so a rule that stopped biting is noticed. Standard library only.
"""

import argparse
import copy
import json
import os
import re
import sys

APPLE_HOSTS = {"api.push.apple.com", "api.sandbox.push.apple.com", "api.development.push.apple.com"}
# Broadcast and channel-management names: on the single emulator (the cluster's HAProxy has no
# channel-management frontends yet).
BROADCAST_HOSTS = {
    "api-broadcast.push.apple.com", "api-broadcast.sandbox.push.apple.com",
    "api-manage-broadcast.push.apple.com", "api-manage-broadcast.sandbox.push.apple.com",
}
DEFAULT = {"apns-emulator", "device", "provider"}
INSTANCES = ["apns-emulator-1", "apns-emulator-2", "apns-emulator-3"]
CLUSTER = {"redis", *INSTANCES, "haproxy", "device-cluster", "provider-cluster"}
# Settings an instance has beyond the single emulator's: the shared store and its admin names.
INSTANCE_ONLY = {"APNS_EMULATOR_REDIS", "APNS_EMULATOR_ADMIN_ALLOWED_HOST"}
HEALTHCHECK = ["CMD", "apns-emulator", "readyz", "--admin", "127.0.0.1:8197"]
DOCKERFILES = ["Dockerfile", "examples/compose/redis/Dockerfile", "examples/compose/haproxy/Dockerfile",
               "examples/compose/provider/Dockerfile"]


def flag(args, name):
    """The value after `name` in an argument list, or None."""
    return args[args.index(name) + 1] if name in args[:-1] else None


def check_compose(model, serve_env, device_flags, expect):
    services = model["services"]
    problems = []
    fail = problems.append

    # Services: a plain `up` runs the three default ones; the cluster profile adds its seven.
    for name in DEFAULT | CLUSTER:
        if name not in services:
            fail(f"service '{name}' is missing")
    for name, service in services.items():
        profiles = service.get("profiles") or []
        if name in DEFAULT and profiles:
            fail(f"service '{name}': must not have a profile (a plain 'up' runs it)")
        if name not in DEFAULT and profiles != ["cluster"]:
            fail(f"service '{name}': needs profiles: [\"cluster\"]")
    if problems:
        return problems
    emulator = services["apns-emulator"]
    env = emulator.get("environment") or {}

    for name, service in services.items():
        # Ports on the host's loopback only; the two admin ports as the compose variables say.
        for port in service.get("ports") or []:
            if port.get("host_ip") != "127.0.0.1":
                fail(f"service '{name}': port {port.get('target')} is published beyond 127.0.0.1")
        # Only variables the emulator knows, wherever its image runs `serve`.
        command = service.get("command") or []
        if service.get("image") == expect.image and command[:1] == ["serve"]:
            for var in service.get("environment") or {}:
                if var.startswith("APNS_EMULATOR_") and var not in serve_env:
                    fail(f"service '{name}': {var} is not a variable of 'apns-emulator serve'")
            if service.get("healthcheck", {}).get("test") != HEALTHCHECK:
                fail(f"service '{name}': healthcheck must be {' '.join(HEALTHCHECK[1:])}")
        if service.get("image") == expect.image and command[:1] == ["device"]:
            for arg in command[1:]:
                if arg.startswith("--") and arg not in device_flags:
                    fail(f"service '{name}': {arg} is not an option of 'apns-emulator device'")
        # Mounts: the certificates are written by the single emulator only, read by the rest;
        # bind mounts come from the repository, read-only.
        for volume in service.get("volumes") or []:
            writes_certs = name == "apns-emulator" and volume["target"] == env.get("APNS_EMULATOR_CERTS_DIR")
            if volume.get("source") == "certs" and not writes_certs and not volume.get("read_only"):
                fail(f"service '{name}': mount the certs volume read-only")
            if volume["type"] == "bind" and not (volume.get("read_only") and os.path.exists(volume["source"])):
                fail(f"service '{name}': bind mount {volume['source']} must exist and be read-only")
        context = (service.get("build") or {}).get("context")
        if context and not os.path.isdir(context):
            fail(f"service '{name}': build context {context} does not exist")

    def published(name):
        return [p.get("published") for p in services[name].get("ports") or []]

    if published("apns-emulator") != [expect.admin_port]:
        fail(f"service 'apns-emulator': publish 8197 on APNS_EMULATOR_ADMIN_PORT ({expect.admin_port}), not {published('apns-emulator')}")
    if published("haproxy") != [expect.cluster_admin_port]:
        fail(f"service 'haproxy': publish 8197 on APNS_EMULATOR_CLUSTER_ADMIN_PORT ({expect.cluster_admin_port})")
    for name in ["apns-emulator", "device", *INSTANCES, "device-cluster"]:
        if services[name].get("image") != expect.image:
            fail(f"service '{name}': must run the emulator's image (APNS_EMULATOR_IMAGE)")

    # Apple's names: on the single emulator in "apns", on HAProxy in "apns-cluster", once each.
    holders = {}
    for name, service in services.items():
        for network, settings in (service.get("networks") or {}).items():
            for alias in (settings or {}).get("aliases") or []:
                holders.setdefault((network, alias), []).append(name)
    for network, holder in (("apns", "apns-emulator"), ("apns-cluster", "haproxy")):
        for host in sorted(APPLE_HOSTS):
            if holders.get((network, host)) != [holder]:
                fail(f"network '{network}': {host} must be an alias of {holder} alone, not {holders.get((network, host))}")
    for host in sorted(BROADCAST_HOSTS):
        if holders.get(("apns", host)) != ["apns-emulator"]:
            fail(f"network 'apns': {host} must be an alias of apns-emulator alone, not {holders.get(('apns', host))}")

    # The single emulator: Apple's ports for providers, admin API and devices reachable in the network.
    listens = set(env.get("APNS_EMULATOR_LISTEN", "").split())
    if not {"0.0.0.0:443", "0.0.0.0:2197"} <= listens:
        fail("service 'apns-emulator': APNS_EMULATOR_LISTEN must include 0.0.0.0:443 and 0.0.0.0:2197")
    if env.get("APNS_EMULATOR_ADMIN_LISTEN") != "0.0.0.0:8197" or env.get("APNS_EMULATOR_DEVICE_LISTEN") != "0.0.0.0:5223":
        fail("service 'apns-emulator': the admin API on 0.0.0.0:8197 and devices on 0.0.0.0:5223")
    if not env.get("APNS_EMULATOR_ADMIN_TOKEN") and env.get("APNS_EMULATOR_ADMIN_INSECURE") != "true":
        fail("service 'apns-emulator': an admin API on all interfaces needs APNS_EMULATOR_ADMIN_TOKEN or _INSECURE=true")
    if "apns-emulator" not in env.get("APNS_EMULATOR_ADMIN_ALLOWED_HOST", "").split():
        fail("service 'apns-emulator': APNS_EMULATOR_ADMIN_ALLOWED_HOST must allow apns-emulator (the provider's name for it)")

    # Devices and providers find the emulator (or HAProxy) and one another.
    for device, provider, target in (("device", "provider", "apns-emulator"), ("device-cluster", "provider-cluster", "haproxy")):
        args = services[device].get("command") or []
        penv = services[provider].get("environment") or {}
        if flag(args, "--connect") != f"{target}:5223":
            fail(f"service '{device}': --connect must be {target}:5223")
        if penv.get("DEVICE_ID") != flag(args, "--device-id"):
            fail(f"service '{provider}': DEVICE_ID must be {device}'s --device-id")
        if penv.get("EMULATOR_ADMIN_URL") != f"http://{target}:8197":
            fail(f"service '{provider}': EMULATOR_ADMIN_URL must be http://{target}:8197")
        certs = [v["target"] for v in services[provider].get("volumes") or [] if v.get("source") == "certs"]
        if [penv.get("SSL_CERT_FILE")] != [t + "/ca.pem" for t in certs]:
            fail(f"service '{provider}': SSL_CERT_FILE must be ca.pem of the certs volume")

    # The instances: configured as the single emulator, on one Redis, joining after the first.
    for name in INSTANCES:
        ienv = services[name].get("environment") or {}
        if ienv.get("APNS_EMULATOR_REDIS") != "redis://redis:6379/0":
            fail(f"service '{name}': APNS_EMULATOR_REDIS must be redis://redis:6379/0")
        differ = sorted(k for k in set(env) | set(ienv) if env.get(k) != ienv.get(k) and k not in INSTANCE_ONLY)
        if differ:
            fail(f"service '{name}': configured unlike the single emulator ({', '.join(differ)})")
        waits = {k for k, v in (services[name].get("depends_on") or {}).items() if v.get("condition") == "service_healthy"}
        wanted = {"apns-emulator", "redis"} if name == INSTANCES[0] else {INSTANCES[0]}
        if waits != wanted:
            fail(f"service '{name}': must wait for {', '.join(sorted(wanted))} to be healthy")
    return problems


def check_files(texts):
    problems = []
    fail = problems.append
    for path in DOCKERFILES:
        text = texts[path]
        # Base images are build arguments, so the test builds from local images without a registry.
        stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I)
        for image in re.findall(r"^FROM\s+(\S+)", text, re.M | re.I):
            if not re.fullmatch(r"\$\{?[A-Z_]+\}?", image) and image not in stages:
                fail(f"{path}: FROM {image}: the base image must be a build ARG")
        # Packages installed only when missing, so local images need no mirror.
        if "apt-get install" in text and "dpkg-query" not in text:
            fail(f"{path}: installs packages without checking first (dpkg-query) what is missing")
    if "swift build -c release --static-swift-stdlib --product apns-emulator" not in texts["Dockerfile"]:
        fail("Dockerfile: the builder must run swift build -c release --static-swift-stdlib --product apns-emulator")
    if not re.search(r"^(\*\*/|/)?\.build/?$", texts[".dockerignore"], re.M):
        fail(".dockerignore must leave out .build")
    # HAProxy: TCP mode, every frontend's backend has all three instances on its port.
    cfg = texts["examples/compose/haproxy/haproxy.cfg"]
    if not re.search(r"^\s+mode tcp\b", cfg, re.M):
        fail("haproxy.cfg: must run in mode tcp (TLS passes through to the instances)")
    for port in (443, 2197, 5223, 8197):
        servers = re.findall(rf"^\s+server \S+ (apns-emulator-\d):{port}\b", cfg, re.M)
        if not re.search(rf"^\s+bind :{port}\b", cfg, re.M) or sorted(servers) != INSTANCES:
            fail(f"haproxy.cfg: port {port} must reach {', '.join(INSTANCES)} on {port}")
    for line in texts["examples/compose/provider/requirements.txt"].splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.]+", line):
            fail(f"examples/compose/provider/requirements.txt: {line} is not pinned (name==version)")
    return problems


def broken_copies(model, texts):
    """(what, model, texts) copies each of which some rule must reject."""
    def compose(what, change):
        broken = copy.deepcopy(model)
        change(broken["services"])
        return what, broken, texts

    def text(what, path, old, new):
        assert old in texts[path], f"self-test '{what}': '{old}' is not in {path} (update the self-test)"
        return what, model, {**texts, path: texts[path].replace(old, new, 1)}

    return [
        compose("admin port on all interfaces", lambda s: s["apns-emulator"]["ports"][0].update(host_ip="")),
        compose("an unknown emulator variable", lambda s: s["apns-emulator"]["environment"].update(APNS_EMULATOR_ADMIN_LISTENER="x")),
        compose("an Apple host name dropped", lambda s: s["apns-emulator"]["networks"]["apns"]["aliases"].pop()),
        compose("no listener on 443", lambda s: s["apns-emulator"]["environment"].update(APNS_EMULATOR_LISTEN="0.0.0.0:2197")),
        compose("the admin API open without a token", lambda s: s["apns-emulator"]["environment"].pop("APNS_EMULATOR_ADMIN_INSECURE")),
        compose("the certs volume writable by a provider", lambda s: s["provider"]["volumes"][1].pop("read_only")),
        compose("the device on another port", lambda s: s["device"]["command"].__setitem__(2, "apns-emulator:5224")),
        compose("a device flag the binary lacks", lambda s: s["device"]["command"].append("--no-such-flag")),
        compose("healthcheck dropped", lambda s: s["apns-emulator"].pop("healthcheck")),
        compose("redis without the cluster profile", lambda s: s["redis"].pop("profiles")),
        compose("an instance on another Redis", lambda s: s["apns-emulator-2"]["environment"].update(APNS_EMULATOR_REDIS="redis://x:6379/0")),
        compose("an instance configured differently", lambda s: s["apns-emulator-3"]["environment"].update(APNS_EMULATOR_APP="T:com.other")),
        compose("the second instance not after the first", lambda s: s["apns-emulator-2"]["depends_on"]["apns-emulator-1"].update(condition="service_started")),
        compose("Apple's names on HAProxy in the single emulator's network", lambda s: s["haproxy"]["networks"].update(apns=s["haproxy"]["networks"]["apns-cluster"])),
        text("a hard-coded base image", "Dockerfile", "FROM ${SWIFT_IMAGE}", "FROM swift:6.3-bookworm"),
        text("not a static stdlib build", "Dockerfile", "--static-swift-stdlib --product", "--product"),
        text("redis-server installed unconditionally", "examples/compose/redis/Dockerfile", "dpkg-query", "true"),
        text(".build not ignored", ".dockerignore", ".build/\n**/.build/\n", "\n"),
        text("haproxy in HTTP mode", "examples/compose/haproxy/haproxy.cfg", "  mode tcp", "  mode http"),
        text("an instance missing behind HAProxy", "examples/compose/haproxy/haproxy.cfg", "  server apns-emulator-3 apns-emulator-3:443\n", ""),
        text("an unpinned provider library", "examples/compose/provider/requirements.txt", "aioapns==4.0", "aioapns>=4.0"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compose", required=True, help="docker compose --profile cluster config --format json")
    parser.add_argument("--serve-help", required=True, help="the output of 'apns-emulator serve --help'")
    parser.add_argument("--device-help", required=True, help="the output of 'apns-emulator device --help'")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--admin-port", default="8197", help="the APNS_EMULATOR_ADMIN_PORT compose was given")
    parser.add_argument("--cluster-admin-port", default="8198", help="the APNS_EMULATOR_CLUSTER_ADMIN_PORT compose was given")
    parser.add_argument("--image", default="apns-emulator:local", help="the APNS_EMULATOR_IMAGE compose was given")
    parser.add_argument("--no-self-test", action="store_true")
    expect = parser.parse_args()

    with open(expect.compose) as f:
        model = json.load(f)
    serve_env = set(re.findall(r"\benv: (APNS_EMULATOR_[A-Z0-9_]+)", open(expect.serve_help).read()))
    device_flags = set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", open(expect.device_help).read(), re.M))
    if not serve_env or not device_flags:
        sys.exit("check-container-files: no variables or flags found in the --help texts")
    texts = {}
    for path in DOCKERFILES + [".dockerignore", "examples/compose/haproxy/haproxy.cfg", "examples/compose/provider/requirements.txt"]:
        with open(os.path.join(expect.root, path)) as f:
            texts[path] = f.read()

    def check(model, texts):
        return check_compose(model, serve_env, device_flags, expect) + check_files(texts)

    problems = check(model, texts)
    copies = [] if expect.no_self_test or problems else broken_copies(model, texts)
    problems += [f"self-test: '{what}' was not caught" for what, m, t in copies if not check(m, t)]
    for problem in problems:
        print(f"container files: FAIL {problem}")
    if problems:
        return 1
    print(f"container files: ok ({len(model['services'])} services, {len(DOCKERFILES)} Dockerfiles, haproxy.cfg; "
          f"{len(serve_env)} variables from serve --help, {len(device_flags)} flags from device --help"
          + (f"; {len(copies)} broken copies all caught)" if copies else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
