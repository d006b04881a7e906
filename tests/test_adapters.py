"""The built-in adapters (open point 5, issue 17): http.status, stripe and github readings, and the mail.send
lever. Pure parts as tables (write_mail, the mandate's and config's adapter syntax); adapter_get against real
HTTP and HTTPS servers on 127.0.0.1; and black-box, a real avsmd whose mail command is a real script that
saves its standard input, and whose adapters read real servers in the test."""

import http.server
import json
import os
import shutil
import ssl
import subprocess
import threading
import time

import pytest

from conftest import ROOT, Avsm, make_venture, write

import avsm


# ---- write_mail: records in, the message out ---------------------------------

SENDER = "ops@example.com"

MAILS = [
    # the issue's two-From message: the message's own From goes, avsm's is the only one
    ("two From", "From: mallory@example.net\nTo: team@example.com\nSubject: hi\n\nbody\n",
     "From: ops@example.com\nTo: team@example.com\nSubject: hi\n\nbody\n", ["From"]),
    ("no From", "To: team@example.com\nSubject: hi\n\nbody\n",
     "From: ops@example.com\nTo: team@example.com\nSubject: hi\n\nbody\n", []),
    ("any case, folded, Sender and Return-Path",
     "To: team@example.com\nfROM: Mallory\n <mallory@example.net>\n\t(folded twice)\nSENDER: m@example.net\n"
     "Return-Path: <bounce@example.net>\nSubject: a\n  folded subject\n\nbody\n",
     "From: ops@example.com\nTo: team@example.com\nSubject: a\n  folded subject\n\nbody\n",
     ["fROM", "SENDER", "Return-Path"]),
    ("a From: line in the body stays", "Subject: s\n\nFrom: someone in the body\n\nFrom: again\n",
     "From: ops@example.com\nSubject: s\n\nFrom: someone in the body\n\nFrom: again\n", []),
    ("CRLF kept", "From: m@example.net\r\nTo: t@example.com\r\n\r\nbody\r\n",
     "From: ops@example.com\r\nTo: t@example.com\r\n\r\nbody\r\n", ["From"]),
    ("an empty body", "To: t@example.com\n\n", "From: ops@example.com\nTo: t@example.com\n\n", []),
    ("other headers as written", "To: a@example.com, b@example.com\nCc: c@example.com\nX-From: kept\nReply-To: r@example.com\n\nb",
     "From: ops@example.com\nTo: a@example.com, b@example.com\nCc: c@example.com\nX-From: kept\nReply-To: r@example.com\n\nb", []),
]


@pytest.mark.parametrize("why,message,piped,dropped", MAILS, ids=[m[0] for m in MAILS])
def test_write_mail_sets_exactly_one_from(why, message, piped, dropped):
    """Issue 17 item 1, CONFIG-07: mail.send pipes exactly one From:, adapters.mail.from, replacing any the
    message has (any case, folded lines included); Sender: and Return-Path: go too; the rest as written."""
    mail = avsm.write_mail(message, SENDER)
    assert (mail.text, mail.dropped) == (piped, dropped)
    assert [line for line in mail.text.split("\n\n")[0].splitlines() if line.lower().startswith("from:")] == \
        ["From: ops@example.com"]


BAD_MAILS = [
    ("no blank line", "From: m@example.net\nTo: t@example.com\nSubject: hi\nbody\n", "no blank line"),
    ("one line", "hello", "no blank line"),
    ("no header block", "\nbody\n", "no headers"),
    ("a bare CR", "To: t@example.com\rFrom: m@example.net\n\nbody\n", "bare CR"),
    ("a bare CR in the body", "To: t@example.com\n\nbody\rmore\n", "bare CR"),
    ("not a header", "Hello there\nTo: t@example.com\n\nbody\n", "line 1 of the message is not a header"),
    ("an mbox From line", "From mallory@example.net Mon Jan 1\nTo: t@example.com\n\nb\n", "not a header"),
    ("a space before the colon", "To: t@example.com\nFrom : m@example.net\n\nb\n", "line 2 of the message is not a header"),
    ("a folded first line", " From: m@example.net\nTo: t@example.com\n\nb\n", "folded line"),
]


@pytest.mark.parametrize("why,message,words", BAD_MAILS, ids=[m[0] for m in BAD_MAILS])
def test_write_mail_refuses_a_message_without_headers_and_a_body(why, message, words):
    """Issue 17 item 1: a message with no header block, no blank line, a line that is no header, or a bare CR
    is refused with the reason (and the gate refuses it: payload_problem)."""
    with pytest.raises(ValueError) as err:
        avsm.write_mail(message, SENDER)
    assert words in str(err.value)
    spec = {"name": "notify", "takes": "text", "run": "mail.send", "budget": None}
    assert words in avsm.payload_problem(spec, message)
    assert avsm.payload_problem(spec, "To: t@example.com\n\nbody\n") is None
    assert "takes text" in avsm.payload_problem(spec, None)     # a controller's run has no message: refused


# ---- the mandate's and the config's adapter syntax ---------------------------

VENTURE_HEAD = "purpose: p\ncontroller: {kind: threshold, above: 10, action: reset}\ncadence: 10s\n" \
               "permitted:\n  - {name: reset, run: ./reset, cap: 1/hour, reversible: true}\n"

BAD_MANDATES = [
    ("metric: http.status\n", "2:1", "'http.status' is not an adapter reading; write http.status URL"),
    ("metric: http.status file:///etc/passwd\n", "2:1", "http.status reads an http:// or https:// URL"),
    ("metric: stripe https://api.stripe.com/v1/balance\n", "2:1", "stripe reads a path under the url of adapters: stripe:"),
    ("metric: \"github repos/a/b#stargazers_count\"\n", "2:1", "is not a JSON pointer; it begins with /"),
    ("metric: count\nguards:\n  - {name: up, adapter: http.status ftp://example.com/, above: 299}\n", "4:16",
     "http.status reads an http:// or https:// URL"),
    ("metric: count\npermitted:\n  - {name: notify, run: mail.send, takes: json, cap: 1/hour, reversible: true}\n",
     "4:36", "mail.send takes text"),
]


@pytest.mark.parametrize("text,where,words", BAD_MANDATES)
def test_a_mandate_names_its_adapter_reading_whole(text, where, words):
    """MANDATE-04 GUARD-01 open point 5, issue 17 item 2: an adapter reading is the adapter and one word (an
    http:// or https:// URL, or a PATH with an optional #/pointer); mail.send takes text; each refused at
    file:line:col."""
    mandate = "purpose: p\n" + text + "controller: {kind: threshold, above: 10, action: reset}\ncadence: 10s\n"
    if "permitted" not in text:
        mandate += "permitted:\n  - {name: reset, run: ./reset, cap: 1/hour, reversible: true}\n"
    else:
        mandate = mandate.replace("action: reset", "action: notify")
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(mandate, "m.yaml")
    assert err.value.code == 78 and str(err.value).startswith(f"m.yaml:{where}: ") and words in str(err.value), str(err.value)


def test_good_adapter_readings_hold():
    """MANDATE-04 GUARD-01: the README's adapter readings parse as written."""
    for metric in ("http.status https://example.com/health", '"stripe v1/balance#/available/0/amount"',
                   '"github repos/4esv/avsmd#/stargazers_count"', "stripe v1/balance"):
        m = avsm.parse_mandate(VENTURE_HEAD + f"metric: {metric}\n", "m.yaml")
        assert m["adapter"] == metric.strip('"')


BAD_CONFIGS = [
    ("adapters:\n  stripe: {url: api.stripe.com}\n", "2:12", "'api.stripe.com' is not a URL"),
    ("adapters:\n  github: {url: \"file:///etc\"}\n", "2:12", "is not a URL"),
    ("adapters:\n  mail: {command: sendmail -t -i, from: \"ops@example.com\\nBcc: x@example.net\"}\n", "2:35",
     "from is one address on one line"),
]


@pytest.mark.parametrize("text,where,words", BAD_CONFIGS)
def test_the_config_adapters_hold(text, where, words):
    """CONFIG-06 CONFIG-07 CONFIG-10: an adapter's url is http:// or https://; mail's from is one line."""
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_config(text)
    assert str(err.value).startswith(f"config.yaml:{where}: ") and words in str(err.value), str(err.value)


# ---- real servers on 127.0.0.1 -----------------------------------------------

class Site:
    """An HTTP or HTTPS server on 127.0.0.1 in a thread: each GET answers from routes[path] =
    (status, body, headers[, delay]), 404 otherwise, and is kept in `seen` as (path, headers)."""

    def __init__(self, cert=None):
        self.routes, self.seen = {}, []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                site.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                status, body, headers, *delay = site.routes.get(self.path, (404, b"{}", {}))
                if delay:
                    time.sleep(delay[0])
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*cert)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if cert else 'http'}://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def json(self, path, obj, status=200):
        self.routes[path] = (status, json.dumps(obj).encode(), {"content-type": "application/json"})

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site():
    s = Site()
    yield s
    s.close()


def closed_port():
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def certs(workdir):
    """A private CA with a certificate for 127.0.0.1 it signed, and a self-signed one no CA vouches for."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test certificates")
    d = os.path.join(workdir, "tls")
    os.makedirs(d)

    def ssl_cmd(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    ssl_cmd("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=avsm test CA")
    ssl_cmd("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "site.key", "-out", "site.csr", "-subj", "/CN=127.0.0.1")
    write(os.path.join(d, "ext"), "subjectAltName=IP:127.0.0.1\n")
    ssl_cmd("x509", "-req", "-in", "site.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "site.pem", "-days", "2", "-extfile", "ext")
    ssl_cmd("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "self.key", "-out", "self.pem", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
    return {name: os.path.join(d, name) for name in ("ca.pem", "site.pem", "site.key", "self.pem", "self.key")}


def test_an_adapters_get_keeps_to_its_time_limit(site):
    """Issue 17 item 2 (the time limit): an adapter's GET has its limit in all; a slower answer is an
    OSError saying so, well before the server would have answered."""
    site.routes["/slow"] = (200, b"{}", {}, 5)
    t0 = time.monotonic()
    with pytest.raises(OSError) as err:
        avsm.adapter_get(site.url + "/slow", limit=0.5)
    assert time.monotonic() - t0 < 4 and "no answer within 0.5 s" in str(err.value)
    assert avsm.ADAPTER_TIMEOUT == 30


def test_a_key_goes_to_the_configured_url_alone(site):
    """KEYS-01 open point 5, issue 17 item 2: with a key (stripe, github) the GET sends it as a bearer token and
    follows no redirect, so the key never reaches the place a redirect names; http.status (no key) follows
    redirects and reads the last status."""
    other = Site()
    try:
        other.routes["/there"] = (204, b"", {})
        site.routes["/here"] = (302, b"", {"location": other.url + "/there"})
        status, _ = avsm.adapter_get(site.url + "/here", key="sk_test_KEY")
        assert status == 302 and other.seen == []
        assert site.seen[-1][1]["authorization"] == "Bearer sk_test_KEY"
        assert avsm.adapter_get(site.url + "/here")[0] == 204 and "authorization" not in other.seen[-1][1]
    finally:
        other.close()
    with pytest.raises(OSError) as err:
        avsm.adapter_get("file:///etc/passwd")
    assert "not an http:// or https:// URL" in str(err.value)


# ---- black-box: a real avsmd ----------------------------------------------------

SAVEMAIL = '#!/bin/sh\ncat > "{d}/got.$$"\necho "$@" > "{d}/args.$$"\n'

MAILER = """purpose: Tell the team.
metric: count
controller: {kind: threshold, above: 100, action: notify}
cadence: 1s
permitted:
  - {name: notify, run: mail.send, cap: 10/hour, reversible: true}
"""


def mail_home(av, workdir, sender="ops@example.com"):
    """A home whose mail command is a real script saving each message it is given; return its directory."""
    box = os.path.join(workdir, "box")
    os.makedirs(box)
    save = write(os.path.join(box, "..", "savemail"), SAVEMAIL.format(d=box), 0o755)
    os.makedirs(av.home, mode=0o700, exist_ok=True)
    write(os.path.join(av.home, "config.yaml"),
          f"adapters:\n  mail: {{command: \"{os.path.realpath(save)} -t -i\", from: {sender}}}\n")
    return box


def sent(box):
    """The messages the mail command was given, oldest first."""
    names = sorted((n for n in os.listdir(box) if n.startswith("got.")), key=lambda n: os.stat(os.path.join(box, n)).st_mtime_ns)
    return [open(os.path.join(box, n), "rb").read().decode() for n in names]


def start_mailer(av, workdir):
    box = mail_home(av, workdir)
    d = make_venture(workdir, "team", MAILER, {"report": "#!/bin/sh\necho 5\n"})
    av.start()
    assert av.cli("add", d).returncode == 0
    av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "report"], timeout=10, what="the first report")
    return box


def propose_mail(av, message):
    """`avsm propose team notify --payload -`; return (the run, the new records)."""
    before = av.records()[-1][0]
    run = av.cli("propose", "team", "notify", "--payload", "-", input=message)
    new = [(s, r) for s, _, r in av.records(before) if r["kind"] != "report"]
    return run, new


def test_mail_send_pipes_exactly_one_from(av, workdir):
    """Issue 17 item 1, CONFIG-07 open point 5: a real avsmd's mail.send lever, given a message with a From: of
    its own (the issue's two-From message) and one with a folded lower-case from:, Sender: and Return-Path:,
    pipes to the configured command exactly one From:, adapters.mail.from, the rest of the headers and the body
    as written; the action's proof says that From was set."""
    box = start_mailer(av, workdir)
    messages = [("From: mallory@example.net\nTo: team@example.com\nSubject: deploy done\n\nAll green.\n", ["From"]),
                ("to: team@example.com\nfrom: Mallory\n <mallory@example.net>\nSender: m@example.net\n"
                 "Return-Path: <m@example.net>\nSubject: second\n\nFrom: a line of the body\n",
                 ["from", "Sender", "Return-Path"])]
    for n, (message, dropped) in enumerate(messages, 1):
        run, _ = propose_mail(av, message)
        assert run.returncode == 0, run.stderr
        (action_seq, action), = av.wait_for(
            lambda rs: [(s, r) for s, _, r in rs if r["kind"] == "action" and r["lever"] == "notify"][n - 1:n],
            timeout=10, what=f"action {n}")
        av.wait_for(lambda rs: [r for _, _, r in rs if r["kind"] == "outcome" and r["action"] == action_seq and r["ok"]],
                    timeout=10, what=f"mail {n} sent")
        piped = sent(box)[n - 1]
        head, _, body = piped.partition("\n\n")
        froms = [line for line in head.split("\n") if line.lower().startswith("from:")]
        assert froms == ["From: ops@example.com"], piped
        assert not [line for line in head.split("\n") if line.lower().startswith(("sender:", "return-path:"))]
        assert piped == avsm.write_mail(message, "ops@example.com").text
        assert "mallory" not in head and body == message.partition("\n\n")[2]
        steps = action["proof"]["steps"]
        assert any(s.startswith("From: is set by avsm (adapters.mail.from") for s in steps), steps
        assert any(all(h + ":" in s for h in dropped) for s in steps), steps
    assert open(os.path.join(box, [n for n in os.listdir(box) if n.startswith("args.")][0])).read() == "-t -i\n"


def test_mail_send_refuses_a_message_without_headers_and_body_before_anything_runs(av, workdir):
    """Issue 17 item 1: a message with no blank line, no header block, or a bare CR is refused by the gate with
    the reason (avsm propose exits 65, a refusal record, no action), and the mail command never runs."""
    box = start_mailer(av, workdir)
    for message, words in (("From: mallory@example.net\nTo: team@example.com\nSubject: hi\nno blank line\n", "no blank line"),
                           ("\njust a body\n", "no headers"),
                           ("To: team@example.com\rBcc: all@example.com\n\nbody\n", "bare CR")):
        run, new = propose_mail(av, message)
        assert run.returncode == 65 and words in run.stderr, (run.returncode, run.stderr)
        refusals = [r for _, r in new if r["kind"] == "refusal"]
        assert refusals and words in refusals[0]["why"] and "action" not in [r["kind"] for _, r in new]
    time.sleep(0.5)
    assert sent(box) == []


STRIPE = """purpose: Watch the balance.
metric: "stripe v1/balance#/available/0/amount"
controller: {kind: threshold, above: 1000000, action: lower}
cadence: 1s
permitted:
  - {name: lower, run: ./lower, cap: 1/hour, reversible: true}
"""


def reports(av, venture, after=0):
    return [r for s, _, r in av.records(after) if r["kind"] == "report" and r["venture"] == venture]


def next_report(av, venture, check, what):
    after = av.records()[-1][0]
    return av.wait_for(lambda rs: [r for r in reports(av, venture, after) if check(r)], timeout=10, what=what)[0]


def test_json_adapters_fail_on_a_refused_connection_a_non_2xx_and_a_pointer_to_no_number(av, workdir, site):
    """REPORT-01 open point 5, issue 17 items 2 and 3: the stripe and github adapters read the number at the
    pointer of a 2xx JSON answer, with the key from `keys` as a bearer token that no record holds; a refused
    connection, a non-2xx (with the error body's message), a redirect, and a pointer to text, true or to
    nothing each fail the reading, saying why."""
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"),
          f"adapters:\n  stripe: {{url: {site.url}/}}\n  github: {{url: http://127.0.0.1:{closed_port()}}}\n")
    write(os.path.join(av.home, "keys"), "stripe=sk_test_SECRET\n", 0o600)
    site.json("/v1/balance", {"available": [{"amount": 1234, "currency": "usd", "live": True}]})
    bal = make_venture(workdir, "bal", STRIPE, {"lower": "#!/bin/sh\n"})
    stars = make_venture(workdir, "stars", STRIPE.replace("stripe v1/balance#/available/0/amount",
                                                          "github repos/4esv/avsmd#/stargazers_count"), {"lower": "#!/bin/sh\n"})
    av.start()
    for d in (bal, stars):
        assert av.cli("add", d).returncode == 0
    assert next_report(av, "bal", lambda r: r["value"] == 1234, "the balance")
    assert site.seen[-1][0] == "/v1/balance" and site.seen[-1][1]["authorization"] == "Bearer sk_test_SECRET"
    refused = next_report(av, "stars", lambda r: r["status"] == "failed", "a refused connection")
    assert "Connection refused" in refused["note"], refused

    site.json("/v1/balance", {"error": {"type": "invalid_request_error", "message": "No such key sk_test_SECRET"}}, 401)
    failed = next_report(av, "bal", lambda r: r["status"] == "failed", "a 401")
    assert "HTTP 401: No such key [key]" in failed["note"], failed
    site.json("/v1/balance", {"available": [{"amount": 77}]}, 503)
    assert "HTTP 503" in next_report(av, "bal", lambda r: r["status"] == "failed" and "503" in r["note"], "a 503")["note"]
    site.routes["/v1/balance"] = (301, b"", {"location": site.url + "/v2/balance"})
    assert "a redirect" in next_report(av, "bal", lambda r: r["status"] == "failed" and "301" in r["note"], "a 301")["note"]
    for answer, found in (({"available": [{"amount": "1234"}]}, "holds text"),
                          ({"available": [{"amount": True}]}, "holds true or false"),
                          ({"available": []}, "holds nothing")):
        site.json("/v1/balance", answer)
        bad = next_report(av, "bal", lambda r: r["status"] == "failed" and found in r["note"], found)
        assert "no number at that pointer" in bad["note"] and bad["value"] is None
    site.routes["/v1/balance"] = (200, b"[" + b"1," * (200 * 1024) + b"1]", {})
    big = next_report(av, "bal", lambda r: r["status"] == "failed" and "KiB" in r["note"], "a big answer")
    assert "the answer is bigger than 256 KiB" in big["note"] and "exit 65" in big["note"]
    assert "sk_test_SECRET" not in json.dumps([r for _, _, r in av.records()])


HTTP_STATUS = STRIPE.replace('"stripe v1/balance#/available/0/amount"', "http.status {url}")


def test_http_status_reads_any_status_verifies_tls_and_honours_ssl_cert_file(av, workdir, certs):
    """GUARD-01 REPORT-01 open point 5, issue 17 item 2: http.status reads the status code of a GET, a 404 as
    much as a 204 (a status is the reading, not a failure); an https:// site is verified: one whose certificate
    a private CA signed is read when avsmd runs with SSL_CERT_FILE naming that CA, one no CA vouches for fails
    the reading, as does a refused connection."""
    trusted, untrusted = Site((certs["site.pem"], certs["site.key"])), Site((certs["self.pem"], certs["self.key"]))
    daemon = av
    try:
        trusted.routes["/health"] = (204, b"", {})
        trusted.routes["/big"] = (200, b"<p>a page bigger than a JSON adapter reads</p>" * 10000, {})
        untrusted.routes["/health"] = (204, b"", {})
        ventures = {"ok": trusted.url + "/health", "gone": trusted.url + "/gone", "page": trusted.url + "/big", "forged": untrusted.url + "/health",
                    "down": f"http://127.0.0.1:{closed_port()}/health"}
        av = daemon = Avsm(av.bindir, av.home, env={"SSL_CERT_FILE": certs["ca.pem"]})
        os.makedirs(av.home, mode=0o700)
        av.start()
        for name, url in ventures.items():
            assert av.cli("add", make_venture(workdir, name, HTTP_STATUS.replace("{url}", url), {"lower": "#!/bin/sh\n"})).returncode == 0
        assert next_report(av, "ok", lambda r: r["status"] != "failed", "the health")["value"] == 204
        assert next_report(av, "gone", lambda r: r["status"] != "failed", "a 404")["value"] == 404
        assert next_report(av, "page", lambda r: True, "a big page")["value"] == 200     # its body is no reading
        forged = next_report(av, "forged", lambda r: True, "the untrusted site")
        assert forged["status"] == "failed" and "CERTIFICATE_VERIFY_FAILED" in forged["note"], forged
        down = next_report(av, "down", lambda r: True, "the refused connection")
        assert down["status"] == "failed" and "Connection refused" in down["note"], down
    finally:
        if daemon.proc is not None:
            code, _ = daemon.stop()
            assert code == 0, daemon.stderr()
        trusted.close()
        untrusted.close()


def test_a_guards_unwind_by_mail_holds_a_message():
    """GUARD-05 issue 17 item 1: a guard's unwind through a mail.send lever names a whole message (headers, a
    blank line, a body); one without its blank line is refused when the mandate is read, not at the run."""
    head = ("purpose: p\nmetric: count\ncontroller: {kind: threshold, above: 10, action: notify}\ncadence: 10s\n"
            "permitted:\n  - {name: notify, run: mail.send, cap: 1/hour, reversible: true}\nguards:\n"
            "  - {name: up, run: ./up, above: 1, unwind: {action: notify, payload: ")
    m = avsm.parse_mandate(head + '"To: team@example.com\\nSubject: down\\n\\nThe site is down.\\n"}}\n', "m.yaml")
    assert m["guards"][0]["unwind"]["payload"].startswith("To: team@example.com\n")
    with pytest.raises(avsm.Fail) as err:
        avsm.parse_mandate(head + '"To: team@example.com\\nThe site is down.\\n"}}\n', "m.yaml")
    assert str(err.value).startswith("m.yaml:8:") and "sends mail, and the message has no blank line" in str(err.value)


def readme_adapters_blocks():
    """The fenced blocks of the README's Adapters section, in order."""
    with open(os.path.join(ROOT, "README.md")) as fh:
        text = fh.read()
    section = text.split("\n## Adapters\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("\n", 1)[1] for block in section.split("```")[1::2]]


def test_the_readmes_adapters_section_shows_what_avsmd_does(av):
    """CLI-04 CONFIG-06 CONFIG-07 open point 4, issue 17 item 2: the README's adapters: config holds, `avsmd -T`
    on it prints exactly the output the README shows (adapters: included, and no port:, issue 23), and its shop mandate holds."""
    blocks = readme_adapters_blocks()
    config = next(b for b in blocks if b.startswith("adapters:"))
    shown = next(b for b in blocks if b.startswith("nightly:"))
    os.makedirs(av.home, mode=0o700)
    write(os.path.join(av.home, "config.yaml"), config)
    run = av.daemon_cmd("-T")
    assert run.returncode == 0 and run.stdout == shown, run.stdout
    assert avsm.parse_config(run.stdout) == avsm.parse_config(config)     # it reads back as the same config
    shop = next(b for b in blocks if b.startswith("# shop/mandate.yaml"))
    m = avsm.parse_mandate(shop, "shop/mandate.yaml")
    assert m["adapter"] == "stripe v1/balance#/available/0/amount" and m["levers"]["notify"]["takes"] == "text"
    assert m["guards"][0]["adapter"] == "http.status https://shop.example.com/health"


def site_venture(workdir, site):
    """A venture `web` that reads http.status of the site's /up (200) every second, and whose lever does nothing."""
    site.routes["/up"] = (200, b"ok", {})
    return make_venture(workdir, "web", f"""purpose: Watch a site.
metric: http.status {site.url}/up
controller: {{kind: threshold, above: 500, action: noop}}
cadence: 1s
permitted:
  - {{name: noop, run: ./noop, cap: 1/hour, reversible: true}}
""", {"noop": "#!/bin/sh\n"})


def test_a_pth_file_of_site_packages_runs_in_no_process_avsm_starts_itself(av, workdir, site):
    """RUN-12, ADAPTER-*: avsm's own processes (the avsmd it execs into, the warden, a built-in adapter) start
    without `site` (python -S), so a .pth file in site-packages runs no code in them; it needs nothing
    outside the standard library. Here a venv's .pth writes down each process it runs in: only the client
    and the avsmd the test started, both started as a user starts them, may appear."""
    import sys
    venv = os.path.join(workdir, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    packages = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
    marks = os.path.join(workdir, "marks")
    write(os.path.join(packages, "mark.pth"),
          f"import os; open({marks!r}, 'ab').write(b'%d %d ' % (os.getpid(), os.getppid()) + open('/proc/self/cmdline', 'rb').read() + b'\\n')\n")
    av.python, av.flags = os.path.join(venv, "bin", "python"), []
    d = site_venture(workdir, site)
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: len([r for _, _, r in rs if r["kind"] == "report" and r["venture"] == "web"]) >= 2
                       and rs, timeout=15, what="two reports of the site")
    assert all(r["status"] == "trusted" for _, _, r in recs if r["kind"] == "report" and r["venture"] == "web")
    with open(marks, "rb") as fh:       # pid, parent, command line: once per site-packages dir (lib64 is lib)
        started = {tuple(line.split(b" ", 2)[:2]) + tuple(line.split(b" ", 2)[2].split(b"\0")[1:2])
                   for line in fh.read().splitlines()}
    programs = [os.path.basename(argv1) for _, _, argv1 in started]
    assert programs.count(b"avsmd") == 1, started                           # the .pth does run where it may
    assert set(programs) == {b"avsm", b"avsmd"}, started                      # and nowhere else


def test_a_venture_module_named_as_the_standard_librarys_is_not_imported_by_avsm(av, workdir, site):
    """RUN-12, ADAPTER-*: avsm's own programs that run in a venture's directory (a built-in adapter, the
    forecast) and the warden put no directory before the standard library on sys.path (python -P): a json.py
    (or ssl.py) in the venture is not imported in place of the standard library's. Before, the http.status
    reading imported the venture's json.py, and every report failed with its error."""
    d = site_venture(workdir, site)
    for name in ("json.py", "ssl.py", "urllib.py"):
        write(os.path.join(d, name), f"open({os.path.join(d, 'imported')!r}, 'a').write({name!r} + '\\n')\n"
                                     f"raise ImportError('the venture\\'s own {name}')\n")
    av.start()
    assert av.cli("add", d).returncode == 0
    recs = av.wait_for(lambda rs: len([r for _, _, r in rs if r["kind"] == "report" and r["venture"] == "web"]) >= 3
                       and rs, timeout=15, what="three reports of the site")
    reports = [r for _, _, r in recs if r["kind"] == "report" and r["venture"] == "web"]
    assert all(r["status"] == "trusted" and r["value"] == 200 for r in reports[:3]), [r["summary"] for r in reports]
    assert not os.path.exists(os.path.join(d, "imported")), open(os.path.join(d, "imported")).read()
