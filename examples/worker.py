#!/usr/bin/env python3
"""A Ferry work-queue consumer in plain Python (standard library only).

    FERRY_URL=http://127.0.0.1:8080 FERRY_KEY=$(cat .ferry/admin-key) python3 examples/worker.py orders

Long-polls the queue, handles each message, acks what succeeded and nacks
what failed (Ferry retries it with backoff, then dead-letters it after the
queue's max_receives). Run several copies to compete for the same queue.
"""
import json
import os
import sys
import urllib.error
import urllib.request

URL = os.environ.get("FERRY_URL", "http://127.0.0.1:8080")
KEY = os.environ["FERRY_KEY"]


def call(method, path, body=None):
    req = urllib.request.Request(
        URL + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        problem = json.loads(e.read() or b"{}")
        raise SystemExit(f"{method} {path}: {e.code} {problem.get('code')}: {problem.get('detail')}")


def handle(message):
    """Your work goes here. Raise to have the message retried."""
    print("got", message["id"], json.dumps(message["body"]), "receive", message["receive_count"])


def main(queue):
    call("PUT", f"/v1/queues/{queue}", {})
    while True:
        got = call("POST", f"/v1/queues/{queue}/receive", {"max_messages": 10, "wait_seconds": 20})
        done, failed = [], []
        for m in got["messages"]:
            try:
                handle(m)
                done.append(m["receipt"])
            except Exception as e:  # noqa: BLE001 - any failure means retry
                failed.append((m["receipt"], str(e)))
        if done:
            call("POST", f"/v1/queues/{queue}/ack", {"receipts": done})
        for receipt, error in failed:
            call("POST", f"/v1/queues/{queue}/nack", {"receipts": [receipt], "error": error[:4096]})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "orders")
