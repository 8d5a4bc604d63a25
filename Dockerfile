# apns-emulator container image.
#
#   docker build -t apns-emulator:local .
#   docker run --rm -p 127.0.0.1:8197:8197 -e APNS_EMULATOR_ADMIN_INSECURE=true apns-emulator:local   # admin API + web UI
#
# The admin API listens on all of the container's interfaces, so the emulator refuses to start
# unless it gets a token (APNS_EMULATOR_ADMIN_TOKEN) or is told the exposure is meant
# (APNS_EMULATOR_ADMIN_INSECURE=true: fine when the port is published on 127.0.0.1 only).
#
# Both base images are build arguments, so the same file builds from the official images
# (the defaults) or from local images on a machine without a registry, for example
#   podman build --build-arg SWIFT_IMAGE=localhost/my-swift:6.3 \
#                --build-arg RUNTIME_IMAGE=localhost/my-debian:bookworm-slim .
# (scripts/test-containers does exactly that; see docs/containers.md).

ARG SWIFT_IMAGE=swift:6.3-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------
# Build stage: the official Swift image (Debian bookworm).
FROM ${SWIFT_IMAGE} AS build

# The C libraries the package wraps (nghttp2, OpenSSL, SQLite, hiredis) and pkg-config to find them. They are
# installed only when missing, so a builder image that already has them needs no network
# ($missing is split into package names on purpose).
# hadolint ignore=SC2086
RUN set -eu; \
    missing=""; \
    for pkg in libnghttp2-dev libssl-dev libsqlite3-dev libhiredis-dev pkg-config; do \
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $pkg"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi

WORKDIR /src
# SwiftPM checks every target's directory when it loads the manifest, so the test targets'
# sources come along even though only the executable is built. The EmbedAssets plugin
# (Plugins/) builds the web UI (ui/), the OpenAPI document and the conformance catalogue
# (conformance/) into the binary.
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
COPY Plugins ./Plugins
COPY ui ./ui
COPY docs/openapi.json ./docs/openapi.json
COPY conformance ./conformance

# Swift's runtime and Foundation are linked in; the binary then needs only glibc, libstdc++,
# libnghttp2, libssl/libcrypto, libsqlite3 and libhiredis at run time. Symbols are stripped (about a third of the size).
RUN set -eu; \
    swift build -c release --static-swift-stdlib --product apns-emulator; \
    bin="$(swift build -c release --static-swift-stdlib --show-bin-path)"; \
    install -D -m 0755 "$bin/apns-emulator" /out/apns-emulator; \
    strip /out/apns-emulator; \
    /out/apns-emulator version

# ---------------------------------------------------------------------------------------
# Runtime stage: Debian slim with the shared libraries the binary links against.
FROM ${RUNTIME_IMAGE}

# libcap2-bin is for setcap below. Installed only when missing, as above.
# hadolint ignore=SC2086
RUN set -eu; \
    missing=""; \
    for pkg in libnghttp2-14 libssl3 libsqlite3-0 libhiredis0.14 ca-certificates libcap2-bin; do \
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $pkg"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi

# The emulator runs as an unprivileged user. It still has to bind port 443 inside the
# container (the port Apple's libraries hard-code), and container runtimes do not all lower
# net.ipv4.ip_unprivileged_port_start (podman keeps 1024). So the binary gets the one
# capability it needs as a file capability, cap_net_bind_service, instead of running the
# whole process as root. Runtimes grant NET_BIND_SERVICE by default; if you drop all
# capabilities (cap_drop: [ALL]) add it back, or the binary will not start. Under
# no-new-privileges the file capability is ignored: then lower the port floor instead
# (sysctl net.ipv4.ip_unprivileged_port_start=0) or listen on 2197 only.
#
# /var/lib/apns-emulator/certs belongs to that user: a named volume mounted there starts as a
# copy of it (owner included), so the emulator can write its TEST ONLY certificates on first
# start and providers can mount the same volume read-only to trust ca.pem.
RUN set -eu; \
    groupadd --gid 10001 apns; \
    useradd --uid 10001 --gid apns --no-create-home --home-dir /var/lib/apns-emulator \
        --shell /usr/sbin/nologin apns; \
    install -d -o apns -g apns -m 0755 /var/lib/apns-emulator /var/lib/apns-emulator/certs

COPY --from=build /out/apns-emulator /usr/local/bin/apns-emulator
RUN setcap cap_net_bind_service=+ep /usr/local/bin/apns-emulator

# Inside a container the emulator has to listen on all interfaces to be reachable at all;
# which of these ports get published on the host is the caller's choice (docker run -p,
# compose "ports"). Every setting can be overridden with the same variables.
ENV APNS_EMULATOR_CERTS_DIR=/var/lib/apns-emulator/certs \
    APNS_EMULATOR_SANDBOX_LISTEN=0.0.0.0:2197 \
    APNS_EMULATOR_PRODUCTION_LISTEN=0.0.0.0:2198 \
    APNS_EMULATOR_CHANNEL_SANDBOX_LISTEN=0.0.0.0:2195 \
    APNS_EMULATOR_CHANNEL_PRODUCTION_LISTEN=0.0.0.0:2196 \
    APNS_EMULATOR_ADMIN_LISTEN=0.0.0.0:8197 \
    APNS_EMULATOR_DEVICE_LISTEN=0.0.0.0:5223

USER apns
WORKDIR /var/lib/apns-emulator
EXPOSE 443 2195 2196 2197 2198 5223 8197
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=5 \
    CMD ["apns-emulator", "readyz", "--admin", "127.0.0.1:8197"]
ENTRYPOINT ["apns-emulator"]
CMD ["serve"]
