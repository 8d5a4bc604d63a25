#!/usr/bin/env python3
"""Static contract check of Dockerfile, .dockerignore, docker-compose.yml and the example
provider (run by scripts/test-containers; usable on its own).

    scripts/test-containers-static.py --root . --serve-help serve.txt --device-help device.txt

--serve-help / --device-help are the outputs of `apns-emulator serve --help` and
`apns-emulator device --help`; without them the option table of README.md stands in for
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


# ---------------------------------------------------------------------------- inputs

class Files:
    """Texts of the files under check (kept as strings so the self-test can break copies)."""

    def __init__(self, root):
        self.root = root
        self.texts = {}
        for name in ["docker-compose.yml", "Dockerfile", ".dockerignore"]:
            self.texts[name] = read(os.path.join(root, name))

    def provider_file(self, context, name):
        key = f"{context}/{name}"
        if key not in self.texts:
            self.texts[key] = read(os.path.join(self.root, context, name))
        return self.texts[key]

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


def readme_env_names(root):
    text = read(os.path.join(root, "README.md")) or ""
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
        serve_env = readme_env_names(root)
        source = "README.md option table (no binary given)"
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
    print(f"static check: ok (Dockerfile, .dockerignore, docker-compose.yml, provider; "
          f"{len(serve_env)} variables from {source}"
          f"{', device flags from device --help' if device_flags else ''}; "
          f"{len(mutations()) + 1} broken variants all rejected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
