#!/usr/bin/env python3
"""A receiver for Ferry's webhook pushes in plain Python (standard library only).

    FERRY_SECRET=whsec_... python3 examples/verify_webhook.py 8000
    python3 examples/verify_webhook.py selftest

Ferry signs every push in the Standard Webhooks format
(https://www.standardwebhooks.com/, see docs/webhooks.md). This server
verifies each POST, prints the event and answers 204 No Content; a request
that fails verification gets 401 and is not processed. Copy `verify` into
your own application: it is all there is to it.

Process each push idempotently: the same webhook-id can arrive more than once
(a retry after a timeout, for instance). Keep the ids you have handled and
answer 2xx without doing the work again.
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60  # how far webhook-timestamp may be from our clock
MAX_BODY_BYTES = 10 << 20   # refuse anything larger unread


class VerificationError(Exception):
    """The request is not a genuine, fresh push signed with our secret."""


def _key(secret):
    """The HMAC key of a whsec_ secret (the prefix is optional here)."""
    if secret.startswith("whsec_"):
        secret = secret[len("whsec_"):]
    try:
        return base64.b64decode(secret, validate=True)
    except ValueError as e:
        raise VerificationError("invalid secret") from e


def verify(secret, headers, body, now=None, tolerance=TOLERANCE_SECONDS):
    """Verify one push; raise VerificationError if it must be refused.

    secret:  the subscription's signing secret, "whsec_..."
    headers: a case-insensitive mapping (http.server's headers, a
             requests/Flask/Django headers object); a plain dict must use
             lower-case names
    body:    the raw request body as bytes, exactly as received (verify
             before any JSON decoding or re-encoding)

    Returns the webhook-id, which you should deduplicate on.
    """
    msg_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not msg_id or not timestamp or not signatures:
        raise VerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        ts = int(timestamp)
    except ValueError as e:
        raise VerificationError("webhook-timestamp is not unix seconds") from e
    now = int(time.time() if now is None else now)
    if abs(now - ts) > tolerance:
        raise VerificationError("webhook-timestamp too old or in the future")

    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    mac = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    expected = base64.b64encode(mac)
    # During a secret rotation Ferry sends one signature per secret,
    # space-separated; any v1 one matching ours is enough.
    for item in signatures.split():
        version, _, sig = item.partition(",")
        # Compare bytes: compare_digest refuses non-ASCII str, and the header
        # is attacker-controlled.
        if version == "v1" and hmac.compare_digest(sig.encode(), expected):
            return msg_id
    raise VerificationError("no matching signature")


class Handler(BaseHTTPRequestHandler):
    secret = ""

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.send_error(411)  # this small server does not read chunked bodies
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self.send_error(413)
            return
        body = self.rfile.read(length)
        try:
            msg_id = verify(self.secret, self.headers, body)
        except VerificationError as e:
            self.log_message("refused: %s", e)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return

        # Your processing goes here. Answer 2xx only once the work is done
        # (or durably recorded): a 2xx is Ferry's ack.
        try:
            event = json.loads(body)
        except ValueError:
            event = body.decode(errors="replace")
        print(json.dumps({"webhook-id": msg_id, "event": event}), flush=True)

        self.send_response(204)
        self.end_headers()


def selftest():
    """Check verify against the Standard Webhooks published test vector."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    body = b'{"test": 2432232314}'
    assert verify(secret, headers, body, now=1614265330) == "msg_p5jXN8AQM9LWM0D4loKWxJek"
    for bad_body, now in ((body + b" ", 1614265330), (body, 1614265330 + 301), (body, 1614265330 - 301)):
        try:
            verify(secret, headers, bad_body, now=now)
        except VerificationError:
            continue
        raise AssertionError("accepted a tampered or stale request")
    print("selftest ok")


def main():
    if sys.argv[1:] == ["selftest"]:
        selftest()
        return
    secret = os.environ.get("FERRY_SECRET", "")
    if not secret.startswith("whsec_"):
        sys.exit("set FERRY_SECRET to the subscription's signing secret (whsec_...)")
    _key(secret)  # fail now, not on the first request, if it is malformed
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    Handler.secret = secret
    server = ThreadingHTTPServer(("", port), Handler)
    print(f"listening on :{port}", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
