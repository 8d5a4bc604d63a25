#!/usr/bin/env bash
# gen-certs.sh - create a TEST ONLY certificate authority and server certificate for the
# apns-emulator.
#
#   TEST ONLY. These certificates and keys are for a local test machine. Never install ca.pem
#   into a trust store you use for anything else, and never trust it outside a test machine:
#   anyone holding ca-key.pem can impersonate api.push.apple.com to whoever trusts it.
#
# Usage: scripts/gen-certs.sh [DIRECTORY]      (default: certs/)
# Writes: ca.pem, ca-key.pem, server.pem (leaf certificate), server-key.pem
# EC P-256 keys, SHA-256 signatures; CA valid 10 years, server certificate 825 days (the most
# Apple platforms accept) for localhost, 127.0.0.1, ::1 and the APNs host names.
set -euo pipefail

out="${1:-certs}"
mkdir -p "$out"
command -v openssl >/dev/null || { echo "gen-certs.sh: openssl not found" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One private config so the system openssl.cnf cannot add or duplicate extensions.
cat >"$work/openssl.cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1,IP:::1,DNS:api.push.apple.com,DNS:api.sandbox.push.apple.com,DNS:api.development.push.apple.com,DNS:api-broadcast.push.apple.com,DNS:api-broadcast.sandbox.push.apple.com,DNS:api-manage-broadcast.push.apple.com,DNS:api-manage-broadcast.sandbox.push.apple.com,DNS:apns-emulator
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
CNF

# Keys are created 0600 (umask) and written PKCS#8, like Apple's .p8 files.
(
    umask 077
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca-key.pem"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/server-key.pem"
)

# Random positive serial numbers (31 hex digits, the first 1..7).
serial() { echo "0x$(( (RANDOM % 7) + 1 ))$(openssl rand -hex 15)"; }

openssl req -new -x509 -config "$work/openssl.cnf" -extensions ca_ext \
    -key "$work/ca-key.pem" -sha256 -days 3650 -set_serial "$(serial)" \
    -subj "/O=apns-emulator TEST ONLY/CN=apns-emulator TEST ONLY CA" \
    -out "$work/ca.pem"

openssl req -new -config "$work/openssl.cnf" \
    -key "$work/server-key.pem" -sha256 \
    -subj "/O=apns-emulator TEST ONLY/CN=apns-emulator TEST ONLY server" \
    -out "$work/server.csr"

# `x509 -req` chats on stderr even when it succeeds; show that only on failure.
if ! openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -set_serial "$(serial)" -sha256 -days 825 \
    -extfile "$work/openssl.cnf" -extensions server_ext \
    -out "$work/server.pem" 2>"$work/x509.log"; then
    cat "$work/x509.log" >&2
    exit 1
fi

openssl verify -CAfile "$work/ca.pem" "$work/server.pem" >/dev/null

# Install only once everything succeeded, keeping key files private.
install -m 0600 "$work/ca-key.pem" "$out/ca-key.pem"
install -m 0600 "$work/server-key.pem" "$out/server-key.pem"
install -m 0644 "$work/ca.pem" "$out/ca.pem"
install -m 0644 "$work/server.pem" "$out/server.pem"

echo "Wrote TEST ONLY certificates to $out/:"
echo "  $out/ca.pem          test CA certificate (trust it only on a test machine)"
echo "  $out/ca-key.pem      test CA private key"
echo "  $out/server.pem      server certificate (localhost, 127.0.0.1, ::1, api.push.apple.com,"
echo "                       api.sandbox.push.apple.com, api.development.push.apple.com and the"
echo "                       api-broadcast and api-manage-broadcast names)"
echo "  $out/server-key.pem  server private key"
echo "WARNING: TEST ONLY. Never trust ca.pem outside a test machine." >&2
