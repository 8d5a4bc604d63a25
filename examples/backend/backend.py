#!/usr/bin/env python3
"""A small app backend for the emulator's simulated apps. Standard library only.

The simulated app calls it through the hooks in hooks.json (register, bind, unbind, fetch, and
action: a reply typed into a notification); the provider side (notify.py) asks it for a user's
tokens and reports the ones APNs rejected.

Two variants share everything but the binding rules:

  correct  A token belongs to at most one account: `bindings.token` is the primary key, so a
           bind moves the token to the new user, and logout (unbind) deletes the binding.
  --buggy  The classic device-table bug. `bindings` is unique on (user_id, token) only, not
           on token, so binding bob's login to a phone appends a row next to alice's instead of
           replacing it; and logout ends the *session* row but leaves the device binding
           ("logout clears the session, not the device"). After "alice logs out, bob logs in
           on the same phone" the token is bound to both, and a push meant for alice goes to
           the phone bob is now using.

State lives in an in-memory SQLite database behind one lock; restart the process (or
POST /reset) for a clean slate. Listens on 127.0.0.1 only.
"""
import argparse
import json
import re
import sqlite3
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20
ENVIRONMENTS = ("sandbox", "production")
# APNs tokens are hex; requiring that also catches a hook template whose placeholder was not
# rendered ("{{token}}") instead of storing it as a token.
TOKEN_RE = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")
# The endpoints the simulated app calls: the ones POST /fail makes fail.
HOOK_ROUTES = {"register", "bind", "unbind", "fetch", "reply"}

SCHEMA = """
CREATE TABLE tokens (token TEXT PRIMARY KEY, device_id TEXT, bundle_id TEXT, environment TEXT,
                     updated_at REAL NOT NULL);
CREATE TABLE sessions (id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, token TEXT NOT NULL,
                       device_id TEXT, started_at REAL NOT NULL, ended_at REAL);
CREATE TABLE messages (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, body TEXT NOT NULL,
                       created_at REAL NOT NULL);
CREATE TABLE fetches (message_id TEXT NOT NULL, by_user TEXT, at REAL NOT NULL);
CREATE TABLE replies (message_id TEXT NOT NULL, user_id TEXT, action TEXT NOT NULL, text TEXT,
                      at REAL NOT NULL);
"""
# The one line that differs: what makes a token belong to one account.
CORRECT_BINDINGS = """CREATE TABLE bindings (token TEXT PRIMARY KEY, user_id TEXT NOT NULL,
                                             bound_at REAL NOT NULL);"""
BUGGY_BINDINGS = """CREATE TABLE bindings (token TEXT NOT NULL, user_id TEXT NOT NULL,
                                           bound_at REAL NOT NULL, UNIQUE (user_id, token));"""


class BadRequest(Exception):
    """Answered 400."""


class NotFound(Exception):
    """Answered 404."""


def text_field(body, name, required=True, pattern=None, choices=None):
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"'{name}' is required")
        return None
    if not isinstance(value, str):
        raise BadRequest(f"'{name}' must be a string")
    if pattern is not None and not pattern.match(value):
        raise BadRequest(f"'{name}' is not a valid device token (hex): {value[:80]!r}")
    if choices is not None and value not in choices:
        raise BadRequest(f"'{name}' must be one of {', '.join(choices)}")
    return value


class Backend:
    def __init__(self, buggy):
        self.buggy = buggy
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        # Called with the lock held, or before the server starts.
        if getattr(self, "db", None) is not None:
            self.db.close()
        # One connection shared by the handler threads, serialised by self.lock; `with self.db`
        # makes each call one transaction.
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA + (BUGGY_BINDINGS if self.buggy else CORRECT_BINDINGS))
        self.next_message = 1
        self.invalidated = []
        self.calls = []
        self.fail_status, self.fail_count, self.fail_retry_after = None, 0, None

    @property
    def variant(self):
        return "buggy" if self.buggy else "correct"

    # -- writes -------------------------------------------------------------------------

    def upsert_token(self, token, device_id, bundle_id, environment, now):
        # A token seen again keeps the metadata it had when a call leaves a field out.
        self.db.execute(
            """INSERT INTO tokens VALUES (?, ?, ?, ?, ?) ON CONFLICT(token) DO UPDATE SET
               device_id = coalesce(excluded.device_id, device_id),
               bundle_id = coalesce(excluded.bundle_id, bundle_id),
               environment = coalesce(excluded.environment, environment),
               updated_at = excluded.updated_at""",
            (token, device_id, bundle_id, environment, now))

    def bind_token(self, token, user_id, now):
        if self.buggy:
            # BUG (deliberate): no unique constraint on the token, so this adds (user, token)
            # next to whatever account already has the token.
            self.db.execute("INSERT OR IGNORE INTO bindings VALUES (?, ?, ?)", (token, user_id, now))
        else:
            # One token, one account: the token moves to this user.
            self.db.execute("""INSERT INTO bindings VALUES (?, ?, ?) ON CONFLICT(token) DO UPDATE
                               SET user_id = excluded.user_id, bound_at = excluded.bound_at""",
                            (token, user_id, now))

    def register(self, body):
        token = text_field(body, "token", pattern=TOKEN_RE)
        device_id = text_field(body, "deviceId")
        bundle_id = text_field(body, "bundleId")
        environment = text_field(body, "environment", choices=ENVIRONMENTS)
        user_id = text_field(body, "userId", required=False)
        now = time.time()
        with self.lock, self.db:
            # A device has one current token per app: a newer one (reinstall, restore, rotation)
            # replaces the old, and the old one's bindings and sessions follow it, so the user
            # stays bound without logging in again.
            replaced = [row["token"] for row in self.db.execute(
                "SELECT token FROM tokens WHERE device_id = ? AND bundle_id = ? AND token != ?",
                (device_id, bundle_id, token))]
            self.upsert_token(token, device_id, bundle_id, environment, now)
            for old in replaced:
                self.db.execute("UPDATE OR IGNORE bindings SET token = ? WHERE token = ?", (token, old))
                self.db.execute("DELETE FROM bindings WHERE token = ?", (old,))
                self.db.execute("UPDATE sessions SET token = ? WHERE token = ?", (token, old))
                self.db.execute("DELETE FROM tokens WHERE token = ?", (old,))
            if user_id:
                # Uploading the token while logged in is "this token is mine" too.
                self.bind_token(token, user_id, now)
        return {"ok": True, "token": token, "replaced": replaced}

    def bind(self, body):
        token = text_field(body, "token", pattern=TOKEN_RE)
        user_id = text_field(body, "userId")
        device_id = text_field(body, "deviceId", required=False)
        bundle_id = text_field(body, "bundleId", required=False)
        environment = text_field(body, "environment", required=False, choices=ENVIRONMENTS)
        now = time.time()
        with self.lock, self.db:
            self.upsert_token(token, device_id, bundle_id, environment, now)
            device_id = self.db.execute("SELECT device_id FROM tokens WHERE token = ?", (token,)).fetchone()[0]
            self.bind_token(token, user_id, now)
            self.db.execute("UPDATE sessions SET ended_at = ? WHERE token = ? AND ended_at IS NULL",
                            (now, token))  # one session per phone at a time
            self.db.execute("INSERT INTO sessions (user_id, token, device_id, started_at) VALUES (?, ?, ?, ?)",
                            (user_id, token, device_id, now))
            users = self.users_of(token)
        return {"ok": True, "token": token, "users": users}

    def unbind(self, body):
        token = text_field(body, "token", pattern=TOKEN_RE)
        # Optional: without it, whoever holds the token is logged out.
        user_id = text_field(body, "userId", required=False)
        now = time.time()
        match, args = ("token = ? AND user_id = ?", (token, user_id)) if user_id else ("token = ?", (token,))
        with self.lock, self.db:
            ended = self.db.execute(f"UPDATE sessions SET ended_at = ? WHERE {match} AND ended_at IS NULL",
                                    (now, *args)).rowcount
            if self.buggy:
                # BUG (deliberate): logout ends the session but leaves the device binding, so
                # the logged-out user keeps receiving pushes on this phone.
                removed = 0
            else:
                # Only this user's binding: a late unbind must not log out whoever bound since.
                removed = self.db.execute(f"DELETE FROM bindings WHERE {match}", args).rowcount
            users = self.users_of(token)
        return {"ok": True, "token": token, "sessionsEnded": ended, "bindingsRemoved": removed, "users": users}

    def invalidate(self, token):
        # The provider got 410 Unregistered / ExpiredToken or 400 BadDeviceToken: the token is
        # dead for every account and device.
        with self.lock, self.db:
            removed = self.db.execute("DELETE FROM bindings WHERE token = ?", (token,)).rowcount
            known = self.db.execute("DELETE FROM tokens WHERE token = ?", (token,)).rowcount
            self.db.execute("UPDATE sessions SET ended_at = ? WHERE token = ? AND ended_at IS NULL",
                            (time.time(), token))
            self.invalidated.append(token)
        return {"ok": True, "token": token, "known": bool(known), "bindingsRemoved": removed}

    def create_message(self, body):
        user_id = text_field(body, "userId")
        text = body.get("body")
        if not isinstance(text, str):
            raise BadRequest("'body' must be a string")
        with self.lock, self.db:
            message_id = f"msg-{self.next_message}"
            self.next_message += 1
            self.db.execute("INSERT INTO messages VALUES (?, ?, ?, ?)", (message_id, user_id, text, time.time()))
        return {"id": message_id}

    def fetch_message(self, message_id, by_user):
        with self.lock, self.db:
            row = self.db.execute("SELECT * FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                return None
            # Recorded so a test can see the second phase of a background push happened (and,
            # from X-User-Id, on whose behalf).
            self.db.execute("INSERT INTO fetches VALUES (?, ?, ?)", (message_id, by_user, time.time()))
        return {"id": row["id"], "userId": row["user_id"], "body": row["body"]}

    def reply(self, message_id, body):
        # The user acted on the notification for `message_id` (the `action` hook): a reply
        # typed into it, or another button of its category.
        action = text_field(body, "action")
        text = body.get("text")
        if text is not None and not isinstance(text, str):
            raise BadRequest("'text' must be a string or null")
        user_id = text_field(body, "userId", required=False)
        with self.lock, self.db:
            if self.db.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone() is None:
                raise NotFound(f"no message {message_id!r}")
            self.db.execute("INSERT INTO replies VALUES (?, ?, ?, ?, ?)", (message_id, user_id, action, text, time.time()))
        return {"ok": True, "messageId": message_id, "action": action}

    # -- reads --------------------------------------------------------------------------

    def users_of(self, token):
        return [r["user_id"] for r in self.db.execute(
            "SELECT user_id FROM bindings WHERE token = ? ORDER BY bound_at, user_id", (token,))]

    def tokens_of(self, user_id):
        # The push target lookup. It reads bindings only: in the buggy variant that is where
        # an ended session's token is still listed.
        with self.lock:
            rows = self.db.execute(
                """SELECT b.token, t.environment, t.bundle_id, t.device_id FROM bindings b
                   LEFT JOIN tokens t ON t.token = b.token WHERE b.user_id = ? ORDER BY b.bound_at""",
                (user_id,)).fetchall()
        return {"userId": user_id, "tokens": [
            {"token": r["token"], "environment": r["environment"], "bundleId": r["bundle_id"],
             "deviceId": r["device_id"]} for r in rows]}

    def state(self):
        def rows(sql):
            return [dict(r) for r in self.db.execute(sql)]
        with self.lock:
            return {
                "variant": self.variant,
                "tokens": rows("SELECT token, device_id AS deviceId, bundle_id AS bundleId, environment "
                               "FROM tokens ORDER BY updated_at"),
                "bindings": rows("SELECT token, user_id AS userId, bound_at AS boundAt FROM bindings "
                                 "ORDER BY bound_at"),
                "sessions": rows("SELECT user_id AS userId, token, device_id AS deviceId, started_at AS startedAt, "
                                 "ended_at AS endedAt FROM sessions ORDER BY id"),
                "messages": rows("SELECT id, user_id AS userId, body FROM messages ORDER BY created_at"),
                "fetched": rows("SELECT message_id AS id, by_user AS byUser, at FROM fetches ORDER BY at"),
                "replies": rows("SELECT message_id AS messageId, user_id AS userId, action, text FROM replies ORDER BY at"),
                "invalidated": list(self.invalidated),
                "fail": {"status": self.fail_status, "remaining": self.fail_count},
                "calls": list(self.calls),
            }

    # -- fault injection and the call log ----------------------------------------------

    def set_fail(self, body):
        status = body.get("status", 503)
        count = body.get("count", 1)
        retry_after = body.get("retryAfter")
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise BadRequest("'status' must be an integer from 400 to 599")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise BadRequest("'count' must be an integer >= 0")
        if retry_after is not None and (not isinstance(retry_after, int) or retry_after < 0):
            raise BadRequest("'retryAfter' must be an integer >= 0 (seconds)")
        with self.lock:
            self.fail_status, self.fail_count, self.fail_retry_after = status, count, retry_after
        return {"ok": True, "status": status, "count": count}

    def take_failure(self):
        """The injected answer for this hook call, if any is left: (status, retryAfter)."""
        with self.lock:
            if self.fail_count <= 0:
                return None
            self.fail_count -= 1
            return self.fail_status, self.fail_retry_after

    def log_call(self, entry):
        with self.lock:
            self.calls.append(entry)
            del self.calls[:-1000]  # bounded: a long run must not grow without end


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as the emulator's HTTP/1.1 client expects; every answer has a Content-Length.
    protocol_version = "HTTP/1.1"
    server_version = "ExampleBackend/1"
    backend: Backend  # set on the class by main()
    verbose = False

    def log_message(self, format, *args):
        if self.verbose:
            super().log_message(format, *args)

    def do_GET(self):
        self.handle_request("GET")

    def do_POST(self):
        self.handle_request("POST")

    def do_PUT(self):
        self.handle_request("PUT")

    def do_PATCH(self):
        self.handle_request("PATCH")

    def do_DELETE(self):
        self.handle_request("DELETE")

    # -- plumbing -----------------------------------------------------------------------

    def read_body(self):
        """The raw body. Raises BadRequest (answered 400) when its framing is broken."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise BadRequest("bad chunked encoding") from None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(data)
                if len(data) + size > MAX_BODY:
                    self.close_connection = True
                    raise BadRequest("body too large")
                data += self.rfile.read(size)
                self.rfile.readline(1024)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            n = -1
        if not 0 <= n <= MAX_BODY:
            self.close_connection = True  # the rest of the stream cannot be framed
            raise BadRequest("bad or too large Content-Length")
        return self.rfile.read(n)

    def send_json(self, status, obj, extra_headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def route(self, method, parts):
        """(name, handler, allowed methods): handler is None when the path is known but the
        method is not (405). Raises NotFound for an unknown path."""
        b = self.backend
        methods = {
            ("devices", "register"): {"POST": ("register", b.register)},
            ("sessions", "bind"): {"POST": ("bind", b.bind)},
            ("sessions", "unbind"): {"POST": ("unbind", b.unbind)},
            ("messages",): {"POST": ("create-message", b.create_message)},
            ("state",): {"GET": ("state", lambda _: b.state())},
            ("fail",): {"POST": ("fail", b.set_fail)},
            ("reset",): {"POST": ("reset", lambda _: self.reset_backend())},
        }.get(tuple(parts))
        if methods is None and len(parts) == 2 and parts[0] == "messages":
            methods = {"GET": ("fetch", lambda _: self.fetch(parts[1]))}
        elif methods is None and len(parts) == 3 and parts[0] == "messages" and parts[2] == "replies":
            methods = {"POST": ("reply", lambda body: b.reply(parts[1], body))}
        elif methods is None and len(parts) == 3 and parts[0] == "users" and parts[2] == "tokens":
            methods = {"GET": ("user-tokens", lambda _: b.tokens_of(parts[1]))}
        elif methods is None and len(parts) == 3 and parts[0] == "tokens" and parts[2] == "invalid":
            methods = {"POST": ("invalid", lambda _: b.invalidate(parts[1]))}
        if methods is None:
            raise NotFound(f"no such endpoint: {method} /{'/'.join(parts)}")
        name, handler = methods.get(method, (None, None))
        return name, handler, sorted(methods)

    def reset_backend(self):
        with self.backend.lock:
            self.backend.reset()
        return {"ok": True, "variant": self.backend.variant}

    def fetch(self, message_id):
        message = self.backend.fetch_message(message_id, self.headers.get("X-User-Id") or None)
        if message is None:
            raise NotFound(f"no message {message_id!r}")
        return message

    def handle_request(self, method):
        started = time.time()
        path = urllib.parse.urlsplit(self.path).path
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        name, status, body, result = None, 500, None, None
        try:
            raw = self.read_body()
            name, handler, allowed = self.route(method, parts)
            if handler is None:
                status, result = 405, {"error": f"{method} not allowed here; use {', '.join(allowed)}"}
                self.send_json(status, result, [("Allow", ", ".join(allowed))])
                return
            if name in HOOK_ROUTES:
                failure = self.backend.take_failure()
                if failure is not None:
                    status, retry_after = failure
                    result = {"error": f"injected failure ({status})"}
                    headers = [("Retry-After", str(retry_after))] if retry_after is not None else []
                    self.send_json(status, result, headers)
                    return
            if method == "POST" and name not in ("invalid", "reset"):
                try:
                    body = json.loads(raw.decode("utf-8")) if raw else None
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
                    raise BadRequest(f"body is not JSON: {error}") from None
                if name == "fail" and body is None:
                    body = {}
                if not isinstance(body, dict):
                    raise BadRequest("body must be a JSON object")
            if name == "invalid" and not TOKEN_RE.match(parts[1]):
                raise BadRequest(f"not a valid device token (hex): {parts[1][:80]!r}")
            result = handler(body)
            status = 201 if name == "create-message" else 200
            self.send_json(status, result)
        except BadRequest as error:
            status, result = 400, {"error": str(error)}
            self.send_json(status, result)
        except NotFound as error:
            status, result = 404, {"error": str(error)}
            self.send_json(status, result)
        except Exception as error:  # a bug here must answer 500, never kill the server
            status, result = 500, {"error": f"{type(error).__name__}: {error}"}
            self.send_json(status, result)
        finally:
            if name != "state":
                self.backend.log_call({"at": started, "method": method, "path": path, "route": name,
                                       "body": body, "status": status})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of simulated devices calling at once would
    # see connections reset.
    request_queue_size = 256


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--buggy", action="store_true",
                        help="the variant with no unique constraint on the token (see the module doc)")
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = parser.parse_args()

    Handler.backend = Backend(args.buggy)
    Handler.verbose = args.verbose
    server = Server(("127.0.0.1", args.port), Handler)
    variant = ("buggy: no unique constraint on the token, logout keeps the device binding"
               if args.buggy else "correct: one account per token")
    print(f"backend variant {variant}", file=sys.stderr, flush=True)
    # The one stdout line a test waits for.
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
