#!/usr/bin/python3
"""Drives the emulator's web UI in headless Chromium (Debian's chromium + chromium-driver +
python3-selenium; scripts/deps.sh test installs them) against a running emulator.

  /usr/bin/python3 Tests/ui/test_ui.py --admin http://127.0.0.1:8197 --sandbox 127.0.0.1:2197 \
      --ca certs/ca.pem --key TEAMID:KEYID:AuthKey.p8 --topic com.example.app --token HEX \
      --binary .build/debug/apns-emulator --screenshot ui.png --channel-sandbox 127.0.0.1:2195 [--h2c 127.0.0.1:2199] \
      [--admin-token TOKEN]

The token must belong to a device with the topic's app installed. The accounts step adds a device
of its own, gives the topic's app a backend (and leaves it set) and writes two more screenshots
next to --screenshot (NAME-accounts.png, NAME-backend.png). The Live Activities step adds a device
with three activities (pushed to through --sandbox) and writes NAME-activities.png; the channels step
makes two broadcast channels on --channel-sandbox (the emulator's --channel-sandbox-listen) with the
binary's `channels create`, broadcasts on one and writes NAME-channels.png; the presentation step adds a
device with a category, a Focus and a scheduled summary, answers a notification through its Reply button and
writes NAME-notification-center.png and NAME-presentation.png. The load step adds a device too and
runs h2load (nghttp2-client) against --h2c (the emulator's --h2c-sandbox-listen; without it, TLS
to --sandbox) for about 5 s while it watches the Load tab, and writes NAME-load.png. With --admin-token the
emulator must have been started with that token: then only the token checks run. Exits 0 when every check
passes, 1 with a message naming the failed check otherwise, 2 when the browser stack is missing.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select
except ImportError:
    print("FAIL: python3-selenium is missing (run scripts/deps.sh test)", file=sys.stderr)
    sys.exit(2)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1400, 900


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def wait_for(what, predicate, timeout=3.0, interval=0.02):
    """Polls predicate until it returns something truthy; fails naming `what` after timeout."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Failure:
            raise
        except Exception as e:  # a stale element during a re-render, a refused request, ...
            last_error = e
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout:g} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


class Admin:
    def __init__(self, base, token=None):
        self.base = base.rstrip("/")
        self.token = token

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            raise Failure(f"admin API {method} {path}: HTTP {e.code} {e.read().decode(errors='replace')}")

    def get(self, path):
        return self.call("GET", path)


class UITest:
    def __init__(self, args):
        self.args = args
        self.admin = Admin(args.admin, args.admin_token)
        self.driver = None
        self.timings = {}
        self.expected_console_errors = []  # (substring, substring): a failed request the test caused on purpose

    # -- helpers

    def log(self, message):
        print(f"  {message}", flush=True)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def css(self, selector):
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector):
        found = self.css(selector)
        check(found, f"no element matches {selector}")
        return found[0]

    def send(self, payload, expect_ok=True, extra=(), token=None, topic=None):
        command = [self.args.binary, "send", "--host", self.args.sandbox, "--ca", self.args.ca, "--key", self.args.key,
                   "--topic", topic or self.args.topic, "--token", token or self.args.token, *extra, json.dumps(payload)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        if expect_ok:
            check(result.returncode == 0, f"send failed ({result.returncode}): {result.stdout}{result.stderr}")
        apns_id = next((line.split(":", 1)[1].strip() for line in result.stdout.splitlines() if line.startswith("apns-id:")), None)
        check(apns_id, f"send printed no apns-id: {result.stdout}{result.stderr}")
        return apns_id, result

    def click(self, selector):
        """Clicks what the selector finds, again if a re-render replaced it between finding and clicking."""
        wait_for(f"a click on {selector}", lambda: self.css(selector) and (self.css(selector)[0].click(), True)[1])

    def text(self, selector):
        """The text of the first element the selector finds; None while there is none (e.g. during a load)."""
        found = self.css(selector)
        return found[0].text if found else None

    def row(self, apns_id):
        found = self.css(f'#rows tr[data-apns-id="{apns_id}"]')
        return found[0] if found else None

    def open_record(self, apns_id):
        row = wait_for(f"the row of {apns_id}", lambda: self.row(apns_id))
        row.find_element(By.CSS_SELECTOR, "td.c-time").click()
        wait_for(f"{apns_id} to be selected", lambda: self.js(
            "const tr = document.querySelector('#rows tr.selected'); return tr && tr.dataset.apnsId === arguments[0];", apns_id))

    def tab(self, name):
        self.one(f"#tab-{name}").click()
        wait_for(f"the {name} tab", lambda: self.one(f"#panel-{name}").is_displayed())

    # -- the steps

    def start_browser(self):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars",
                     f"--window-size={WIDTH},{HEIGHT}", "--disable-extensions", "--no-first-run"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        try:
            self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        except WebDriverException as e:
            raise Failure(f"could not start headless Chromium ({CHROMIUM} with {CHROMEDRIVER}); run scripts/deps.sh test: {e.msg}")
        # The viewport itself is 1400x900 (the window size includes no browser chrome in headless mode, but be exact).
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        self.driver.set_page_load_timeout(15)

    def page_loads(self):
        self.driver.get(self.args.admin.rstrip("/") + "/")
        check(self.driver.title == "apns-emulator", f"page title is {self.driver.title!r}")
        check(self.one("#timeline").is_displayed(), "the timeline is not visible")
        wait_for("the event stream to be live", lambda: self.one("#conn").get_attribute("data-state") == "live", timeout=5)
        wait_for("the header to show the version from /api/v1/info", lambda: self.one("#version").text.startswith("v"))
        info = self.admin.get("/api/v1/info")
        check(self.one("#version").text == f"v{info['version']}", "version in the header differs from /api/v1/info")
        self.log(f"page loaded: version {info['version']}, event stream live")

    def some_history(self):
        # A few different records first, so the timeline (and the screenshot) shows the variety.
        self.send({"aps": {"content-available": 1}, "sync": "inbox"}, extra=("--push-type", "background", "--priority", "5"))
        self.send({"aps": {"alert": {"loc-key": "GAME_INVITE", "loc-args": ["Jenna"]}, "thread-id": "games"}})
        self.send({"aps": {"alert": "x" * 4100}}, expect_ok=False)  # 413 PayloadTooLarge
        self.send({"aps": {"alert": "hi"}}, expect_ok=False, token="00" * 32)  # 400 BadDeviceToken
        wait_for("four rows", lambda: len(self.css("#rows tr")) >= 4)
        statuses = sorted(td.text for td in self.css("#rows td.c-status"))
        check(statuses == ["200", "200", "400", "413"], f"statuses in the timeline are {statuses}")
        self.log("history: background, loc-key alert, 413 and 400 listed")

    def live_row(self):
        # Record, in the page, when each row first appears (Date.now(), the same clock as time.time()).
        self.js("""
            window.__rowSeen = {};
            new MutationObserver((list) => {
              for (const m of list) for (const n of m.addedNodes)
                if (n.dataset && n.dataset.apnsId && !(n.dataset.apnsId in window.__rowSeen)) window.__rowSeen[n.dataset.apnsId] = Date.now();
            }).observe(document.getElementById('rows'), {childList: true});""")
        self.alert_title = f"UI test {int(time.time() * 1000) % 100000}"
        self.alert_body = "Your order has shipped & is on its way <b>not bold</b>"
        started = time.time()
        apns_id, _ = self.send({"aps": {"alert": {"title": self.alert_title, "body": self.alert_body}, "badge": 3, "sound": "default"}})
        answered = time.time()
        seen = wait_for("the new row (within 1 s of the push being answered)",
                        lambda: self.js("return window.__rowSeen[arguments[0]];", apns_id), timeout=max(0.0, answered + 1.0 - time.time()), interval=0.01)
        latency = seen / 1000 - answered
        self.timings["row after response"] = latency
        self.timings["row after send started"] = seen / 1000 - started
        check(latency <= 1.0, f"the row appeared {latency * 1000:.0f} ms after the response (limit 1000 ms)")
        row = self.row(apns_id)
        cells = [td.text for td in row.find_elements(By.CSS_SELECTOR, "td")]
        check(cells[1] == "200", f"status cell is {cells[1]!r}")
        check(cells[3] == "alert" and cells[4] == self.args.topic, f"type/topic cells are {cells[3:5]!r}")
        check(cells[5] == f"{self.args.token[:6]}…{self.args.token[-4:]}", f"token cell is {cells[5]!r}")
        check(cells[6] == "sbx" and cells[7] in ("delivered", "pending", "stored"), f"env/outcome cells are {cells[6:8]!r}")
        self.alert_id = apns_id
        self.log(f"row appeared {max(0, latency) * 1000:.0f} ms after the response ({self.timings['row after send started'] * 1000:.0f} ms after send started)")

    def detail_pane(self):
        self.open_record(self.alert_id)
        preview = self.one("#lock-preview")
        check(self.one("#lock-preview .notif-title").text == self.alert_title, f"preview title is {self.one('#lock-preview .notif-title').text!r}")
        check(self.one("#lock-preview .notif-body").text == self.alert_body, f"preview body is {self.one('#lock-preview .notif-body').text!r}")
        check(self.one("#preview-badge").text == "3", "the preview shows no badge 3")
        check("default" in preview.text, "the preview does not mention the sound")
        record = self.admin.get(f"/api/v1/notifications/{self.alert_id}")
        meter = self.one("#size-bar [role=meter]")
        check(meter.get_attribute("aria-valuenow") == str(record["payloadSize"]), f"size bar value {meter.get_attribute('aria-valuenow')} != payloadSize {record['payloadSize']}")
        check(meter.get_attribute("aria-valuemax") == "4096", "size bar limit is not 4096 for an alert")
        fill = self.js("return arguments[0].firstElementChild.getBoundingClientRect().width;", meter)
        check(fill > 0, "the size bar is empty")
        check(f"{record['payloadSize']} B of 4,096 B" in self.one("#size-bar").text, f"size label is {self.one('#size-bar').text!r}")
        check(self.alert_title in self.one("#payload-json").text, "the payload JSON is not shown")
        check(record["explanation"] in self.one("#explanation").text, "the explanation is not shown")
        detail = self.one("#detail").get_attribute("textContent")  # includes collapsed sections
        for needle in ("apns-unique-id", "signature verified", "apns-topic", record["keyId"] or "", record["apnsId"]):
            check(needle in detail, f"the detail pane does not show {needle!r}")
        stray = self.js("return Array.from(document.getElementById('detail').childNodes, (n) => n.nodeType === 3 ? n.textContent.trim() : '').filter(Boolean);")
        check(not stray, f"the detail pane shows stray text {stray!r}")
        self.log("detail pane: lock-screen preview, size bar, JSON, response, JWT and headers shown")
        # The delivery log, as the API gives it for the same record.
        log = self.admin.get(f"/api/v1/notifications/{self.alert_id}/log")["log"]
        shown_log = lambda: [li.find_element(By.CSS_SELECTOR, ".what").text for li in self.css("#delivery-log li") if li.find_elements(By.CSS_SELECTOR, ".what")]
        wait_for("the delivery log", lambda: shown_log() == [entry["console"] for entry in log])
        check(shown_log()[:2] == ["Received", "Accepted"], f"the delivery log shows {shown_log()!r}")
        self.log(f"detail pane: delivery log {' → '.join(shown_log())}")
        check(self.one("#copy-curl").text == "Copy cURL" and self.one("#download-apns").text == "Download .apns", "the detail pane has no Copy cURL / Download .apns buttons")
        self.click("#copy-curl")
        # Copied (a toast says so), or shown to be selected where the clipboard is refused.
        shown = lambda: (self.css("#curl-text") and "/3/device/" in self.css("#curl-text")[0].get_attribute("value")) or any("cURL command copied" in t.text for t in self.css("#toasts .toast"))
        wait_for("the curl command copied or shown", shown)
        self.log("detail pane: Copy cURL and Download .apns buttons work")

    def escaping(self):
        hostile = '<img src=x id=pwned onerror="window.__pwned=1">'
        apns_id, _ = self.send({"aps": {"alert": {"title": hostile, "body": "<script>window.__pwned=2</script>"}}})
        self.open_record(apns_id)
        check(self.one("#lock-preview .notif-title").text == hostile, "hostile title not shown as text")
        check(not self.css("#pwned") and not self.css("#detail script"), "payload text was inserted as HTML")
        check(self.js("return window.__pwned === undefined;"), "payload script ran")
        self.log("payload text is rendered as text, not HTML")

    def keyboard_and_filters(self):
        self.open_record(self.alert_id)
        body = self.one("body")
        selected = lambda: self.js("const tr = document.querySelector('#rows tr.selected'); return tr && tr.dataset.apnsId;")
        body.send_keys("k")  # newer: the hostile record sent after it
        wait_for("k to select the newer row", lambda: selected() not in (None, self.alert_id))
        body.send_keys("j")
        wait_for("j to select the older row again", lambda: selected() == self.alert_id)
        # Free-text search hides what does not match.
        search = self.one("#q")
        search.send_keys(self.alert_title)
        wait_for("the search to leave one row", lambda: len(self.css("#rows tr:not([hidden])")) == 1)
        # The search narrows only the rows shown: Delete records… refuses rather than delete by
        # the journal's filters what the page does not show.
        before = len(self.admin.get("/api/v1/notifications?limit=10000")["notifications"])
        self.click("#delete-records")
        wait_for("Delete records… to refuse while a search is set", lambda: any("journal's filters only" in t.text for t in self.css(".toast.err")))
        check(not self.css("dialog[open]"), "a confirm dialog opened although the search is set")
        check(len(self.admin.get("/api/v1/notifications?limit=10000")["notifications"]) == before, "records were deleted")
        search.send_keys(Keys.CONTROL, "a")
        search.send_keys(Keys.BACKSPACE)
        wait_for("the search to be cleared", lambda: len(self.css("#rows tr:not([hidden])")) >= 2)
        # Per-token view: click a token, everything sent to it; then back.
        self.row(self.alert_id).find_element(By.CSS_SELECTOR, "button.tok").click()
        wait_for("the token view", lambda: self.one("#scope").is_displayed() and "Token view" in self.one("#scope").text)
        check(self.one('#filters [name="token"]').get_attribute("value") == self.args.token, "token filter not set")
        wait_for("the token view to list the push", lambda: self.row(self.alert_id))
        check("token=" in self.driver.current_url, "the token view is not in the URL")
        self.one("#scope button.ghost").click()
        wait_for("the token view to close", lambda: not self.one("#scope").is_displayed())
        self.log("j/k, search and the per-token view work")

    def screenshot(self):
        self.open_record(self.alert_id)
        time.sleep(0.3)  # let the fresh-row highlight settle
        check(self.driver.save_screenshot(self.args.screenshot), f"could not write {self.args.screenshot}")
        self.log(f"screenshot: {self.args.screenshot}")

    def validators(self):
        self.tab("devices")
        form = self.one("#validate-token")
        form.find_element(By.NAME, "token").send_keys(self.args.token)
        form.find_element(By.NAME, "bundleId").send_keys(self.args.topic)
        Select(form.find_element(By.NAME, "environment")).select_by_visible_text("production")
        form.find_element(By.CSS_SELECTOR, "button").click()
        wait_for("the token's verdict", lambda: "BadDeviceToken" in self.one("#validate-token-result").text)
        check("this is a sandbox token, sent to production" in self.one("#validate-token-result").text, "the token verdict has no explanation")
        jwt = subprocess.run([self.args.binary, "jwt", "--key", self.args.key], capture_output=True, text=True, timeout=30).stdout.strip()
        form = self.one("#validate-jwt")
        form.find_element(By.NAME, "jwt").send_keys(jwt)
        form.find_element(By.CSS_SELECTOR, "button").click()
        wait_for("the provider token's verdict", lambda: "would be accepted" in self.one("#validate-jwt-result").text)
        self.log("validators: a sandbox token judged for production (BadDeviceToken), a fresh provider token accepted")

    def device_controls(self):
        token = self.admin.get(f"/api/v1/tokens/{self.args.token}")
        device, bundle = token["deviceId"], token["bundleId"]
        self.tab("devices")
        selector = f'select[data-field="appState"][data-device="{device}"][data-bundle="{bundle}"]'
        current = self.one(selector).get_attribute("value")
        target = "foreground" if current != "foreground" else "suspended"
        Select(self.one(selector)).select_by_value(target)

        def app_state():
            d = self.admin.get(f"/api/v1/devices/{urllib.parse.quote(device)}")
            return next(a for a in d["apps"] if a["bundleId"] == bundle)["appState"]
        wait_for(f"the admin API to report appState {target}", lambda: app_state() == target)
        wait_for("the UI to show the new app state", lambda: self.one(selector).get_attribute("value") == target)
        # Offline, a push is stored; back online, the same row turns delivered (updated in place).
        button = lambda: self.one(f'.device[data-device="{device}"] button[data-action="online"]')
        button().click()
        wait_for("the device to go offline", lambda: self.admin.get(f"/api/v1/devices/{urllib.parse.quote(device)}")["online"] is False)
        wait_for("the button to offer going online", lambda: button().text == "Go online")
        apns_id, _ = self.send({"aps": {"alert": "while you were offline"}})
        outcome = lambda: [tr.find_element(By.CSS_SELECTOR, "td.c-outcome").get_attribute("textContent")
                           for tr in self.css(f'#rows tr[data-apns-id="{apns_id}"]')]
        wait_for("the row of the push to the offline device to show stored", lambda: outcome() == ["stored"])
        button().click()
        wait_for("the device to come back online", lambda: self.admin.get(f"/api/v1/devices/{urllib.parse.quote(device)}")["online"] is True)
        wait_for("the same row to turn delivered", lambda: outcome() == ["delivered"])
        self.log(f"device controls: appState {current} -> {target}; offline/online reached the emulator; stored -> delivered updated in place")

    def refused_change(self):
        """A change the API refuses (409: a socket device that is not connected) leaves the
        control showing what the server has, not what was chosen."""
        if not self.args.device:
            return
        host, port = self.args.device.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=5)
        hello = {"type": "hello", "version": 1, "deviceId": "ui-socket", "apps": [{"bundleId": self.args.topic, "environment": "sandbox"}]}
        sock.sendall((json.dumps(hello) + "\n").encode())
        seen = b""
        while b'"registered"' not in seen:
            chunk = sock.recv(65536)
            check(chunk, "the device socket closed before registered")
            seen += chunk
        sock.close()
        wait_for("the socket device to be disconnected", lambda: self.admin.get("/api/v1/devices/ui-socket")["connected"] is False)
        self.tab("devices")
        selector = f'select[data-field="authorization"][data-device="ui-socket"][data-bundle="{self.args.topic}"]'
        wait_for("the socket device's card", lambda: self.css(selector), timeout=10)
        self.expected_console_errors.append(("/api/v1/devices/ui-socket/apps/", "status of 409"))
        Select(self.one(selector)).select_by_value("denied")
        wait_for("the refusal's message", lambda: any("not connected" in t.text for t in self.css("#toasts .toast")))
        wait_for("the control to show the server's permission again", lambda: self.one(selector).get_attribute("value") == "authorized", timeout=10)
        check(self.admin.get("/api/v1/devices/ui-socket")["apps"][0]["authorization"] == "authorized", "the refused change was made")
        self.log("a refused change (409) is shown and the control goes back to the server's value")

    def fault_rules(self):
        self.tab("faults")
        form = self.one("#fault-form")
        form.find_element(By.NAME, "token").send_keys(self.args.token)
        Select(form.find_element(By.NAME, "kind")).select_by_value("respond")
        for name, value in (("status", "500"), ("reason", "InternalServerError"), ("times", "1")):
            field = form.find_element(By.NAME, name)
            field.clear()
            field.send_keys(value)
        self.one("#add-fault").click()
        rule = wait_for("the rule in GET /api/v1/faults", lambda: (self.admin.get("/api/v1/faults")["faults"] or [None])[0])
        check(rule["match"].get("token") == self.args.token and rule["action"].get("status") == 500 and rule["times"] == 1,
              f"the rule is not what the form said: {rule}")
        row = lambda: self.css(f'#faults tr[data-id="{rule["id"]}"]')
        wait_for("the rule to be listed", row)
        # It fires: the push gets its 500 and the list counts it.
        _, result = self.send({"aps": {"alert": "fault"}}, expect_ok=False)
        check("500" in result.stdout, f"the fault rule did not answer 500: {result.stdout}")
        wait_for("the fired count to reach 1", lambda: row() and row()[0].find_elements(By.CSS_SELECTOR, "td")[5].text == "1", timeout=6)
        row()[0].find_element(By.CSS_SELECTOR, "button").click()
        wait_for("the rule to be deleted in the API", lambda: self.admin.get("/api/v1/faults")["faults"] == [])
        wait_for("the rule to leave the list", lambda: not row())
        self.log(f"fault rule {rule['id']} added through the form, fired once, deleted")

    def extra_screenshot(self, suffix):
        stem, ext = os.path.splitext(self.args.screenshot)
        path = f"{stem}-{suffix}{ext or '.png'}"
        check(self.driver.save_screenshot(path), f"could not write {path}")
        return path

    def accounts(self):
        """Accounts on a device, the app's backend calls and a push shown to the wrong account (issue 10)."""
        device, bundle, q = "ui-accounts-phone", self.args.topic, urllib.parse.quote
        token = self.admin.call("POST", "/api/v1/devices", {"bundleId": bundle, "environment": "sandbox", "deviceId": device})["token"]
        # The app's backend: a bind hook to a dead port (its call fails at its one attempt) and the
        # payload field that names the account a push is for.
        self.admin.call("PUT", f"/api/v1/apps/{q(bundle)}/backend", {
            "bind": {"url": "http://127.0.0.1:9/bind/{{token}}", "method": "PUT", "body": {"userId": "{{userId}}"}},
            "addresseePointer": "/uid", "maxAttempts": 1})
        self.tab("devices")
        card = f'.device[data-device="{device}"]'
        badge = lambda: self.text(f"{card} .account-badge")
        logout_button = lambda: self.css(f'{card} button[data-action="logout"]')
        user = lambda: self.admin.get(f"/api/v1/devices/{q(device)}")["userId"]
        wait_for("the new device, nobody logged in", lambda: badge() == "logged out", timeout=6)
        check(not logout_button(), "a Log out button while nobody is logged in")

        def log_in(user_id):
            def attempt():  # again from the start when the card is re-rendered under the test
                field = self.one(f'{card} input[data-field="userId"]')
                field.clear()
                field.send_keys(user_id)
                self.one(f'{card} button[data-action="login"]').click()
                return True
            wait_for(f"the login form to take {user_id[:20]!r}", attempt)

        # An account the API refuses: its error is shown, and nobody is logged in.
        self.expected_console_errors.append((f"/api/v1/devices/{device}/login", "status of 400"))
        log_in("x" * 300)
        wait_for("the API's error for a 300-character userId", lambda: any("256" in t.text for t in self.css(".toast.err")))
        check(user() is None, "an account the API refused is logged in")
        log_in("alice")
        wait_for("the admin API to report alice logged in", lambda: user() == "alice")
        wait_for("the device to show alice", lambda: badge() == "alice" and logout_button())
        check(self.one(f'{card} input[data-field="userId"]').get_attribute("value") == "", "the field still holds alice after logging in")
        self.log("logged alice in through the form (a userId the API refuses: its error shown)")

        # The backend as the app has it.
        self.click(f'{card} button[data-action="backend"][data-bundle="{bundle}"]')
        wait_for("the backend dialog with the /uid pointer and the bind hook",
                 lambda: self.one("#backend-dialog").get_attribute("open") is not None and self.text("#backend-pointer") == "/uid"
                 and "PUT http://127.0.0.1:9/bind/{{token}}" in (self.text('#backend-view tr[data-hook="bind"]') or ""))
        self.one('#backend-dialog button[value="cancel"]').click()
        wait_for("the backend dialog to close", lambda: self.one("#backend-dialog").get_attribute("open") is None)

        # The login made the app call its bind hook.
        self.tab("backend")
        bind_rows = lambda: self.css('#calls tbody.call[data-hook="bind"]')
        wait_for("a bind call in the Backend calls tab", bind_rows, timeout=6)
        # Rows are replaced when the call changes (pending, retrying, failed): read one in a single call.
        cell = lambda css: self.js("const b = document.querySelector('#calls tbody.call[data-hook=\"bind\"]');"
                                   "const e = b && b.querySelector(arguments[0]); return e ? e.textContent : null;", css)
        check(cell('[data-field="hook"]') == "bind", "the call row does not name its hook")
        url = cell('[data-field="url"]')
        check("127.0.0.1:9/bind/" in (url or ""), f"the bind call's URL is {url!r}")
        detail = lambda: self.css('#calls tbody.call[data-hook="bind"] tr.call-detail')

        def expand():
            if not detail():
                bind_rows()[0].find_element(By.CSS_SELECTOR, "tr.call-row").click()
            return detail()
        wait_for("the bind call's details", expand)
        # A call that failed will get no answer: its details say so (not "no answer yet").
        wait_for("the failed call's details to say it got no answer",
                 lambda: expand() and (lambda t: "no answer (" in t and "no answer yet" not in t)(
                     self.js("const d = document.querySelector('#calls tbody.call[data-hook=\"bind\"] tr.call-detail');"
                             "return d ? d.textContent : '';")), timeout=10)
        ids = self.js("return Array.from(document.querySelectorAll('#calls tbody.call'), (b) => b.dataset.id);")
        check(len(ids) == len(set(ids)), f"a call is listed more than once: {ids}")  # changes update its row
        self.log(f"bind call listed: {cell('td.k-request')} ({cell('td.k-result') or 'no result yet'}); details expand")
        self.extra_screenshot("backend")

        # A push that names bob reaches the device where alice is logged in.
        before = self.admin.get("/api/v1/checks")["crossAccountDeliveries"]
        self.tab("timeline")
        apns_id, _ = self.send({"aps": {"alert": {"title": "For bob", "body": "Your order has shipped"}}, "uid": "bob"}, token=token)
        record = wait_for("the record to be marked cross-account",
                          lambda: (lambda r: r if r.get("crossAccount") else None)(self.admin.get(f"/api/v1/notifications/{apns_id}")))
        check(record["userId"] == "alice" and record["addressee"] == "bob", f"the record names {record['addressee']!r} shown to {record['userId']!r}")
        row_badge = lambda: self.row(apns_id) and self.row(apns_id).find_elements(By.CSS_SELECTOR, "td.c-reason .badge.xacct")
        wait_for("the cross-account badge in the row", row_badge)
        check(row_badge()[0].text == "cross-account", f"the row's badge says {row_badge()[0].text!r}")
        summary = self.row(apns_id).find_element(By.CSS_SELECTOR, "td.c-summary").text
        check(summary.startswith("for bob, shown to alice"), f"the row's content cell is {summary!r}")
        self.open_record(apns_id)
        check(self.one("#cross-account").text == "cross-account: for bob, shown to alice", f"the detail's badge is {self.one('#cross-account').text!r}")
        check(self.one("#record-user").text == "alice" and self.one("#record-addressee").text == "bob", "the detail does not name alice and bob")
        expected = before + 1
        indicator = lambda: self.one("#checks")
        wait_for(f"the checks indicator to show {expected}", lambda: indicator().get_attribute("data-count") == str(expected)
                 and indicator().text == f"{expected} cross-account deliver{'y' if expected == 1 else 'ies'}")
        check(indicator().get_attribute("data-state") == "fail", "the checks indicator is not in its failed state")
        time.sleep(0.3)  # let the fresh-row highlight settle
        self.extra_screenshot("accounts")
        indicator().click()
        wait_for("the checks dialog to list the push", lambda: self.one("#checks-dialog").get_attribute("open") is not None
                 and apns_id in self.one("#checks-failures").text and "bob" in self.one("#checks-failures").text)
        self.one('#checks-dialog button[value="close"]').click()
        wait_for("the checks dialog to close", lambda: self.one("#checks-dialog").get_attribute("open") is None)
        self.log(f"push for bob shown to alice: badge in the row and the detail, checks indicator at {expected}")

        # Switch to an account whose name is markup: shown as text.
        self.tab("devices")
        hostile = '<img src=x id=pwned3 onerror="window.__pwned=3">'
        log_in(hostile)
        wait_for("the switch to the hostile account", lambda: user() == hostile)
        wait_for("the device to show the hostile account as text", lambda: badge() == hostile)
        check(not self.css("#pwned3") and self.js("return window.__pwned === undefined;"), "a userId was inserted as HTML")
        # Log out through the button.
        self.click(f'{card} button[data-action="logout"]')
        wait_for("the admin API to report nobody logged in", lambda: user() is None)
        wait_for("the device to show logged out", lambda: badge() == "logged out" and not logout_button())
        # A token got while logged out waits for the next login.
        self.admin.call("POST", f"/api/v1/devices/{q(device)}/apps/{q(bundle)}/rotate")
        wait_for("the app to show its token as not uploaded yet",
                 lambda: [e for e in self.css(f'{card} [data-field="tokenUploadPending"]') if e.text == "token not uploaded yet"], timeout=6)
        self.log("switched to a markup userId (shown as text), logged out through the button; a rotated token shows as not uploaded")

    def live_push(self, token, aps):
        """A liveactivity push to an ActivityKit token over the provider API (HTTP/2, TLS); returns its apns-id."""
        apns_id, _ = self.send({"aps": aps}, token=token, topic=f"{self.args.topic}.push-type.liveactivity",
                               extra=("--push-type", "liveactivity", "--priority", "10"))
        record = wait_for(f"the record of the liveactivity push {apns_id} to be settled",
                          lambda: (lambda r: r if r.get("outcome") not in (None, "pending") else None)(self.admin.get(f"/api/v1/notifications/{apns_id}")))
        check(record["status"] == 200 and record["outcome"] == "delivered",
              f"the {aps['event']} push was not applied: {record['status']} {record['outcome']} ({record.get('explanation')})")
        return apns_id

    def live_activities(self):
        """Live Activities on a virtual device (issue 20): three started by the app with token push, one updated
        through its update token, one made stale by an update whose stale-date is past, one ended; the device card
        shows them on its Lock Screen (most relevant first) and in the Dynamic Island, and a dismiss button works."""
        device, bundle, q = "ui-live-phone", self.args.topic, urllib.parse.quote
        base = f"/api/v1/devices/{q(device)}"
        self.admin.call("POST", "/api/v1/devices", {"bundleId": bundle, "environment": "sandbox", "deviceId": device})
        declared = self.admin.call("PUT", f"{base}/apps/{q(bundle)}/live-activities", {"types": ["DeliveryAttributes", "GameAttributes"]})
        start_tokens = declared["pushToStartTokens"]
        check(set(start_tokens) == {"DeliveryAttributes", "GameAttributes"} and all(start_tokens.values()), f"push-to-start tokens: {start_tokens}")

        def start(kind, attributes, content):
            activity = self.admin.call("POST", f"{base}/apps/{q(bundle)}/activities",
                                       {"attributesType": kind, "attributes": attributes, "contentState": content, "pushToken": True})
            check(activity.get("pushToken") and activity["state"] == "active", f"the app's start gave {activity}")
            return activity
        courier = {"name": "Sam", "vehicle": "bike"}
        delivery = start("DeliveryAttributes", {"orderNumber": "A-1042", "restaurant": "Luigi's"},
                         {"status": "Preparing", "etaMinutes": 25, "courier": courier})
        game = start("GameAttributes", {"homeTeam": "Lions", "awayTeam": "Bears"}, {"homeScore": 0, "awayScore": 0, "quarter": 1})
        parcel = start("DeliveryAttributes", {"orderNumber": "B-7", "restaurant": "Noodle Bar"},
                       {"status": "Out for delivery", "etaMinutes": 8, "courier": {"name": "Kim", "vehicle": "car"}})
        now = int(time.time())
        update_id = self.live_push(delivery["pushToken"], {"event": "update", "timestamp": now, "relevance-score": 90,
                                                           "content-state": {"status": "On its way", "etaMinutes": 12, "courier": courier}})
        self.live_push(game["pushToken"], {"event": "update", "timestamp": now, "relevance-score": 50, "stale-date": now - 60,
                                           "content-state": {"homeScore": 14, "awayScore": 10, "quarter": 3}})
        dismissal = now + 3600
        self.live_push(parcel["pushToken"], {"event": "end", "timestamp": now, "dismissal-date": dismissal,
                                             "content-state": {"status": "Delivered", "etaMinutes": 0, "courier": {"name": "Kim", "vehicle": "car"}}})
        listed = {a["activityId"]: a for a in self.admin.get(f"{base}/activities")["activities"]}
        states = {name: listed[a["activityId"]]["state"] for name, a in (("delivery", delivery), ("game", game), ("parcel", parcel))}
        check(states == {"delivery": "active", "game": "stale", "parcel": "ended"}, f"the API says {states}")
        check(listed[delivery["activityId"]]["contentState"]["etaMinutes"] == 12, "the update did not reach the activity")

        # From the update's record in the timeline to the device's Live Activities.
        self.tab("timeline")
        self.open_record(update_id)
        self.click("#detail .d-actions button[title^='The Live Activities on the device']")
        wait_for("the Devices tab", lambda: self.one("#panel-devices").is_displayed())
        live = f'#devices .live[data-device="{device}"]'
        card = lambda a: f'{live} .la-card[data-activity="{a["activityId"]}"]'
        row = lambda a: f'{live} .la-row[data-activity="{a["activityId"]}"]'
        content = lambda: self.js("const l = document.querySelector(arguments[0]); return l && !l.hidden ? l.textContent : null;", live)
        wait_for("the device's three Live Activities on its Lock Screen",
                 lambda: len(self.css(f"{live} .live-lock .la-card")) == 3 and "On its way" in (content() or ""), timeout=6)
        order = self.js("return Array.from(document.querySelectorAll(arguments[0] + ' .live-lock .la-card'), (c) => c.dataset.activity);", live)
        check(order == [delivery["activityId"], game["activityId"], parcel["activityId"]],
              f"the Lock Screen order is not by relevance (90, 50, none): {order}")

        def value(selector, key):
            found = self.css(f'{selector} .la-value[data-key="{key}"]')
            check(found, f"no {key} value in {selector}")
            return (found[0].find_element(By.CSS_SELECTOR, ".la-label").get_attribute("textContent"),
                    found[0].find_element(By.CSS_SELECTOR, ".la-text").get_attribute("textContent"))
        for key, expected in (("status", ("Status", "On its way")), ("etaMinutes", ("Eta minutes", "12")),
                              ("courier.name", ("Courier name", "Sam")), ("courier.vehicle", ("Courier vehicle", "bike"))):
            got = value(card(delivery), key)
            check(got == expected, f"the delivery card shows {key} as {got}, not {expected}")
        attributes = self.one(f'{card(delivery)} [data-field="attributes"]').get_attribute("textContent")
        check(attributes == "A-1042 · Luigi's", f"the delivery card's header values are {attributes!r}")
        check(value(card(game), "homeScore") == ("Home score", "14"), "the game card does not show the home score 14")

        # Stale: dimmed with a badge and its stale date; ended: its own look, with the time it leaves the Lock Screen.
        check("stale" in self.one(card(game)).get_attribute("class").split(), "the stale card has no stale look")
        badge = self.one(f'{card(game)} [data-field="stale"]').get_attribute("textContent")
        check(badge == "stale", f"the stale card's badge says {badge!r}")
        note = self.one(f"{card(game)} .la-note").get_attribute("textContent")
        check(time.strftime("%H:%M", time.localtime(now - 60)) in note, f"the stale card does not say since when: {note!r}")
        opacity = float(self.js("return getComputedStyle(document.querySelector(arguments[0])).opacity;", f"{card(game)} .la-values"))
        check(opacity < 0.8, f"the stale card's values are not dimmed (opacity {opacity})")
        check("ended" in self.one(card(parcel)).get_attribute("class").split(), "the ended card has no ended look")
        check(self.js("return getComputedStyle(document.querySelector(arguments[0])).filter;", card(parcel)).startswith("grayscale"),
              "the ended card is not greyed")
        ended = self.one(f"{card(parcel)} .la-note").get_attribute("textContent")
        check(ended.startswith("ended") and f"leaves the Lock Screen at {time.strftime('%H:%M', time.localtime(dismissal))}" in ended,
              f"the ended card's note is {ended!r}")
        # The Dynamic Island: the most relevant running one is in it; compact and expanded show the content.
        compact = self.one(f'{row(delivery)} [data-field="compact"]').get_attribute("textContent")
        check("On its way" in compact and "12" in compact, f"the compact Island shows {compact!r}")
        expanded = self.one(f'{row(delivery)} [data-field="expanded"]').get_attribute("textContent")
        check("Courier name" in expanded and "Sam" in expanded and "A-1042" in expanded, f"the expanded Island shows {expanded!r}")
        check("in the Island" in self.one(row(delivery)).get_attribute("textContent")
              and "in the Island" not in self.one(row(game)).get_attribute("textContent"), "the most relevant activity is not the one marked in the Island")
        check(self.css(f'{row(game)} [data-field="compact"]') and not self.css(f'{row(parcel)} [data-field="compact"]'),
              "a stale activity must stay in the Island, an ended one must leave it")
        state = self.one(f'{row(parcel)} [data-field="state"]').get_attribute("textContent")
        check(state == "ended", f"the ended activity's row says {state!r}")
        for kind, token in start_tokens.items():
            shown = self.one(f'{live} .la-tokens tr[data-type="{kind}"] [data-field="pushToStartToken"] button.tok').get_attribute("textContent")
            check(shown == f"{token[:6]}…{token[-4:]}", f"the push-to-start token of {kind} shows as {shown!r}")
        self.js("document.querySelector(arguments[0]).scrollIntoView({block: 'start'});", live)
        time.sleep(0.3)
        screenshot = self.extra_screenshot("activities")

        # The user dismisses the delivery: off the Lock Screen, listed as dismissed, and the API agrees.
        self.click(f'{row(delivery)} button[data-action="dismiss"]')
        wait_for("the API to say the activity is dismissed", lambda: next(
            a for a in self.admin.get(f"{base}/activities")["activities"] if a["activityId"] == delivery["activityId"])["state"] == "dismissed")
        wait_for("the dismissed activity to leave the Lock Screen", lambda: not self.css(card(delivery)) and not self.css(row(delivery))
                 and len(self.css(f"{live} .live-lock .la-card")) == 2, timeout=6)
        check(self.css(f'{live} .la-dismissed li[data-activity="{delivery["activityId"]}"]'), "the dismissed activity is not in the dismissed list")
        check("in the Island" in self.one(row(game)).get_attribute("textContent"), "the next most relevant activity did not take the Island")
        self.live_device = device
        self.log(f"Live Activities: labelled content state, stale badge, ended look, relevance order, Dynamic Island, "
                 f"push-to-start tokens; dismissed through the button; {screenshot}")

    def channels(self):
        """Broadcast channels (issue 20): two made through the channel management listener with the binary's
        `channels create`, an activity subscribed to one and a broadcast on it; the Channels tab lists them with
        their policy, counts, stored message and, for the selected one, its broadcasts from the journal."""
        key = ["--key", self.args.key, "--ca", self.args.ca]

        def create(policy):
            result = subprocess.run([self.args.binary, "channels", "create", "--bundle", self.args.topic, "--host", self.args.channel_sandbox,
                                     "--policy", str(policy), *key], capture_output=True, text=True, timeout=30)
            check(result.returncode == 0, f"channels create failed ({result.returncode}): {result.stdout}{result.stderr}")
            found = re.search(r"^apns-channel-id: (\S+)$", result.stdout, re.M)
            check(found, f"channels create printed no apns-channel-id: {result.stdout}")
            return found.group(1)
        stored_id, plain_id = create(1), create(0)
        device, q = getattr(self, "live_device", "ui-live-phone"), urllib.parse.quote
        subscribed = self.admin.call("POST", f"/api/v1/devices/{q(device)}/apps/{q(self.args.topic)}/activities",
                                     {"attributesType": "GameAttributes", "attributes": {"homeTeam": "Owls", "awayTeam": "Hawks"},
                                      "contentState": {"homeScore": 0, "awayScore": 0}, "channel": stored_id})
        payload = {"aps": {"event": "update", "timestamp": int(time.time()), "content-state": {"homeScore": 3, "awayScore": 1}}}
        sent = subprocess.run([self.args.binary, "send", "--channel", stored_id, "--bundle", self.args.topic, "--host", self.args.sandbox,
                               *key, json.dumps(payload)], capture_output=True, text=True, timeout=30)
        check(sent.returncode == 0 and re.search(r"^status: 200", sent.stdout, re.M), f"the broadcast failed ({sent.returncode}): {sent.stdout}{sent.stderr}")
        listed = {c["id"]: c for c in self.admin.get("/api/v1/channels")["channels"]}
        check(listed[stored_id]["broadcasts"] == 1 and listed[stored_id]["storedMessage"], f"the API's channel: {listed[stored_id]}")
        check((listed[stored_id].get("subscribers"), listed[plain_id].get("subscribers")) == (1, 0),
              f"the API's subscribers are {listed[stored_id].get('subscribers')} and {listed[plain_id].get('subscribers')}, expected 1 and 0")
        # The broadcast reached the one subscribed activity (on the online virtual device): its one journal
        # record says so, and the activity shows the broadcast's content state.
        journal = [r for r in self.admin.get("/api/v1/notifications?pushType=liveactivity&limit=500")["notifications"]
                   if (r.get("broadcast") or {}).get("channel") == stored_id]
        check(len(journal) == 1, f"{len(journal)} broadcast records for {stored_id} in the journal, expected 1")
        reach = journal[0]["broadcast"]
        check((journal[0].get("outcome"), reach.get("reached"), reach.get("outcomes")) == ("delivered", 1, {"delivered": 1}),
              f"the broadcast's record: outcome {journal[0].get('outcome')!r}, reach {reach}")
        check([(d.get("deviceId"), d.get("activityId")) for d in reach.get("deliveries") or []] == [(device, subscribed["activityId"])],
              f"the broadcast's deliveries {reach.get('deliveries')}, expected one to {device}'s activity {subscribed['activityId']}")
        activity = next((a for a in self.admin.get(f"/api/v1/devices/{q(device)}/activities")["activities"]
                         if a["activityId"] == subscribed["activityId"]), None)
        check(activity and activity["contentState"] == {"homeScore": 3, "awayScore": 1},
              f"the subscribed activity shows {activity and activity['contentState']}, not the broadcast's content state")

        self.tab("channels")
        row = lambda cid: f'#channel-rows tr[data-channel="{cid}"]'
        cell = lambda cid, field: self.js("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                                          f'{row(cid)} [data-field="{field}"]')
        wait_for("both channels in the Channels tab", lambda: self.css(row(stored_id)) and self.css(row(plain_id)), timeout=6)
        check(cell(stored_id, "policy") == "Most Recent Message Stored" and cell(plain_id, "policy") == "No Message Stored",
              f"the policies show as {cell(stored_id, 'policy')!r} and {cell(plain_id, 'policy')!r}")
        check(cell(stored_id, "broadcasts") == "1" and cell(plain_id, "broadcasts") == "0", "the broadcast counts are not 1 and 0")
        check(cell(stored_id, "stored") == "update · Home score: 3, Away score: 1", f"the stored message shows as {cell(stored_id, 'stored')!r}")
        check((cell(stored_id, "subscribers"), cell(plain_id, "subscribers")) == ("1", "0"),
              f"the subscribers show as {cell(stored_id, 'subscribers')!r} and {cell(plain_id, 'subscribers')!r}, expected 1 and 0")
        check(self.one("#count-channels").text == str(sum(1 for c in listed.values() if c["live"])), "the tab's count is not the live channels")
        # The filters: production has none of them; back to every environment.
        Select(self.one('#channels-filter select[name="environment"]')).select_by_value("production")
        wait_for("the production filter to hide the sandbox channels", lambda: not self.css(row(stored_id)))
        Select(self.one('#channels-filter select[name="environment"]')).select_by_value("")
        wait_for("the channels to come back", lambda: self.css(row(stored_id)))

        # The selected channel: its stored message and its broadcasts as the journal has them.
        self.click(f"{row(stored_id)} td.bundle")
        wait_for("the channel's details", lambda: self.one("#channel-detail").is_displayed() and stored_id in self.one("#channel-detail").text)
        check('"homeScore": 3' in self.one("#channel-stored").text, "the stored message's JSON is not shown")
        # Its one broadcast, as the journal has it: reached 1, one delivery, to the subscribed activity.
        shown = wait_for("the broadcast in the channel's list", lambda: self.css("#channel-broadcasts tbody.broadcast"))
        check(len(shown) == 1, f"{len(shown)} broadcasts listed, expected the journal's 1")
        check(shown[0].get_attribute("data-apns-id") == journal[0]["apnsId"], "the listed broadcast is not the journal's record")
        reached = self.one('#channel-broadcasts [data-field="reached"]').text
        check(reached == "1", f"the broadcast's reach shows as {reached!r}, expected 1")
        summary = self.one("#channel-broadcasts tr.deliveries summary").text
        check(summary == "1 delivery", f"the deliveries' summary reads {summary!r}")
        time.sleep(0.3)
        screenshot = self.extra_screenshot("channels")
        self.log(f"channels {stored_id} (Most Recent Message Stored) and {plain_id} (No Message Stored) listed, "
                 f"broadcast counted, stored and reaching its 1 subscriber; {screenshot}")

    def presentation(self):
        """How a device presents notifications (issue 23): an app with a MESSAGE category (a Reply text-input
        action, a destructive Delete that needs the device unlocked), three messages of one thread with summary-args
        and badges under a Work Focus, then a scheduled summary holding a fourth. The device card shows the Focus,
        the summary (next time, 1 waiting) and the badge, and its Notification Center the group with its summary
        line; the detail pane draws the buttons, refuses Delete while locked and answers Reply with text."""
        device, bundle, q = "ui-present-phone", self.args.topic, urllib.parse.quote
        base = f"/api/v1/devices/{q(device)}"
        token = self.admin.call("POST", "/api/v1/devices", {"bundleId": bundle, "environment": "sandbox", "deviceId": device, "categories": [
            {"identifier": "MESSAGE", "summaryFormat": "%u more messages from %@", "actions": [
                {"identifier": "reply", "title": "Reply", "textInput": {"buttonTitle": "Send", "placeholder": "Message"}},
                {"identifier": "delete", "title": "Delete", "options": ["destructive", "authenticationRequired"]}]}]})["token"]
        self.admin.call("PATCH", base, {"focus": {"name": "Work", "allowedPeople": ["carol"]}})
        message = lambda who, body, badge, **more: {"aps": {"alert": {"title": who, "body": body}, "category": "MESSAGE",
                                                            "thread-id": "chat-42", "summary-arg": who, "badge": badge, **more}}
        sent = [self.send(message("Alice", "Lunch?", 1), token=token)[0], self.send(message("Bob", "Running late", 2), token=token)[0],
                self.send(message("Alice", "At the usual place?", 3, **{"interruption-level": "time-sensitive"}), token=token)[0]]
        newest = wait_for("the newest message's record to be delivered", lambda: (lambda r: r if r.get("outcome") == "delivered" else None)(
            self.admin.get(f"/api/v1/notifications/{sent[-1]}")))
        check(newest["display"] == "notificationCenter" and newest["presentation"]["effectiveInterruptionLevel"] == "active",
              f"the message under the Focus: display {newest['display']!r}, presentation {newest['presentation']}")
        # The summary: its first time 3 h from now in the device's zone (UTC+5:30), so the held notification waits for it.
        offset = 330
        times = [time.strftime("%H:%M", time.gmtime(time.time() + offset * 60 + hours * 3600)) for hours in (3, 9)]
        self.admin.call("PATCH", base, {"scheduledSummary": {"times": times, "apps": [bundle], "utcOffsetMinutes": offset}})
        held_id, _ = self.send({"aps": {"alert": {"title": "Daily digest", "body": "5 new stories"}, "thread-id": "digest", "relevance-score": 0.8}}, token=token)
        center = wait_for("the held notification in the Notification Center", lambda: (lambda c: c if c["waitingForSummary"] else None)(
            self.admin.get(f"{base}/notification-center")))
        group = next(g for g in center["groups"] if g["threadId"] == "chat-42")
        check(group["summary"] == "2 more messages from Bob and Alice" and group["count"] == 3, f"the API's group: {group}")
        check(center["badges"] == {bundle: 3}, f"the API's badges: {center['badges']}")

        # The device card: Focus, summary, badge, and its Notification Center.
        self.tab("devices")
        card = f'.device[data-device="{device}"]'
        field = lambda css: self.js("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", css)
        wait_for("the Focus on the device card", lambda: field(f'{card} [data-field="focus"]') == "☾ Work", timeout=6)
        wait_for("the app's badge 3 on the device card", lambda: field(f'{card} tr[data-bundle="{bundle}"] [data-field="badge"]') == "3")
        wait_for("the summary's next time and 1 waiting", lambda: f"next {times[0]}" in (field(f'{card} [data-field="nextSummary"]') or "")
                 and field(f'{card} [data-field="waiting"]') == " · 1 waiting", timeout=6)
        stack = f'{card} .nc .nc-stack[data-thread="chat-42"]'
        wait_for("the chat-42 group with its summary line", lambda: field(f'{stack} [data-field="summary"]') == group["summary"], timeout=6)
        check(field(f"{stack} .notif-body") == "At the usual place?", f"the group's top card is {field(f'{stack} .notif-body')!r}, not the newest")
        check(field(f'{card} .nc-groups tr[data-thread="chat-42"] [data-field="count"]') == "3", "the group table does not count 3")
        check(self.css(f'{card} .nc [data-field="waitingForSummary"] li[data-apns-id="{held_id}"]'), "the held notification is not listed as waiting")
        # Its Lock Screen's clock is in the device's zone, as the summary's times are (the minute now or the next).
        now_ms = self.admin.get("/api/v1/clock")["nowMs"]
        device_clocks = {time.strftime("%H:%M", time.gmtime(now_ms / 1000 + offset * 60 + d)) for d in (0, 60)}
        wait_for(f"the Notification Center's Lock Screen to show the device's time {sorted(device_clocks)}",
                 lambda: field(f"{card} .nc-lock .lock-clock") in device_clocks, timeout=6)
        self.js("document.querySelector(arguments[0]).scrollIntoView({block: 'start'});", card)
        time.sleep(0.3)
        center_shot = self.extra_screenshot("notification-center")

        # The detail pane: the Presentation section, and the buttons under the preview.
        self.tab("timeline")
        self.open_record(sent[-1])
        section = lambda name: field(f'#presentation [data-field="{name}"]')
        check(section("level") == "time-sensitive asked for, active used", f"the level reads {section('level')!r}")
        check(section("thread") == "thread chat-42" and section("badge") == "3", f"group {section('thread')!r}, badge {section('badge')!r}")
        check(section("title") == "Alice" and section("body") == "At the usual place?", "the Presentation section does not show what was read")
        button = lambda action: f'#notif-actions button[data-action="{action}"]'
        check(field(f'{button("reply")} .na-title') == "Reply" and field(f'{button("reply")} .na-placeholder') == "Message",
              "the Reply button is not drawn with its placeholder")
        check("destructive" in self.one(button("delete")).get_attribute("class").split(), "the Delete button is not destructive")
        red = self.js("return getComputedStyle(document.querySelector(arguments[0])).color;", button("delete"))
        check(red == "rgb(255, 59, 48)", f"the destructive button's colour is {red}")
        # Locked: Delete needs authentication, and the API's refusal is shown.
        self.admin.call("PATCH", base, {"locked": True})
        self.expected_console_errors.append((f"/notifications/{sent[-1]}/respond", "status of 400"))
        self.click(button("delete"))
        wait_for("the refusal of Delete on the locked device", lambda: "requires authentication" in (field("#respond-result.err") or ""))
        # Reply: a field with the placeholder and the action's button title; the answer comes back.
        self.click(button("reply"))
        reply = wait_for("the reply field", lambda: self.css("#reply-text"))[0]
        check(reply.get_attribute("placeholder") == "Message" and field('#notif-actions button[data-send="reply"]') == "Send",
              "the reply field has not the placeholder Message and the button Send")
        reply.send_keys("On my way")
        self.click('#notif-actions button[data-send="reply"]')
        wait_for("the answer under the buttons", lambda: "On my way" in (field("#respond-result.ok") or ""))
        response = self.admin.get(f"/api/v1/notifications/{sent[-1]}")["presentation"]["userResponse"]
        check(response and response["actionIdentifier"] == "reply" and response["userText"] == "On my way", f"the record's userResponse is {response}")
        wait_for("the response in the Presentation section", lambda: (section("response") or "").startswith("Reply (reply): “On my way”"))
        check(self.one(button("reply")).get_attribute("disabled") is not None and "chosen" in self.one(button("reply")).get_attribute("class"),
              "after the answer the buttons are still clickable, or Reply is not marked")
        self.js("document.getElementById('lock-preview').scrollIntoView({block: 'start'});")
        time.sleep(0.3)
        shot = self.extra_screenshot("presentation")
        # Answered, it left Notification Center: the group is down to two.
        self.tab("devices")
        wait_for("the group to count 2", lambda: field(f'{card} .nc-groups tr[data-thread="chat-42"] [data-field="count"]') == "2", timeout=6)
        self.admin.call("PATCH", base, {"focus": None, "scheduledSummary": None, "locked": False})
        wait_for("the Focus off on the card", lambda: field(f'{card} [data-field="focus"]') == "off", timeout=6)
        self.log(f"presentation: Focus, summary (next {times[0]}, 1 waiting), badge 3, group summary {group['summary']!r}; Delete refused "
                 f"while locked, Reply answered; {center_shot}, {shot}")

    def load_tab(self):
        """The Load tab while h2load runs a bounded load (issue 11): live requests/s and its chart, the provider
        connections gauge, errors by reason (a few pushes to a token nobody has: 400 BadDeviceToken), and after
        the load the run's summary from GET /api/v1/stats."""
        step_began = time.monotonic()
        h2load = shutil.which("h2load")
        check(h2load, "h2load is missing (Debian package nghttp2-client; scripts/deps.sh test installs it)")
        token = self.admin.call("POST", "/api/v1/devices", {"bundleId": self.args.topic, "environment": "sandbox", "deviceId": "ui-load-phone"})["token"]
        jwt = subprocess.run([self.args.binary, "jwt", "--key", self.args.key], capture_output=True, text=True, timeout=10)
        check(jwt.returncode == 0 and jwt.stdout.strip(), f"jwt failed: {jwt.stdout}{jwt.stderr}")
        base = f"http://{self.args.h2c}" if self.args.h2c else f"https://{self.args.sandbox}"
        self.tab("load")
        self.click("#load-new-run")
        wait_for("the new run, with no requests yet", lambda: self.one("#run-requests").get_attribute("data-value") == "0"
                 and "Start new run" in (self.text("#load-run-since") or ""), timeout=5)

        # 2 connections x 400 requests/s for 5 s, and a third sending 20/s to a token nobody has: bounded in count and time.
        good_n, bad_n, seconds = 4000, 100, 5
        workdir = tempfile.mkdtemp(prefix="ui-load-")
        payload = os.path.join(workdir, "payload.json")
        with open(payload, "w") as f:
            json.dump({"aps": {"alert": {"title": "Load", "body": "one of many"}}}, f)
        common = ["-H", f"authorization: bearer {jwt.stdout.strip()}", "-H", f"apns-topic: {self.args.topic}", "-d", payload]
        runs = {
            "good": [h2load, "-n", str(good_n), "-c", "2", "-m", "10", f"--rps={good_n // seconds // 2}", *common, f"{base}/3/device/{token}"],
            "bad": [h2load, "-n", str(bad_n), "-c", "1", "-m", "1", f"--rps={bad_n // seconds}", *common, f"{base}/3/device/{'00' * 32}"],
        }
        procs = {name: subprocess.Popen(["timeout", "20", *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for name, command in runs.items()}
        began = time.monotonic()
        seen = {"rps": 0, "chart": 0, "provider": 0, "reason": False, "running": False, "latency": False, "badge": False}
        screenshot = None
        read = """
            const v = (s, a) => { const e = document.querySelector(s); return e ? e.getAttribute(a) : null; };
            const path = document.querySelector('#chart-rps path.line.k-all');
            return {rps: v('#load-rps', 'data-value'), peak: v('#chart-rps', 'data-peak'), path: path ? path.getAttribute('d') : '',
                    provider: v('#load-provider', 'data-value'), providerPeak: v('#load-provider', 'data-peak'),
                    reason: v('#load-reasons tr[data-reason="BadDeviceToken"]', 'data-count'), state: v('#load-run', 'data-state'),
                    p99: v('#load-latency [data-quantile="p99"]', 'data-value'), badge: !document.querySelector('#count-rps').hidden};"""
        try:
            while any(p.poll() is None for p in procs.values()):
                check(time.monotonic() - began < 20, "h2load ran for more than 20 s")
                now = self.js(read)
                seen["rps"] = max(seen["rps"], int(now["rps"] or 0))
                if now["path"] and "L" in now["path"]:
                    seen["chart"] = max(seen["chart"], int(now["peak"] or 0))
                seen["provider"] = max(seen["provider"], int(now["provider"] or 0), int(now["providerPeak"] or 0))
                seen["reason"] = seen["reason"] or int(now["reason"] or 0) > 0
                seen["running"] = seen["running"] or now["state"] == "running"
                seen["latency"] = seen["latency"] or bool(now["p99"])
                seen["badge"] = seen["badge"] or now["badge"]
                if screenshot is None and time.monotonic() - began > seconds * 0.85 and seen["rps"] and seen["reason"] and seen["provider"]:
                    screenshot = self.extra_screenshot("load")  # during the load: gauges up, charts filling
                time.sleep(0.1)
            outputs = {name: p.communicate(timeout=5)[0] for name, p in procs.items()}
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
            shutil.rmtree(workdir, ignore_errors=True)

        def counts(name):
            out = outputs[name]
            done = re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)
            codes = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx", out)
            check(procs[name].returncode == 0 and done and codes, f"h2load ({name}) failed ({procs[name].returncode}): {out[-800:]}")
            return int(done.group(1)), int(codes.group(1)), int(codes.group(2))
        good_done, good_2xx, _ = counts("good")
        bad_done, _, bad_4xx = counts("bad")
        check(good_2xx >= good_n * 0.95, f"only {good_2xx} of {good_n} pushes got a 2xx: {outputs['good'][-800:]}")
        check(bad_4xx == bad_n, f"{bad_4xx} of {bad_n} pushes to an unknown token got a 4xx: {outputs['bad'][-800:]}")
        check(seen["rps"] > 0, "the requests/s readout stayed at 0 during the load")
        check(seen["chart"] > 0, "the requests/s chart drew no data during the load")
        check(seen["provider"] >= 1, "the provider connections gauge never showed a connection during the load")
        check(seen["reason"], "errors by reason never listed BadDeviceToken during the load")
        check(seen["running"], "the run card never said the run was going on")
        check(seen["latency"], "no request latency percentiles during the load")
        check(seen["badge"], "the Load tab's requests/s badge never showed")
        if screenshot is None:
            screenshot = self.extra_screenshot("load")

        # The run's summary, from the journal: every request of the load, its statuses and the reason.
        total = good_done + bad_done
        attr = lambda css, name: (self.css(css) or [None])[0] and self.css(css)[0].get_attribute(name)
        wait_for(f"the run's summary to count {total} requests", lambda: int(attr("#run-requests", "data-value") or 0) >= total, timeout=6)
        wait_for("the summary's status counts", lambda: int(attr('#run-status [data-status="200"]', "data-count") or 0) >= good_2xx
                 and int(attr('#run-status [data-status="400"]', "data-count") or 0) >= bad_4xx, timeout=3)
        check(int(attr('#run-reasons [data-reason="BadDeviceToken"]', "data-count") or 0) >= bad_4xx, "the summary does not list the BadDeviceToken errors")
        check(self.one("#run-rps").text not in ("", "—") and self.one("#run-duration").text not in ("", "—"), "the summary shows no duration or requests/s")
        check(attr('#run-latency [data-quantile="p99"]', "data-value") is not None, "the summary shows no delivery latency")
        self.log(f"load tab: {total} requests by h2load ({base.split(':')[0]}); readout up to {seen['rps']}/s, chart peak {seen['chart']}/s, "
                 f"{seen['provider']} provider connections, BadDeviceToken listed; summary {attr('#run-requests', 'data-value')} requests; "
                 f"{time.monotonic() - step_began:.1f} s; {screenshot}")

    def older_records(self):
        # After the load step the journal holds thousands of records and the page the newest
        # 200: "Load 200 older" brings the next ones, in order, below them.
        self.driver.refresh()
        self.tab("timeline")
        wait_for("200 rows loaded", lambda: len(self.css("#rows > tr")) == 200, timeout=5)
        wait_for("the Load older button", lambda: self.one("#load-older").is_displayed(), timeout=5)
        oldest_before = min(int(tr.get_attribute("data-seq")) for tr in self.css("#rows > tr"))
        self.click("#load-older")
        wait_for("400 rows loaded", lambda: len(self.css("#rows > tr")) == 400, timeout=5)
        seqs = [int(tr.get_attribute("data-seq")) for tr in self.css("#rows > tr")]
        check(seqs == sorted(seqs, reverse=True), "the older rows are not below the newer ones in order")
        check(max(seqs[200:]) < oldest_before, "the older rows overlap the ones loaded first")

    def devices_past_the_first_page(self):
        # Past the 100 cards the tab draws: a device added here, or looked up by id, still shows.
        self.admin.call("POST", "/api/v1/devices/batch", {"count": 120, "idPrefix": "ui-many-", "bundleId": self.args.topic, "environment": "sandbox"})
        self.tab("devices")
        card = lambda device_id: self.css(f'#devices .card.device[data-device="{device_id}"]')
        form = self.one("#new-device")
        form.find_element(By.NAME, "bundleId").send_keys(self.args.topic)
        form.find_element(By.NAME, "deviceId").send_keys("ui-added-last")
        form.find_element(By.CSS_SELECTOR, "button").click()
        wait_for("the card of the device just added", lambda: card("ui-added-last"), timeout=5)
        check(not card("ui-many-99"), "a device past the first page is drawn unasked")
        find = self.one("#find-device")
        find.find_element(By.NAME, "deviceId").send_keys("ui-many-99")
        find.find_element(By.CSS_SELECTOR, "button").click()
        wait_for("the card of the device looked up", lambda: card("ui-many-99"), timeout=5)

    def deleted_through_the_api(self):
        # Records deleted through the admin API leave the page too (the stream's `deleted` event).
        self.tab("timeline")
        apns_id, _ = self.send({"aps": {"alert": "to be deleted"}})
        wait_for(f"the row of {apns_id}", lambda: self.row(apns_id))
        deleted = self.admin.call("DELETE", f"/api/v1/notifications?apnsId={apns_id}")
        check(deleted == {"deleted": 1}, f"DELETE answered {deleted!r}")
        wait_for(f"the row of {apns_id} to leave the page", lambda: self.row(apns_id) is None)

    def lock_screens_follow_the_emulators_clock(self):
        """The simulated Lock Screens (Live Activities, Notification Center) show the emulator's time, which
        POST /api/v1/clock moves ahead: 31 days and 3 hours on, their date and clock are the emulator's. They were
        the browser's: today's date above a card that ended on the emulator's day. The reset after this puts it back."""
        self.tab("devices")
        device = getattr(self, "live_device", "ui-live-phone")
        live = f'#devices .live[data-device="{device}"] .live-lock'
        wait_for("the Live Activities' Lock Screen", lambda: self.css(f"{live} .lock-date"), timeout=6)
        moved = self.admin.call("POST", "/api/v1/clock", {"advanceSeconds": 31 * 86400 + 3 * 3600})
        when = "{weekday: 'long', month: 'long', day: 'numeric'}"
        expected = self.js(f"return new Date(arguments[0]).toLocaleDateString(undefined, {when});", moved["nowMs"])
        today = self.js(f"return new Date().toLocaleDateString(undefined, {when});")
        check(expected != today, f"the emulator's date {expected!r} is the browser's")
        # The minute now and the next: the check may straddle one.
        clocks = set(self.js("return [0, 60000].map((d) => new Date(arguments[0] + d)).map((t) => "
                             "`${String(t.getHours()).padStart(2, '0')}:${String(t.getMinutes()).padStart(2, '0')}`);", moved["nowMs"]))
        texts = lambda selector: [e.get_attribute("textContent") for e in self.css(selector)]
        wait_for(f"the Live Activities' Lock Screen to show the emulator's date {expected!r} and time {sorted(clocks)}",
                 lambda: texts(f"{live} .lock-date") == [expected] and set(texts(f"{live} .lock-clock")) <= clocks, timeout=10)
        center = "#devices .nc:not([hidden]) .nc-lock"
        wait_for(f"the Notification Centers' Lock Screens to show the emulator's time {sorted(clocks)}",
                 lambda: texts(f"{center} .lock-clock") and set(texts(f"{center} .lock-clock")) <= clocks, timeout=10)
        dates = [d for d in texts(f"{center} .lock-date") if not d.startswith("☾")]  # a Focus shows its name instead
        check(all(d == expected for d in dates), f"a Notification Center's Lock Screen shows {dates}, not the emulator's {expected!r}")
        self.log(f"the Lock Screens show the emulator's date and time after POST /api/v1/clock ({expected})")
        # The timeline's rows from before the move are on another day than the emulator's now: their day shows.
        self.tab("timeline")
        day_and_time = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d$")
        wait_for("the timeline's earlier rows to show their day (MM-DD hh:mm:ss)",
                 lambda: (cells := texts("#rows td.c-time")) and all(day_and_time.match(c) for c in cells), timeout=10)
        self.log("the timeline's rows show their day once the emulator's clock is on another")

    def reset(self):
        self.tab("timeline")
        check(self.css("#rows tr"), "the timeline is empty before the reset")
        self.one("#reset").click()
        wait_for("the confirmation dialog", lambda: self.one("#confirm").get_attribute("open") is not None)
        self.one("#confirm-ok").click()
        wait_for("the timeline to empty", lambda: not self.css("#rows tr"))
        check(self.admin.get("/api/v1/notifications")["notifications"] == [], "records remain after the reset")
        check(self.one("#empty").is_displayed(), "no empty-state message after the reset")
        self.log("reset emptied the timeline")

    def asks_for_the_token_once(self):
        """With --admin-token: the page asks once, then everything works, also after a reload."""
        self.driver.get(self.args.admin.rstrip("/") + "/")
        wait_for("the token dialog", lambda: self.one("#login").get_attribute("open") is not None, timeout=5)
        check(self.one("#conn").get_attribute("data-state") != "live", "the event stream is live without the token")
        self.one("#login-token").send_keys("not-the-token")
        self.one("#login-ok").click()
        wait_for("the dialog to ask again after a wrong token",
                 lambda: self.one("#login").get_attribute("open") is not None and "not accepted" in self.one("#login-error").text,
                 timeout=5)
        self.one("#login-token").send_keys(self.args.admin_token)
        self.one("#login-ok").click()
        wait_for("the dialog to close", lambda: self.one("#login").get_attribute("open") is None)
        wait_for("the event stream to be live", lambda: self.one("#conn").get_attribute("data-state") == "live", timeout=5)
        wait_for("the header to show the version", lambda: self.one("#version").text.startswith("v"))
        self.driver.refresh()
        wait_for("the event stream to be live after a reload", lambda: self.one("#conn").get_attribute("data-state") == "live", timeout=5)
        check(self.one("#login").get_attribute("open") is None, "the page asked for the token again after a reload")
        self.log("asked for the token once (a wrong one asked again); kept across a reload")

    def works_with_the_token(self):
        apns_id, _ = self.send({"aps": {"alert": "with a token"}})
        wait_for("the row of a push (event stream with the token)", lambda: self.row(apns_id), timeout=5)
        self.tab("devices")
        form = self.one("#new-device")
        form.find_element(By.NAME, "bundleId").send_keys(self.args.topic)
        form.find_element(By.NAME, "deviceId").send_keys("ui-token-phone")
        form.find_element(By.CSS_SELECTOR, "button").click()

        def created():
            try:
                return self.admin.get("/api/v1/devices/ui-token-phone")
            except Failure:
                return None
        wait_for("the device added through the form (a POST with the token)", created)
        wait_for("the device in the list", lambda: self.css('.device[data-device="ui-token-phone"]'))
        self.log("live rows and a POST from the form work with the token")

    def console_is_clean(self):
        expected = lambda message: any(a in message and b in message for a, b in self.expected_console_errors)
        errors = [entry for entry in self.driver.get_log("browser") if entry.get("level") == "SEVERE"
                  and not (self.args.admin_token and "401" in entry.get("message", ""))
                  and not expected(entry.get("message", ""))]
        # The fault step makes a push fail on purpose, but nothing in the page may log an error.
        check(not errors, "browser console errors: " + "; ".join(e.get("message", "") for e in errors))

    def run(self):
        steps = [self.page_loads, self.some_history, self.live_row, self.detail_pane, self.escaping, self.keyboard_and_filters,
                 self.screenshot, self.validators, self.device_controls, self.refused_change, self.fault_rules, self.accounts, self.live_activities, self.channels, self.presentation, self.load_tab, self.older_records, self.devices_past_the_first_page, self.deleted_through_the_api, self.lock_screens_follow_the_emulators_clock, self.reset, self.console_is_clean]
        if self.args.admin_token:
            steps = [self.asks_for_the_token_once, self.works_with_the_token, self.console_is_clean]
        began = time.monotonic()
        self.start_browser()
        try:
            for step in steps:
                try:
                    step()
                except Failure as e:
                    raise Failure(f"{step.__name__}: {e}")
                except WebDriverException as e:
                    raise Failure(f"{step.__name__}: browser error: {e.msg}")
        finally:
            if self.driver:
                self.driver.quit()
        row = self.timings.get("row after response")
        print(f"UI test passed in {time.monotonic() - began:.1f} s"
              + (f"; new row {max(0, row) * 1000:.0f} ms after the response" if row is not None else ""), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin", required=True, help="admin base URL, http://HOST:PORT")
    parser.add_argument("--sandbox", required=True, help="sandbox provider listener HOST:PORT")
    parser.add_argument("--ca", required=True, help="CA file to trust")
    parser.add_argument("--key", required=True, help="TEAMID:KEYID:PATH of the provider key")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--token", required=True, help="a device token with the topic's app installed")
    parser.add_argument("--binary", required=True, help="the apns-emulator binary (for its send command)")
    parser.add_argument("--screenshot", help="PNG to write (the full run)")
    parser.add_argument("--channel-sandbox", help="the emulator's channel management listener HOST:PORT (--channel-sandbox-listen), for the channels step")
    parser.add_argument("--device", help="the emulator's device socket HOST:PORT, for the refused-change step")
    parser.add_argument("--h2c", help="the emulator's cleartext HTTP/2 sandbox listener HOST:PORT, for the load step (default: TLS to --sandbox)")
    parser.add_argument("--admin-token", help="the emulator's --admin-token: check that the page asks for it once, and works")
    args = parser.parse_args()
    if not args.admin_token and not args.screenshot:
        parser.error("--screenshot is required (except with --admin-token)")
    if not args.admin_token and not args.channel_sandbox:
        parser.error("--channel-sandbox is required (except with --admin-token)")
    args.token = args.token.lower()
    try:
        UITest(args).run()
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
