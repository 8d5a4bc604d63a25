#!/usr/bin/env python3
"""Static contract check of Dockerfile, .dockerignore, docker-compose.yml (with its "cluster"
profile: Redis, three emulator instances, HAProxy) and the files under examples/compose/
(run by scripts/test-containers; usable on its own).

    scripts/test-containers-static.py --root . --serve-help serve.txt --device-help device.txt

--serve-help / --device-help are the outputs of `apns-emulator serve --help` and
`apns-emulator device --help`; without them the option table of docs/configuration.md stands in for
serve's environment variables and the device flags are not checked. After checking the real
files it checks a set of deliberately broken copies and fails unless each is rejected, so a
check that has stopped biting is noticed. Needs PyYAML (Debian: python3-yaml).
"""

import argparse
import json
import os
import re
import shlex
import sys

try:
    import yaml
except ImportError:  # pragma: no cover - environment problem, reported plainly
    sys.exit("test-containers-static: PyYAML is missing (apt-get install python3-yaml, or pip install pyyaml)")

APPLE_HOSTS = ["api.push.apple.com", "api.sandbox.push.apple.com", "api.development.push.apple.com"]
EMULATOR, DEVICE, PROVIDER = "apns-emulator", "device", "provider"
ADMIN_PORT, DEVICE_PORT = 8197, 5223
PROVIDER_PORTS = {443, 2197}
# Profile "cluster": instances sharing their state through Redis, behind HAProxy.
CLUSTER = "cluster"
DEFAULT_SERVICES = {EMULATOR, DEVICE, PROVIDER}
INSTANCES = ["apns-emulator-1", "apns-emulator-2", "apns-emulator-3"]
REDIS, HAPROXY, CLUSTER_DEVICE, CLUSTER_PROVIDER = "redis", "haproxy", "device-cluster", "provider-cluster"
REDIS_PORT = 6379
# Settings an instance may have other than the single emulator: the shared store, and the
# names its admin API is called by.
INSTANCE_ONLY_ENV = {"APNS_EMULATOR_REDIS", "APNS_EMULATOR_REDIS_PREFIX", "APNS_EMULATOR_ADMIN_ALLOWED_HOST"}


# ---------------------------------------------------------------------------- inputs

class Files:
    """Texts of the files under check (kept as strings so the self-test can break copies)."""

    def __init__(self, root):
        self.root = root
        self.texts = {}
        for name in ["docker-compose.yml", "Dockerfile", ".dockerignore"]:
            self.texts[name] = read(os.path.join(root, name))

    def context_file(self, context, name):
        key = os.path.normpath(f"{context}/{name}")
        if key not in self.texts:
            self.texts[key] = read(os.path.join(self.root, key))
        return self.texts[key]

    provider_file = context_file

    def copy(self):
        other = Files.__new__(Files)
        other.root, other.texts = self.root, dict(self.texts)
        return other


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def help_env_names(text):
    return set(re.findall(r"\benv: (APNS_EMULATOR_[A-Z0-9_]+)", text or ""))


def help_flags(text):
    return set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", text or "", re.M))


def documented_env_names(root):
    text = read(os.path.join(root, "docs", "configuration.md")) or ""
    return set(re.findall(r"^\| `--[^`]+` \| `(APNS_EMULATOR_[A-Z0-9_]+)`", text, re.M))


# ---------------------------------------------------------------------------- helpers

def host_port(value):
    match = re.fullmatch(r"\[?([^\]]*?)\]?:(\d+)", str(value).strip())
    return (match.group(1), int(match.group(2))) if match else (None, None)


def env_map(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        out = {}
        for item in env:
            name, _, value = str(item).partition("=")
            out[name] = value
        return out
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def volume_entries(service):
    """(source, target, read_only) for short and long volume syntax."""
    out = []
    for item in service.get("volumes") or []:
        if isinstance(item, dict):
            out.append((str(item.get("source", "")), str(item.get("target", "")), bool(item.get("read_only"))))
            continue
        parts = str(item).split(":")
        if len(parts) == 1:
            out.append(("", parts[0], False))
        else:
            options = parts[2].split(",") if len(parts) > 2 else []
            out.append((parts[0], parts[1], "ro" in options))
    return out


def command_list(service):
    command = service.get("command")
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def flag_value(args, flag):
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def published_ports(service):
    """(host_ip, host_port_text, container_port) per published port."""
    out = []
    for item in service.get("ports") or []:
        if isinstance(item, dict):
            out.append((str(item.get("host_ip", "")), str(item.get("published", "")), str(item.get("target", ""))))
            continue
        text = str(item)
        # Split on ':' outside ${...} so "127.0.0.1:${X:-8197}:8197" stays three parts.
        parts, depth, current = [], 0, ""
        for ch in text:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == ":" and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += ch
        parts.append(current)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2].split("/")[0]))
        elif len(parts) == 2:
            out.append(("", parts[0], parts[1].split("/")[0]))
        else:
            out.append(("", "", parts[0].split("/")[0]))
    return out


# ---------------------------------------------------------------------------- compose

def check_compose(files, serve_env, device_flags, problems):
    fail = problems.append
    try:
        doc = yaml.safe_load(files.texts["docker-compose.yml"] or "")
    except yaml.YAMLError as error:
        fail(f"docker-compose.yml does not parse: {error}")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        fail("docker-compose.yml: no 'services' mapping")
        return
    services = doc["services"]
    for name in (EMULATOR, DEVICE, PROVIDER):
        if not isinstance(services.get(name), dict):
            fail(f"docker-compose.yml: service '{name}' is missing")
    if problems:
        return
    emulator, device, provider = services[EMULATOR], services[DEVICE], services[PROVIDER]

    # Networks: declared explicitly; every service on declared ones only, never 'default'.
    declared = doc.get("networks") or {}
    if not isinstance(declared, dict) or not declared:
        fail("docker-compose.yml: no top-level 'networks' declared")
        declared = {}
    for name, service in services.items():
        nets = service.get("networks")
        names = list(nets) if isinstance(nets, (list, dict)) else []
        if not names:
            fail(f"service '{name}': must join the declared network explicitly ('networks:')")
        for net in names:
            if net == "default":
                fail(f"service '{name}': uses the implicit 'default' network; declare one")
            elif net not in declared:
                fail(f"service '{name}': network '{net}' is not declared at top level")
        if service.get("network_mode"):
            fail(f"service '{name}': network_mode bypasses the declared network")
    nets = emulator.get("networks")
    aliases = set()
    if isinstance(nets, dict):
        for value in nets.values():
            if isinstance(value, dict):
                aliases.update(value.get("aliases") or [])
    for host in APPLE_HOSTS:
        if host not in aliases:
            fail(f"service '{EMULATOR}': network alias {host} is missing")
    shared = set(nets or []) & set(device.get("networks") or []) & set(provider.get("networks") or [])
    if not shared:
        fail("the three services share no network")

    # Published ports: loopback only; the admin port published with an overridable host port.
    for name, service in services.items():
        for host_ip, host_port_text, container_port in published_ports(service):
            if host_ip != "127.0.0.1":
                fail(f"service '{name}': port {container_port} is published on "
                     f"{host_ip or 'all interfaces'}; publish on 127.0.0.1 only")
    admin = [p for p in published_ports(emulator) if p[2] == str(ADMIN_PORT)]
    if not admin:
        fail(f"service '{EMULATOR}': admin port {ADMIN_PORT} is not published")
    elif not re.search(r"\$\{APNS_EMULATOR_ADMIN_PORT:-\d+\}", admin[0][1]):
        fail(f"service '{EMULATOR}': the admin host port should be overridable "
             "(${APNS_EMULATOR_ADMIN_PORT:-8197})")

    # Health check: readyz against the admin listener inside the container.
    health = emulator.get("healthcheck") or {}
    test = health.get("test")
    test = shlex.split(test) if isinstance(test, str) else [str(t) for t in (test or [])]
    if health.get("disable") or not test or test[0] == "NONE":
        fail(f"service '{EMULATOR}': healthcheck is missing")
    elif "readyz" not in test or flag_value(test, "--admin") != f"127.0.0.1:{ADMIN_PORT}":
        fail(f"service '{EMULATOR}': healthcheck must run 'apns-emulator readyz --admin 127.0.0.1:{ADMIN_PORT}'")

    # Environment: only variables the emulator knows; listeners reachable in the network.
    env = env_map(emulator)
    for name in env:
        if name.startswith("APNS_EMULATOR_") and name not in serve_env:
            fail(f"service '{EMULATOR}': {name} is not an environment variable of 'apns-emulator serve'")
    if env.get("APNS_EMULATOR_ADMIN_LISTEN") != f"0.0.0.0:{ADMIN_PORT}":
        fail(f"service '{EMULATOR}': APNS_EMULATOR_ADMIN_LISTEN must be 0.0.0.0:{ADMIN_PORT} to be published")
    # An admin API on all interfaces needs a token, or says the exposure is meant; and the
    # name the provider uses for it has to be allowed (protection against DNS rebinding).
    if "APNS_EMULATOR_ADMIN_INSECURE" in serve_env and not env.get("APNS_EMULATOR_ADMIN_TOKEN") \
            and env.get("APNS_EMULATOR_ADMIN_INSECURE", "").lower() not in ("true", "1"):
        fail(f"service '{EMULATOR}': the admin API listens on all interfaces without a token; set "
             "APNS_EMULATOR_ADMIN_TOKEN, or APNS_EMULATOR_ADMIN_INSECURE=true (the emulator refuses to start otherwise)")
    if "APNS_EMULATOR_ADMIN_ALLOWED_HOST" in serve_env:
        allowed = env.get("APNS_EMULATOR_ADMIN_ALLOWED_HOST", "").lower().split()
        if EMULATOR not in allowed:
            fail(f"service '{EMULATOR}': APNS_EMULATOR_ADMIN_ALLOWED_HOST must include {EMULATOR} "
                 f"(the provider calls http://{EMULATOR}:{ADMIN_PORT}; other names get 403)")
    if env.get("APNS_EMULATOR_DEVICE_LISTEN") != f"0.0.0.0:{DEVICE_PORT}":
        fail(f"service '{EMULATOR}': APNS_EMULATOR_DEVICE_LISTEN must be 0.0.0.0:{DEVICE_PORT}")
    if "APNS_EMULATOR_LISTEN" in serve_env and "APNS_EMULATOR_LISTEN" not in env:
        fail(f"service '{EMULATOR}': the emulator has --listen; use APNS_EMULATOR_LISTEN for 443/2197")
    # What the container really binds: the image's ENV defaults, overridden by compose.
    effective = dict(image_env(files))
    effective.update(env)
    listens = effective.get("APNS_EMULATOR_LISTEN", "").split()
    listens += [effective[k] for k in ("APNS_EMULATOR_SANDBOX_LISTEN", "APNS_EMULATOR_PRODUCTION_LISTEN",
                                       "APNS_EMULATOR_H2C_SANDBOX_LISTEN", "APNS_EMULATOR_H2C_PRODUCTION_LISTEN",
                                       "APNS_EMULATOR_ADMIN_LISTEN", "APNS_EMULATOR_DEVICE_LISTEN")
                if effective.get(k) and effective[k] != "off"]
    ports = [host_port(v)[1] for v in listens]
    for port in sorted({p for p in ports if ports.count(p) > 1}):
        fail(f"service '{EMULATOR}': two listeners on port {port} (image defaults included)")
    bound = {host_port(v) for v in effective.get("APNS_EMULATOR_LISTEN", "").split()}
    if "APNS_EMULATOR_LISTEN" not in serve_env:  # before --listen: per-environment listeners
        bound |= {host_port(effective[k]) for k in ("APNS_EMULATOR_SANDBOX_LISTEN", "APNS_EMULATOR_PRODUCTION_LISTEN")
                  if effective.get(k) and effective[k] != "off"}
    for port in sorted(PROVIDER_PORTS):
        if ("0.0.0.0", port) not in bound:
            fail(f"service '{EMULATOR}': no TLS provider listener on 0.0.0.0:{port}")

    # Certificates: generated into a named volume; providers mount it read-only and trust ca.pem.
    declared_volumes = doc.get("volumes") or {}
    certs_dir = env.get("APNS_EMULATOR_CERTS_DIR")
    certs_volume = None
    if not certs_dir:
        fail(f"service '{EMULATOR}': APNS_EMULATOR_CERTS_DIR is not set")
    else:
        for source, target, read_only in volume_entries(emulator):
            if target.rstrip("/") == certs_dir.rstrip("/"):
                certs_volume = source
                if read_only:
                    fail(f"service '{EMULATOR}': the certs volume must be writable (certificates are generated into it)")
        if not certs_volume or "/" in certs_volume or certs_volume.startswith("."):
            fail(f"service '{EMULATOR}': a named volume must be mounted at {certs_dir}")
        elif certs_volume not in declared_volumes:
            fail(f"volume '{certs_volume}' is not declared at top level")
    provider_env = env_map(provider)
    if certs_volume:
        mounts = [(t, ro) for s, t, ro in volume_entries(provider) if s == certs_volume]
        if not mounts:
            fail(f"service '{PROVIDER}': does not mount the certs volume '{certs_volume}'")
        for target, read_only in mounts:
            if not read_only:
                fail(f"service '{PROVIDER}': the certs volume must be mounted read-only")
            if provider_env.get("SSL_CERT_FILE") != target.rstrip("/") + "/ca.pem":
                fail(f"service '{PROVIDER}': SSL_CERT_FILE must be {target.rstrip('/')}/ca.pem")

    # Config and keys: a read-only bind mount of a repository directory.
    config_mounts = {}
    for source, target, read_only in volume_entries(emulator):
        if source.startswith((".", "/")):
            config_mounts[target.rstrip("/")] = source
            if not read_only:
                fail(f"service '{EMULATOR}': bind mount {source} must be read-only")
    if not config_mounts:
        fail(f"service '{EMULATOR}': no read-only config/keys directory mounted")

    def host_path(path):
        for target, source in config_mounts.items():
            if path.startswith(target + "/"):
                return os.path.join(files.root, source, path[len(target) + 1:])
        return None

    team = bundle = key_id = None
    auth_key = env.get("APNS_EMULATOR_AUTH_KEY", "").split()
    if not auth_key:
        fail(f"service '{EMULATOR}': APNS_EMULATOR_AUTH_KEY is not set (compose up would run in demo mode)")
    for entry in auth_key:
        match = re.fullmatch(r"([A-Z0-9]{10}):([A-Z0-9]{10}):([^?]+)(\?.*)?", entry)
        if not match:
            fail(f"service '{EMULATOR}': APNS_EMULATOR_AUTH_KEY '{entry}' is not TEAMID:KEYID:PATH")
            continue
        team, key_id, path = match.group(1), match.group(2), match.group(3)
        local = host_path(path)
        text = read(local) if local else None
        if local is None:
            fail(f"service '{EMULATOR}': key {path} is not inside a mounted config directory")
        elif not text or not re.search(r"-----BEGIN (EC )?(PRIVATE|PUBLIC) KEY-----", text):
            fail(f"key file {os.path.relpath(local, files.root)} is missing or not a PEM key")
    apps = env.get("APNS_EMULATOR_APP", "").split()
    for entry in apps:
        app_team, _, bundle = entry.partition(":")
        if team and app_team != team:
            fail(f"service '{EMULATOR}': APNS_EMULATOR_APP team {app_team} is not the key's team {team}")
    if not apps:
        fail(f"service '{EMULATOR}': APNS_EMULATOR_APP is not set")
    config_path = env.get("APNS_EMULATOR_CONFIG")
    if config_path:
        local = host_path(config_path)
        try:
            json.loads(read(local) if local else "")
        except (TypeError, ValueError):
            fail(f"service '{EMULATOR}': APNS_EMULATOR_CONFIG {config_path} is not a JSON file in a mounted directory")

    # Build: the repository's Dockerfile; the device runs the same image.
    build = emulator.get("build")
    build = {"context": build} if isinstance(build, str) else (build or {})
    if build.get("context") not in (".", "./") or build.get("dockerfile", "Dockerfile") != "Dockerfile":
        fail(f"service '{EMULATOR}': must be built from ./Dockerfile")
    if device.get("image") != emulator.get("image"):
        fail(f"service '{DEVICE}': must run the emulator's image")

    # Device: the device command against the device listener, the configured app.
    args = command_list(device)
    if not args or args[0] != "device":
        fail(f"service '{DEVICE}': command must be 'device …'")
    else:
        if device_flags:
            for arg in args[1:]:
                if arg.startswith("--") and arg.split("=")[0] not in device_flags:
                    fail(f"service '{DEVICE}': {arg} is not an option of 'apns-emulator device'")
        if host_port(flag_value(args, "--connect") or "") != (EMULATOR, DEVICE_PORT):
            fail(f"service '{DEVICE}': --connect must be {EMULATOR}:{DEVICE_PORT}")
        if bundle and flag_value(args, "--bundle") != bundle:
            fail(f"service '{DEVICE}': --bundle must be the configured app {bundle}")
        if flag_value(args, "--environment") != "sandbox":
            fail(f"service '{DEVICE}': --environment must be sandbox")
        if not flag_value(args, "--device-id"):
            fail(f"service '{DEVICE}': --device-id is missing")
    for name, service in ((DEVICE, device), (PROVIDER, provider)):
        if EMULATOR not in (service.get("depends_on") or {}):
            fail(f"service '{name}': must depend on {EMULATOR}")

    # Provider: its own build context; talks to the same device, key and app.
    pbuild = provider.get("build")
    pbuild = {"context": pbuild} if isinstance(pbuild, str) else (pbuild or {})
    context = str(pbuild.get("context", "")).rstrip("/")
    if not context or not os.path.isdir(os.path.join(files.root, context)):
        fail(f"service '{PROVIDER}': build context '{context}' does not exist")
    else:
        check_provider_context(files, context, problems)
    if provider_env.get("DEVICE_ID") != flag_value(args, "--device-id"):
        fail(f"service '{PROVIDER}': DEVICE_ID must be the device's --device-id")
    if bundle and provider_env.get("APNS_TOPIC") != bundle:
        fail(f"service '{PROVIDER}': APNS_TOPIC must be {bundle}")
    if team and (provider_env.get("APNS_TEAM_ID"), provider_env.get("APNS_KEY_ID")) != (team, key_id):
        fail(f"service '{PROVIDER}': APNS_TEAM_ID/APNS_KEY_ID must match APNS_EMULATOR_AUTH_KEY")
    admin_url = provider_env.get("EMULATOR_ADMIN_URL", "")
    if admin_url.rstrip("/") != f"http://{EMULATOR}:{ADMIN_PORT}":
        fail(f"service '{PROVIDER}': EMULATOR_ADMIN_URL must be http://{EMULATOR}:{ADMIN_PORT}")
    if not any(s.startswith((".", "/")) and ro for s, _, ro in volume_entries(provider)):
        fail(f"service '{PROVIDER}': mount the key directory read-only")

    check_cluster(files, doc, serve_env, device_flags, certs_volume, bundle, problems)


# ---------------------------------------------------------------------------- profile "cluster"

def service_networks(service):
    nets = service.get("networks")
    return set(nets) if isinstance(nets, (list, dict)) else set()


def service_aliases(service):
    """{network: set(aliases)}"""
    nets = service.get("networks")
    out = {}
    if isinstance(nets, dict):
        for net, value in nets.items():
            out[net] = set((value or {}).get("aliases") or []) if isinstance(value, dict) else set()
    return out


def depends(service):
    """{dependency: condition}"""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(d): "service_started" for d in deps}
    return {str(k): str((v or {}).get("condition", "service_started")) for k, v in deps.items()}


def healthy_ancestors(services, name):
    """Services that `name` waits for as healthy, directly or through others it waits for."""
    seen, todo = set(), [name]
    while todo:
        for dep, condition in depends(services.get(todo.pop()) or {}).items():
            if condition == "service_healthy" and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def haproxy_sections(text):
    """[(kind, name, [lines])] of an haproxy.cfg, comments dropped."""
    sections = []
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            kind, _, name = line.strip().partition(" ")
            sections.append((kind, name.strip(), []))
        elif sections:
            sections[-1][2].append(line.strip())
    return sections


def check_cluster(files, doc, serve_env, device_flags, certs_volume, bundle, problems):
    fail = problems.append
    services = doc["services"]
    emulator = services[EMULATOR]

    # A plain `up` is unchanged: only the three default services lack a profile.
    for name, service in services.items():
        profiles = service.get("profiles") or []
        if name in DEFAULT_SERVICES:
            if profiles:
                fail(f"service '{name}': must not have a profile (plain 'up' runs it)")
        elif CLUSTER not in profiles:
            fail(f"service '{name}': needs profiles: [\"{CLUSTER}\"] (a plain 'up' would start it)")
    for name in [REDIS, *INSTANCES, HAPROXY]:
        if not isinstance(services.get(name), dict):
            fail(f"docker-compose.yml: service '{name}' of the {CLUSTER} profile is missing")
    if problems:
        return

    # One host name, one service: an alias held by two services on the same network would
    # send a provider to either at random.
    holders = {}
    for name, service in services.items():
        for net, aliases in service_aliases(service).items():
            for alias in aliases:
                holders.setdefault((net, alias), []).append(name)
    for (net, alias), names in sorted(holders.items()):
        if len(names) > 1:
            fail(f"network '{net}': alias {alias} is held by {', '.join(names)}")

    if "APNS_EMULATOR_REDIS" not in serve_env:
        fail("the emulator has no --redis / APNS_EMULATOR_REDIS (needed by the cluster instances)")
    emulator_env = env_map(emulator)
    config_mounts = {(s, t.rstrip("/")) for s, t, ro in volume_entries(emulator) if s.startswith((".", "/"))}
    certs_dir = (emulator_env.get("APNS_EMULATOR_CERTS_DIR") or "").rstrip("/")
    instance_envs = []
    for name in INSTANCES:
        service = services[name]
        env = env_map(service)
        instance_envs.append(env)
        if service.get("image") != emulator.get("image"):
            fail(f"service '{name}': must run the emulator's image")
        args = command_list(service)
        if args and args[0] != "serve":
            fail(f"service '{name}': command must be 'serve'")
        for var in env:
            if var.startswith("APNS_EMULATOR_") and var not in serve_env:
                fail(f"service '{name}': {var} is not an environment variable of 'apns-emulator serve'")
        match = re.fullmatch(r"redis://(?::[^@]*@)?([^:/]+)(?::(\d+))?(?:/\d+)?", env.get("APNS_EMULATOR_REDIS", ""))
        if not match or match.group(1) != REDIS or int(match.group(2) or REDIS_PORT) != REDIS_PORT:
            fail(f"service '{name}': APNS_EMULATOR_REDIS must be redis://{REDIS}:{REDIS_PORT}/0 (the {REDIS} service)")
        # Every instance configured as the single emulator is (keys, apps, config file, listeners).
        for var in sorted(set(env) | set(emulator_env)):
            if var in INSTANCE_ONLY_ENV:
                continue
            if env.get(var) != emulator_env.get(var):
                fail(f"service '{name}': {var} differs from {EMULATOR}'s ({env.get(var)!r} vs {emulator_env.get(var)!r}); "
                     "every instance needs the same configuration")
        allowed = env.get("APNS_EMULATOR_ADMIN_ALLOWED_HOST", "").lower().split()
        if HAPROXY not in allowed:
            fail(f"service '{name}': APNS_EMULATOR_ADMIN_ALLOWED_HOST must include {HAPROXY} (its admin frontend)")
        mounts = volume_entries(service)
        for source, target in config_mounts:
            if not any(s == source and t.rstrip("/") == target and ro for s, t, ro in mounts):
                fail(f"service '{name}': must mount {source} read-only at {target}, as {EMULATOR} does")
        certs = [(t, ro) for s, t, ro in mounts if s == certs_volume]
        if certs_volume and not any(t.rstrip("/") == certs_dir for t, _ in certs):
            fail(f"service '{name}': must mount the certs volume '{certs_volume}' at {certs_dir} (one CA for all)")
        if any(not ro for _, ro in certs):
            fail(f"service '{name}': the certs volume must be read-only here ({EMULATOR} writes it; "
                 "an instance started too early would write a second CA)")
        test = (service.get("healthcheck") or {}).get("test")
        test = shlex.split(test) if isinstance(test, str) else [str(x) for x in (test or [])]
        if "readyz" not in test or flag_value(test, "--admin") != f"127.0.0.1:{ADMIN_PORT}":
            fail(f"service '{name}': healthcheck must run 'apns-emulator readyz --admin 127.0.0.1:{ADMIN_PORT}'")
        if str(service.get("restart", "no")) not in ("on-failure", "always", "unless-stopped"):
            fail(f"service '{name}': needs restart: on-failure (runtimes that ignore service_healthy start it early)")
        waits = healthy_ancestors(services, name)
        for needed in (EMULATOR, REDIS):
            if needed not in waits:
                fail(f"service '{name}': must wait for {needed} (depends_on … condition: service_healthy)")
        if name != INSTANCES[0] and INSTANCES[0] not in waits:
            fail(f"service '{name}': must start after {INSTANCES[0]} (depends_on … condition: service_healthy)")
        nets = service_networks(service)
        for other in (REDIS, HAPROXY):
            if not nets & service_networks(services[other]):
                fail(f"service '{name}': shares no network with {other}")
    if any(env != instance_envs[0] for env in instance_envs[1:]):
        fail("the cluster instances' environments differ")

    # Redis and HAProxy: small images from the runtime's Debian base, packages installed only when missing.
    builds = {}
    for name, package in ((REDIS, "redis-server"), (HAPROXY, "haproxy")):
        build = services[name].get("build")
        build = {"context": build} if isinstance(build, str) else (build or {})
        context = str(build.get("context", "")).rstrip("/")
        builds[name] = context
        if not context or not os.path.isdir(os.path.join(files.root, context)):
            fail(f"service '{name}': build context '{context}' does not exist")
            continue
        check_debian_package_image(files, context, package, problems)
    redis_test = (services[REDIS].get("healthcheck") or {}).get("test")
    if not redis_test or "ping" not in " ".join(map(str, redis_test if isinstance(redis_test, list) else [redis_test])):
        fail(f"service '{REDIS}': healthcheck must ping redis (the first instance waits for it)")

    # HAProxy: Apple's names in the cluster network, its config mounted, TCP frontends to every instance.
    haproxy = services[HAPROXY]
    haproxy_nets = service_aliases(haproxy)
    apple_nets = [net for net, aliases in haproxy_nets.items() if set(APPLE_HOSTS) <= aliases]
    if not apple_nets:
        fail(f"service '{HAPROXY}': needs the aliases {', '.join(APPLE_HOSTS)} on the cluster network")
    for name in INSTANCES:
        if not service_networks(services[name]) & set(apple_nets or haproxy_nets):
            fail(f"service '{HAPROXY}': not on the instances' network")
    for name in INSTANCES:
        if name not in healthy_ancestors(services, HAPROXY):
            fail(f"service '{HAPROXY}': must wait for {name} (depends_on … condition: service_healthy)")
    cfg_mounts = [(s, t) for s, t, ro in volume_entries(haproxy) if t.endswith("haproxy.cfg")]
    cfg_text, cfg_name = None, None
    if not cfg_mounts:
        fail(f"service '{HAPROXY}': haproxy.cfg is not mounted")
    else:
        source, target = cfg_mounts[0]
        if not all(ro for s, t, ro in volume_entries(haproxy) if t.endswith("haproxy.cfg")):
            fail(f"service '{HAPROXY}': mount haproxy.cfg read-only")
        cfg_name = os.path.normpath(source)
        cfg_text = files.context_file(".", cfg_name)
        if cfg_text is None:
            fail(f"service '{HAPROXY}': {source} does not exist")
        dockerfile = files.context_file(builds[HAPROXY], "Dockerfile") or ""
        cmd = [args for op, args in instructions(dockerfile) if op == "CMD"]
        command = command_list(haproxy) or (json.loads(cmd[-1]) if cmd and cmd[-1].startswith("[") else [])
        if flag_value(command, "-f") != target:
            fail(f"service '{HAPROXY}': haproxy is not started with -f {target} (the mounted config)")
    if cfg_text is not None:
        check_haproxy_cfg(cfg_name, cfg_text, emulator_env, haproxy, problems)

    # The example pair through HAProxy (optional).
    if CLUSTER_DEVICE in services:
        device = services[CLUSTER_DEVICE]
        args = command_list(device)
        if device.get("image") != emulator.get("image") or not args or args[0] != "device":
            fail(f"service '{CLUSTER_DEVICE}': must run 'device …' from the emulator's image")
        for arg in args[1:]:
            if device_flags and arg.startswith("--") and arg.split("=")[0] not in device_flags:
                fail(f"service '{CLUSTER_DEVICE}': {arg} is not an option of 'apns-emulator device'")
        if host_port(flag_value(args, "--connect") or "") != (HAPROXY, DEVICE_PORT):
            fail(f"service '{CLUSTER_DEVICE}': --connect must be {HAPROXY}:{DEVICE_PORT}")
        if bundle and flag_value(args, "--bundle") != bundle:
            fail(f"service '{CLUSTER_DEVICE}': --bundle must be the configured app {bundle}")
        if not service_networks(device) & service_networks(haproxy):
            fail(f"service '{CLUSTER_DEVICE}': shares no network with {HAPROXY}")
    if CLUSTER_PROVIDER in services:
        provider = services[CLUSTER_PROVIDER]
        penv = env_map(provider)
        if not service_networks(provider) & set(apple_nets):
            fail(f"service '{CLUSTER_PROVIDER}': not on the network where {HAPROXY} has Apple's names")
        mounts = [(t, ro) for s, t, ro in volume_entries(provider) if s == certs_volume]
        if not mounts or not all(ro for _, ro in mounts) \
                or penv.get("SSL_CERT_FILE") != mounts[0][0].rstrip("/") + "/ca.pem":
            fail(f"service '{CLUSTER_PROVIDER}': mount the certs volume read-only and set SSL_CERT_FILE to its ca.pem")
        if CLUSTER_DEVICE in services and penv.get("DEVICE_ID") != flag_value(command_list(services[CLUSTER_DEVICE]), "--device-id"):
            fail(f"service '{CLUSTER_PROVIDER}': DEVICE_ID must be {CLUSTER_DEVICE}'s --device-id")
        admin = re.fullmatch(r"http://([^:/]+):(\d+)/?", penv.get("EMULATOR_ADMIN_URL", ""))
        allowed = instance_envs[0].get("APNS_EMULATOR_ADMIN_ALLOWED_HOST", "").lower().split()
        if not admin or admin.group(1) not in [HAPROXY, *INSTANCES] or int(admin.group(2)) != ADMIN_PORT \
                or admin.group(1) not in allowed:
            fail(f"service '{CLUSTER_PROVIDER}': EMULATOR_ADMIN_URL must be http://{HAPROXY}:{ADMIN_PORT} "
                 "(or an instance), a name the instances allow")


def check_debian_package_image(files, context, package, problems):
    fail = problems.append
    dockerfile = files.context_file(context, "Dockerfile")
    if dockerfile is None:
        fail(f"{context}/Dockerfile is missing")
        return
    froms = [args for op, args in instructions(dockerfile) if op == "FROM"]
    if not re.search(r"^ARG RUNTIME_IMAGE=debian:bookworm\S*\s*$", dockerfile, re.M):
        fail(f"{context}/Dockerfile: needs 'ARG RUNTIME_IMAGE=debian:bookworm-slim' (the emulator's runtime base)")
    if froms not in (["${RUNTIME_IMAGE}"], ["$RUNTIME_IMAGE"]):
        fail(f"{context}/Dockerfile: must be a single 'FROM ${{RUNTIME_IMAGE}}'")
    runs = " ".join(args for op, args in instructions(dockerfile) if op == "RUN")
    if package not in runs:
        fail(f"{context}/Dockerfile: does not ensure {package}")
    elif "apt-get install" in runs and not re.search(r"dpkg-query|dpkg -s|dpkg -l", runs):
        fail(f"{context}/Dockerfile: installs {package} unconditionally (install only when missing, so local images work offline)")


def check_haproxy_cfg(name, text, emulator_env, haproxy, problems):
    fail = problems.append
    sections = haproxy_sections(text)
    # What every instance listens on (the same environment as the single emulator).
    instance_ports = {host_port(v)[1] for v in emulator_env.get("APNS_EMULATOR_LISTEN", "").split()}
    instance_ports |= {host_port(emulator_env.get(k, ""))[1] for k in ("APNS_EMULATOR_DEVICE_LISTEN", "APNS_EMULATOR_ADMIN_LISTEN")}
    instance_ports.discard(None)
    mode, frontends, backends = None, {}, {}
    for kind, section, lines in sections:
        if kind == "defaults":
            mode = next((l.split()[1] for l in lines if l.split()[0] == "mode"), mode)
        if kind not in ("frontend", "backend", "listen"):
            continue
        own = next((l.split()[1] for l in lines if l.split()[0] == "mode" and len(l.split()) > 1), mode)
        if own != "tcp":
            fail(f"{name}: {kind} {section} is not in TCP mode (TLS has to pass through to the instances)")
        if kind in ("frontend", "listen"):
            ports = set()
            for l in lines:
                if l.split()[0] == "bind":
                    ports |= {int(p) for p in re.findall(r":(\d+)\b", l)}
            target = section if kind == "listen" else next(
                (l.split()[1] for l in lines if l.split()[0] in ("default_backend", "use_backend") and len(l.split()) > 1), None)
            for port in ports:
                frontends[port] = (section, target)
        if kind in ("backend", "listen"):
            backends[section] = [host_port(l.split()[2]) for l in lines
                                 if l.split()[0] == "server" and len(l.split()) > 2]
    for port in sorted(PROVIDER_PORTS | {DEVICE_PORT}):
        if port not in frontends:
            fail(f"{name}: no frontend binds port {port} ({'devices' if port == DEVICE_PORT else 'providers'})")
    for port, (frontend, backend) in sorted(frontends.items()):
        if backend not in backends:
            fail(f"{name}: frontend {frontend} (port {port}) has no backend '{backend}'")
            continue
        servers = backends[backend]
        if port not in instance_ports:
            fail(f"{name}: port {port} is not a port the emulator instances listen on ({sorted(instance_ports)})")
        for instance in INSTANCES:
            if (instance, port) not in servers:
                fail(f"{name}: backend {backend} lacks server {instance}:{port}")
        for host, server_port in servers:
            if host not in INSTANCES or server_port != port:
                fail(f"{name}: backend {backend} has server {host}:{server_port}, not an instance's port {port}")
    for host_ip, published, container_port in published_ports(haproxy):
        if not container_port.isdigit() or int(container_port) not in frontends:
            fail(f"service '{HAPROXY}': publishes port {container_port}, which no frontend binds")


def check_provider_context(files, context, problems):
    fail = problems.append
    dockerfile = files.provider_file(context, "Dockerfile")
    requirements = files.provider_file(context, "requirements.txt")
    if dockerfile is None:
        fail(f"{context}/Dockerfile is missing")
    else:
        lines = instructions(dockerfile)
        froms = [args for op, args in lines if op == "FROM"]
        if not re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim\s*$", dockerfile, re.M):
            fail(f"{context}/Dockerfile: needs 'ARG PYTHON_IMAGE=python:3.11-slim'")
        if froms != ["${PYTHON_IMAGE}"]:
            fail(f"{context}/Dockerfile: must be 'FROM ${{PYTHON_IMAGE}}'")
        if "--no-index" not in dockerfile or "--find-links" not in dockerfile or "wheelhouse" not in dockerfile:
            fail(f"{context}/Dockerfile: offline wheelhouse install (--no-index --find-links) is missing")
        if not os.path.isdir(os.path.join(files.root, context, "wheelhouse")):
            fail(f"{context}/wheelhouse/ must exist (COPY needs it even when empty)")
    if requirements is None:
        fail(f"{context}/requirements.txt is missing")
    else:
        pins = {}
        for line in requirements.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.]+)", line)
            if not match:
                fail(f"{context}/requirements.txt: '{line}' is not pinned (name==version)")
            else:
                pins[match.group(1).lower()] = match.group(2)
        if pins.get("aioapns") != "4.0":
            fail(f"{context}/requirements.txt: aioapns must be pinned to 4.0")
    if files.provider_file(context, "provider.py") is None:
        fail(f"{context}/provider.py is missing")


# ---------------------------------------------------------------------------- Dockerfile

def instructions(text):
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        op, _, args = current.partition(" ")
        out.append((op.upper(), args.strip()))
        current = ""
    return out


def image_env(files):
    """ENV of the Dockerfile's final stage (NAME=VALUE pairs)."""
    env = {}
    stage_env = {}
    for op, args in instructions(files.texts.get("Dockerfile") or ""):
        if op == "FROM":
            stage_env = {}
        elif op == "ENV":
            for item in shlex.split(args):
                name, sep, value = item.partition("=")
                if sep:
                    stage_env[name] = value
        env = stage_env
    return env


def check_dockerfile(files, problems):
    fail = problems.append
    text = files.texts["Dockerfile"]
    if text is None:
        fail("Dockerfile is missing")
        return
    lines = instructions(text)
    first_from = next((i for i, (op, _) in enumerate(lines) if op == "FROM"), None)
    if first_from is None:
        fail("Dockerfile: no FROM")
        return
    global_args = {}
    for op, args in lines[:first_from]:
        if op == "ARG":
            name, _, default = args.partition("=")
            global_args[name.strip()] = default.strip()
    if not global_args.get("SWIFT_IMAGE", "").startswith("swift:6.3"):
        fail("Dockerfile: needs 'ARG SWIFT_IMAGE=swift:6.3-…' before the first FROM")
    if not global_args.get("RUNTIME_IMAGE", "").startswith("debian:bookworm"):
        fail("Dockerfile: needs 'ARG RUNTIME_IMAGE=debian:bookworm-slim' before the first FROM")

    # Stages: the builder from ${SWIFT_IMAGE}, the final one from ${RUNTIME_IMAGE}.
    stages, current = [], None
    for op, args in lines[first_from:]:
        if op == "FROM":
            parts = args.split()
            current = {"image": parts[0], "name": parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None,
                       "lines": []}
            stages.append(current)
        else:
            current["lines"].append((op, args))
    names = {s["name"] for s in stages if s["name"]}
    for stage in stages:
        image = stage["image"]
        if not re.fullmatch(r"\$\{?[A-Z_]+\}?", image) and image not in names:
            fail(f"Dockerfile: 'FROM {image}' hard-codes an image; use a build ARG")
    if len(stages) < 2:
        fail("Dockerfile: must be multi-stage (builder + runtime)")
        return
    builder, runtime = stages[0], stages[-1]
    if builder["image"] not in ("${SWIFT_IMAGE}", "$SWIFT_IMAGE"):
        fail("Dockerfile: the builder stage must be FROM ${SWIFT_IMAGE}")
    if runtime["image"] not in ("${RUNTIME_IMAGE}", "$RUNTIME_IMAGE"):
        fail("Dockerfile: the final stage must be FROM ${RUNTIME_IMAGE}")

    def runs(stage):
        return " ".join(args for op, args in stage["lines"] if op == "RUN")

    build_runs = runs(builder)
    if not re.search(r"swift build -c release --static-swift-stdlib --product apns-emulator", build_runs):
        fail("Dockerfile: builder must run 'swift build -c release --static-swift-stdlib --product apns-emulator'")
    for stage, packages in ((builder, ["libnghttp2-dev", "libssl-dev", "libsqlite3-dev", "libhiredis-dev", "pkg-config"]),
                            (runtime, ["libnghttp2-14", "libssl3", "libsqlite3-0", "libhiredis0.14", "ca-certificates"])):
        text_runs = runs(stage)
        for package in packages:
            if package not in text_runs:
                fail(f"Dockerfile: stage FROM {stage['image']} does not ensure {package}")
        if "apt-get install" in text_runs and not re.search(r"dpkg-query|dpkg -s|dpkg -l", text_runs):
            fail(f"Dockerfile: stage FROM {stage['image']} installs packages unconditionally "
                 "(install only when missing, so local images work offline)")
    if not any(op == "COPY" and "--from=" + (builder["name"] or "0") in args for op, args in runtime["lines"]):
        fail("Dockerfile: the runtime stage must COPY the binary --from the builder stage")

    def last(stage, wanted):
        values = [args for op, args in stage["lines"] if op == wanted]
        return values[-1] if values else None

    entrypoint, cmd = last(runtime, "ENTRYPOINT"), last(runtime, "CMD")
    try:
        entry = json.loads(entrypoint or "null")
        if not (isinstance(entry, list) and entry and entry[0].endswith("apns-emulator")):
            raise ValueError
    except ValueError:
        fail("Dockerfile: ENTRYPOINT must be the apns-emulator binary (exec form)")
    try:
        if json.loads(cmd or "null") != ["serve"]:
            raise ValueError
    except ValueError:
        fail('Dockerfile: CMD must be ["serve"]')
    user = last(runtime, "USER")
    if user and user.split(":")[0] not in ("root", "0"):
        if not re.search(r"setcap\s+['\"]?cap_net_bind_service[=+]", runs(runtime)):
            fail(f"Dockerfile: runs as '{user}' but does not grant cap_net_bind_service (443 needs it)")

    ignore = files.texts[".dockerignore"]
    if ignore is None:
        fail(".dockerignore is missing")
    elif not any(re.fullmatch(r"(\*\*/|/)?\.build/?", line.strip()) for line in ignore.splitlines()):
        fail(".dockerignore must exclude .build")


def check(files, serve_env, device_flags):
    problems = []
    check_dockerfile(files, problems)
    check_compose(files, serve_env, device_flags, problems)
    return problems


# ---------------------------------------------------------------------------- self-test

def mutations():
    """(what, file, old, new): each must make the check fail."""
    c, d = "docker-compose.yml", "Dockerfile"
    cfg, rd, hd = "examples/compose/haproxy/haproxy.cfg", "examples/compose/redis/Dockerfile", "examples/compose/haproxy/Dockerfile"
    return [
        ("admin port published on all interfaces", c, '"127.0.0.1:${APNS_EMULATOR_ADMIN_PORT', '"${APNS_EMULATOR_ADMIN_PORT'),
        ("alias api.development.push.apple.com dropped", c, "- api.development.push.apple.com", ""),
        ("healthcheck test dropped", c, 'test: ["CMD", "apns-emulator", "readyz"', 'disable: true\n      x: ["CMD", "apns-emulator", "readyz"'),
        ("unknown emulator variable", c, "APNS_EMULATOR_ADMIN_LISTEN:", "APNS_EMULATOR_ADMIN_LISTENER:"),
        ("admin listener on loopback", c, 'APNS_EMULATOR_ADMIN_LISTEN: "0.0.0.0:8197"', 'APNS_EMULATOR_ADMIN_LISTEN: "127.0.0.1:8197"'),
        ("admin API exposed without a token or ADMIN_INSECURE", c, 'APNS_EMULATOR_ADMIN_INSECURE: "true"', ""),
        ("the provider's admin host name not allowed", c, 'APNS_EMULATOR_ADMIN_ALLOWED_HOST: "apns-emulator"', ""),
        ("no listener on 443", c, '"0.0.0.0:443', '"0.0.0.0:8443'),
        ("image's sandbox listener left on next to --listen", c, 'APNS_EMULATOR_SANDBOX_LISTEN: "off"', ""),
        ("certs volume writable in the provider", c, "certs:/certs:ro", "certs:/certs"),
        ("device on the wrong port", c, "apns-emulator:5223", "apns-emulator:5224"),
        ("YAML broken", c, "services:", "services: ["),
        ("hard-coded base image", d, "FROM ${SWIFT_IMAGE}", "FROM swift:6.3-bookworm"),
        ("not a static stdlib build", d, "--static-swift-stdlib --product", "--product"),
        ("non-root without the capability", d, "setcap cap_net_bind_service=+ep", "true"),
        (".build not ignored", ".dockerignore", re.compile(r"^.*\.build.*$", re.M), ""),
        # profile "cluster"
        ("redis without the cluster profile", c, re.compile(r'(\n  redis:\n)    profiles: \["cluster"\]\n'), r"\1"),
        ("instances on another Redis", c, "APNS_EMULATOR_REDIS: redis://redis:6379/0", "APNS_EMULATOR_REDIS: redis://localhost:6379/0"),
        ("an instance configured differently", c, "APNS_EMULATOR_REDIS: redis://redis:6379/0",
         'APNS_EMULATOR_REDIS: redis://redis:6379/0\n        APNS_EMULATOR_APP: "TESTTEAM01:com.example.other"'),
        ("instances may write the certs volume", c, "- certs:/var/lib/apns-emulator/certs:ro", "- certs:/var/lib/apns-emulator/certs"),
        ("second instance not after the first", c,
         re.compile(r"(\n  apns-emulator-2:\n(?:    .*\n)*?        condition: )service_healthy"), r"\1service_started"),
        ("first instance not waiting for the certificates", c,
         re.compile(r"(\n    depends_on:\n      # The certificates exist.*\n(?:      #.*\n)*)      apns-emulator:\n        condition: service_healthy\n"), r"\1"),
        ("Apple's names on the single emulator's network twice", c, "      apns-cluster:\n        aliases:", "      apns:\n        aliases:"),
        ("cluster admin port on all interfaces", c, '"127.0.0.1:${APNS_EMULATOR_CLUSTER_ADMIN_PORT', '"${APNS_EMULATOR_CLUSTER_ADMIN_PORT'),
        ("cluster device at the single emulator", c, "- haproxy:5223", "- apns-emulator:5223"),
        ("haproxy in HTTP mode", cfg, "  mode tcp", "  mode http"),
        ("haproxy without the device frontend", cfg, "bind :5223", "bind :5224"),
        ("haproxy backend lacks an instance", cfg, "  server apns-emulator-3 apns-emulator-3:443\n", ""),
        ("haproxy backend on the wrong port", cfg, "apns-emulator-2:2197", "apns-emulator-2:2198"),
        ("redis-server installed unconditionally", rd, "dpkg-query", "true"),
        ("hard-coded haproxy base image", hd, "FROM ${RUNTIME_IMAGE}", "FROM debian:bookworm-slim"),
    ]


def self_test(files, serve_env, device_flags, explain=False):
    failures = []
    for what, name, old, new in mutations():
        broken = files.copy()
        text = broken.texts.get(name) or ""
        if isinstance(old, re.Pattern):
            changed = old.sub(new, text)
        else:
            changed = text.replace(old, new, 1)
        if changed == text:
            failures.append(f"self-test '{what}': pattern not found in {name} (update the self-test)")
            continue
        broken.texts[name] = changed
        found = check(broken, serve_env, device_flags)
        if not found:
            failures.append(f"self-test '{what}': the broken {name} passed the check")
        elif explain:
            print(f"static check: broken variant '{what}' rejected: {found[0]}")
    # The provider's pins, through its own context.
    doc = yaml.safe_load(files.texts["docker-compose.yml"])
    context = str((doc["services"][PROVIDER].get("build") or {}).get("context", "")).rstrip("/")
    broken = files.copy()
    key = f"{context}/requirements.txt"
    broken.texts[key] = (broken.texts.get(key) or "").replace("aioapns==4.0", "aioapns>=4.0")
    if not check(broken, serve_env, device_flags):
        failures.append("self-test 'unpinned aioapns': passed the check")
    # An emulator without --redis cannot run the cluster profile.
    if not check(files.copy(), serve_env - {"APNS_EMULATOR_REDIS"}, device_flags):
        failures.append("self-test 'emulator without --redis': passed the check")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--serve-help", help="file with the output of 'apns-emulator serve --help'")
    parser.add_argument("--device-help", help="file with the output of 'apns-emulator device --help'")
    parser.add_argument("--no-self-test", action="store_true")
    parser.add_argument("--explain", action="store_true", help="say why each broken variant was rejected")
    options = parser.parse_args()
    root = os.path.abspath(options.root)

    if options.serve_help:
        serve_text = read(options.serve_help) or ""
        serve_env = help_env_names(serve_text)
        source = "serve --help"
    else:
        serve_text = ""
        serve_env = documented_env_names(root)
        source = "docs/configuration.md option table (no binary given)"
    if not serve_env:
        print(f"static check: no environment variables found in {source}", file=sys.stderr)
        return 1
    device_flags = help_flags(read(options.device_help)) if options.device_help else set()

    files = Files(root)
    problems = check(files, serve_env, device_flags)
    failures = [] if options.no_self_test or problems else self_test(files, serve_env, device_flags, options.explain)
    for problem in problems:
        print(f"static check: FAIL {problem}")
    for failure in failures:
        print(f"static check: FAIL {failure}")
    if problems or failures:
        return 1
    print(f"static check: ok (Dockerfile, .dockerignore, docker-compose.yml, provider, "
          f"cluster profile: {REDIS}, {', '.join(INSTANCES)}, {HAPROXY} + haproxy.cfg; "
          f"{len(serve_env)} variables from {source}"
          f"{', device flags from device --help' if device_flags else ''}; "
          f"{len(mutations()) + 2} broken variants all rejected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
