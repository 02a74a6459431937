"""Black-box tests of `idemgate key-service`, driven over HTTP with `requests`.

The Rust integration test `key_service::python_black_box` starts the binary and sets:
KS_BASE (http://host:port), KS_TOKEN_A and KS_TOKEN_B (clients of namespaces `alpha` and
`beta`), KS_TOKEN_ADMIN (an admin client of namespace `ops`).
"""

import base64
import hashlib
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

BASE = os.environ["KS_BASE"]
TOKEN_A = os.environ["KS_TOKEN_A"]
TOKEN_B = os.environ["KS_TOKEN_B"]
TOKEN_ADMIN = os.environ["KS_TOKEN_ADMIN"]
SCOPE = "POST /payments"


def call(path, body, token=TOKEN_A, session=requests):
    return session.post(
        BASE + path,
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def new_key():
    return "key-" + uuid.uuid4().hex


def acquire(key, token=TOKEN_A, **extra):
    body = {"scope": SCOPE, "principal": "user-42", "key": key, "fingerprint": "fp-1"}
    body.update(extra)
    r = call("/v1/acquire", body, token)
    assert r.status_code == 200, r.text
    return r.json()


def held(key, lease, **extra):
    body = {"scope": SCOPE, "principal": "user-42", "key": key, "lease": lease}
    body.update(extra)
    return body


RESPONSE = {
    "status": 201,
    "headers": [["content-type", "application/json"], ["location", "/payments/p1"]],
    "body_base64": base64.b64encode(b'{"id":"p1"}').decode(),
}


def problem(r, status, anchor):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == f"urn:idemgate:problem:{anchor}", body
    assert body["status"] == status
    return body


def test_run_complete_then_replay_and_a_repeated_complete_succeeds():
    key = new_key()
    first = acquire(key)
    assert first["decision"] == "run"
    assert first["takeover"] is False
    lease = first["lease"]
    assert isinstance(lease["token"], str) and isinstance(lease["fence"], int)
    assert lease["expires_at"] > time.time() * 1000

    done = call("/v1/complete", held(key, lease, response=RESPONSE))
    assert done.status_code == 200, done.text
    assert done.json() == {"state": "completed", "repeated": False}
    again = call("/v1/complete", held(key, lease, response=RESPONSE))
    assert again.status_code == 200, again.text
    assert again.json() == {"state": "completed", "repeated": True}
    # The same lease with another response is not a repeat.
    other = dict(RESPONSE, status=200)
    problem(call("/v1/complete", held(key, lease, response=other)), 409, "lease-lost")

    replay = acquire(key)
    assert replay["decision"] == "replay"
    assert replay["response"] == RESPONSE


def test_in_flight_while_the_first_attempt_holds_the_lease():
    key = new_key()
    assert acquire(key)["decision"] == "run"
    second = acquire(key)
    assert second["decision"] == "in_flight"
    assert 0 < second["retry_after_ms"] <= 1000


def test_another_fingerprint_is_a_mismatch_whatever_the_state():
    key = new_key()
    lease = acquire(key)["lease"]
    assert acquire(key, fingerprint="fp-2")["decision"] == "mismatch"
    assert call("/v1/complete", held(key, lease, response=RESPONSE)).status_code == 200
    assert acquire(key, fingerprint="fp-2")["decision"] == "mismatch"


def test_a_failed_attempt_answers_previous_failed():
    key = new_key()
    lease = acquire(key)["lease"]
    r = call("/v1/fail", held(key, lease))
    assert r.status_code == 200 and r.json()["state"] == "failed", r.text
    assert call("/v1/fail", held(key, lease)).json()["repeated"] is True
    assert acquire(key)["decision"] == "previous_failed"


def test_a_lapsed_lease_answers_outcome_unknown_and_a_late_complete_still_lands():
    key = new_key()
    lease = acquire(key, lease_ttl_ms=1000)["lease"]
    time.sleep(1.3)
    assert acquire(key)["decision"] == "outcome_unknown"
    # The holder was alive after all: its outcome lands and is replayed from then on.
    assert call("/v1/complete", held(key, lease, response=RESPONSE)).status_code == 200
    assert acquire(key)["decision"] == "replay"


def test_a_stale_fence_after_a_takeover_is_lease_lost_everywhere():
    key = new_key()
    old = acquire(key, lease_ttl_ms=1000)["lease"]
    time.sleep(1.3)
    taken = acquire(key, on_lease_expired="takeover")
    assert taken["decision"] == "run" and taken["takeover"] is True, taken
    new = taken["lease"]
    assert new["fence"] == old["fence"] + 1
    for path, extra in [
        ("/v1/complete", {"response": RESPONSE}),
        ("/v1/fail", {}),
        ("/v1/release", {}),
        ("/v1/renew", {}),
    ]:
        problem(call(path, held(key, old, **extra)), 409, "lease-lost")
    renewed = call("/v1/renew", held(key, new, lease_ttl_ms=5000))
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["lease"]["fence"] == new["fence"]
    assert call("/v1/complete", held(key, new, response=RESPONSE)).status_code == 200
    record = requests.get(
        BASE + "/v1/records",
        params={"scope": SCOPE, "principal": "user-42", "key": key},
        headers={"Authorization": f"Bearer {TOKEN_A}"},
        timeout=10,
    ).json()
    assert record["state"] == "completed" and record["fence"] == new["fence"]


def test_a_release_under_a_takeover_leaves_the_key_to_be_taken_over_again():
    # The first holder may have run before its lease lapsed: the take-over's "nothing
    # done" must not free the key for a fresh, unmarked run.
    key = new_key()
    acquire(key, lease_ttl_ms=1000)
    time.sleep(1.3)
    taken = acquire(key, on_lease_expired="takeover", lease_ttl_ms=1000)
    assert taken["decision"] == "run" and taken["takeover"] is True, taken
    r = call("/v1/release", held(key, taken["lease"], status=503))
    assert r.status_code == 200 and r.json()["state"] == "left-to-lapse", r.text
    assert acquire(key, on_lease_expired="takeover")["decision"] == "in_flight"
    time.sleep(1.3)
    again = acquire(key, on_lease_expired="takeover")
    assert again["decision"] == "run" and again["takeover"] is True, again
    assert again["lease"]["fence"] == taken["lease"]["fence"] + 1


def test_a_retried_attempt_gets_the_same_lease_and_another_attempt_does_not():
    key = new_key()
    attempt = str(uuid.uuid4())
    first = acquire(key, attempt=attempt)
    again = acquire(key, attempt=attempt)
    assert first["decision"] == again["decision"] == "run"
    assert again["lease"]["token"] == first["lease"]["token"]
    assert again["lease"]["fence"] == first["lease"]["fence"]
    assert acquire(key, attempt=str(uuid.uuid4()))["decision"] == "in_flight"
    assert acquire(key)["decision"] == "in_flight"
    # Once completed, the same attempt gets the replay, never a second lease.
    assert call("/v1/complete", held(key, first["lease"], response=RESPONSE)).status_code == 200
    assert acquire(key, attempt=attempt)["decision"] == "replay"
    # The same attempt id in another namespace is another record.
    assert acquire(key, token=TOKEN_B, attempt=attempt)["decision"] == "run"


def test_200_concurrent_acquires_of_one_key_give_exactly_one_run():
    key = new_key()
    barrier = threading.Barrier(200)

    def one(_):
        with requests.Session() as s:
            body = {"scope": SCOPE, "principal": "user-42", "key": key, "fingerprint": "fp-1"}
            barrier.wait()
            r = call("/v1/acquire", body, session=s)
            return r.status_code, r.json().get("decision")

    with ThreadPoolExecutor(max_workers=200) as pool:
        results = list(pool.map(one, range(200)))
    statuses = {s for s, _ in results}
    assert statuses == {200}, results
    decisions = [d for _, d in results]
    assert decisions.count("run") == 1, decisions
    assert decisions.count("in_flight") == 199, decisions


def test_namespaces_never_see_or_change_each_other():
    key = new_key()
    a = acquire(key)
    assert a["decision"] == "run"
    # Namespace beta: same scope, principal and key, its own record.
    b = acquire(key, token=TOKEN_B)
    assert b["decision"] == "run"
    # beta cannot complete or release alpha's lease.
    problem(call("/v1/complete", held(key, a["lease"], response=RESPONSE), TOKEN_B), 409, "lease-lost")
    problem(call("/v1/release", held(key, a["lease"]), TOKEN_B), 409, "lease-lost")
    assert call("/v1/complete", held(key, a["lease"], response=RESPONSE)).status_code == 200
    params = {"scope": SCOPE, "principal": "user-42", "key": key}
    get = lambda token, **p: requests.get(  # noqa: E731
        BASE + "/v1/records",
        params=dict(params, **p),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert get(TOKEN_A).json()["state"] == "completed"
    assert get(TOKEN_B).json()["state"] == "in_progress"
    problem(get(TOKEN_B, namespace="alpha"), 403, "namespace-forbidden")
    seen = get(TOKEN_ADMIN, namespace="alpha")
    assert seen.status_code == 200 and seen.json()["namespace"] == "alpha"
    assert seen.json()["response"]["status"] == 201
    assert "body_base64" not in seen.json()["response"]
    with_body = get(TOKEN_A, body="true").json()["response"]
    assert base64.b64decode(with_body["body_base64"]) == b'{"id":"p1"}'
    problem(get(TOKEN_ADMIN), 404, "record-not-found")


def test_missing_or_wrong_tokens_get_401():
    body = {"scope": SCOPE, "principal": "p", "key": new_key(), "fingerprint": "f"}
    for headers in [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN_A}"},
        {"Authorization": f"Bearer {TOKEN_A}x"},
        {"Authorization": "Bearer"},
    ]:
        r = requests.post(BASE + "/v1/acquire", json=body, headers=headers, timeout=10)
        problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
    r = requests.get(BASE + "/v1/records", params={"scope": SCOPE}, timeout=10)
    problem(r, 401, "unauthorized")


@pytest.mark.parametrize(
    "change,field",
    [
        ({"lease_ttl_ms": 999}, "lease_ttl_ms"),
        ({"lease_ttl_ms": 3_600_001}, "lease_ttl_ms"),
        ({"record_ttl_ms": 59_999}, "record_ttl_ms"),
        ({"record_ttl_ms": 30 * 24 * 3_600_000 + 1}, "record_ttl_ms"),
        ({"key": "short"}, "key"),
        ({"key": "bad key \u00e9 here"}, "key"),
        ({"scope": ""}, "scope"),
        ({"principal": "x" * 257}, "principal"),
        ({"fingerprint": "x" * 129}, "fingerprint"),
        ({"fingerprint": None}, "fingerprint"),
        ({"surprise": 1}, "surprise"),
        ({"attempt": ""}, "attempt"),
        ({"lease_ttl_ms": "10s"}, "lease_ttl_ms"),
        ({"request": {"method": "POST", "path": "/p"}}, "request"),
    ],
)
def test_invalid_fields_are_400_naming_the_field(change, field):
    body = {"scope": SCOPE, "principal": "p", "key": new_key(), "fingerprint": "f"}
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    got = problem(call("/v1/acquire", body), 400, "invalid-request")
    assert got["field"] == field, got


def test_bad_json_oversized_bodies_and_bad_leases():
    r = requests.post(
        BASE + "/v1/acquire",
        data=b'{"scope": ',
        headers={"Authorization": f"Bearer {TOKEN_A}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert problem(r, 400, "invalid-request")["field"] == "body"
    big = {"scope": SCOPE, "principal": "p", "key": new_key(), "fingerprint": "f",
           "attempt": "x" * (3 << 20)}
    problem(call("/v1/acquire", big), 413, "request-too-large")
    key = new_key()
    lease = acquire(key)["lease"]
    bad = dict(lease, token="zz")
    assert problem(call("/v1/release", held(key, bad)), 400, "invalid-request")["field"] == "lease.token"
    bad_status = dict(RESPONSE, status=304)
    got = problem(call("/v1/complete", held(key, lease, response=bad_status)), 400, "invalid-request")
    assert got["field"] == "response.status"
    bad_header = dict(RESPONSE, headers=[["bad header", "v"]])
    got = problem(call("/v1/complete", held(key, lease, response=bad_header)), 400, "invalid-request")
    assert got["field"] == "response.headers[0][0]"
    problem(requests.get(BASE + "/v1/nothing", timeout=10), 404, "unknown-endpoint")


def test_requests_are_fingerprinted_with_the_gateway_rules():
    key = new_key()

    def req(body):
        return {
            "method": "POST",
            "path": "/payments",
            "content_type": "application/json",
            "body_base64": base64.b64encode(body).decode(),
        }

    first = acquire(key, fingerprint=None, request=req(b'{"amount": 10, "currency": "EUR"}'))
    assert first["decision"] == "run"
    assert call("/v1/complete", held(key, first["lease"], response=RESPONSE)).status_code == 200
    same = acquire(key, fingerprint=None, request=req(b'{"currency":"EUR","amount":10}'))
    assert same["decision"] == "replay"
    other = acquire(key, fingerprint=None, request=req(b'{"currency":"EUR","amount":11}'))
    assert other["decision"] == "mismatch"


def test_release_lets_the_key_run_again():
    key = new_key()
    lease = acquire(key)["lease"]
    r = call("/v1/release", held(key, lease))
    assert r.status_code == 200 and r.json()["state"] == "released"
    problem(call("/v1/release", held(key, lease)), 409, "lease-lost")
    assert acquire(key)["decision"] == "run"


def test_openapi_document_is_served_without_a_token():
    doc = requests.get(BASE + "/v1/openapi.json", timeout=10).json()
    assert doc["openapi"].startswith("3.1")
    assert "/v1/acquire" in doc["paths"]
    assert json.dumps(doc)  # plain JSON


def test_an_acquire_with_wait_ms_waits_for_the_outcome_and_gets_the_replay():
    key = new_key()
    lease = acquire(key)["lease"]
    with ThreadPoolExecutor(max_workers=10) as pool:
        waiting = [pool.submit(acquire, key, wait_ms=5000) for _ in range(10)]
        time.sleep(0.5)
        assert not any(w.done() for w in waiting), "they wait"
        assert call("/v1/complete", held(key, lease, response=RESPONSE)).status_code == 200
        answers = [w.result(timeout=10) for w in waiting]
    assert all(a["decision"] == "replay" and a["response"] == RESPONSE for a in answers), answers


def test_a_release_while_callers_wait_gives_the_key_to_exactly_one():
    key = new_key()
    lease = acquire(key)["lease"]
    with ThreadPoolExecutor(max_workers=10) as pool:
        waiting = [pool.submit(acquire, key, wait_ms=3000) for _ in range(10)]
        time.sleep(0.5)
        assert call("/v1/release", held(key, lease)).status_code == 200
        answers = [w.result(timeout=10) for w in waiting]
    runs = [a for a in answers if a["decision"] == "run"]
    assert len(runs) == 1, answers
    # The others wait on that run; it never ends within their wait.
    assert all(a["decision"] == "in_flight" for a in answers if a not in runs), answers


def test_a_wait_ends_with_in_flight_and_wait_ms_is_bounded():
    key = new_key()
    assert acquire(key)["decision"] == "run"
    started = time.monotonic()
    assert acquire(key, wait_ms=700)["decision"] == "in_flight"
    assert time.monotonic() - started >= 0.6
    body = {"scope": SCOPE, "principal": "user-42", "key": key, "fingerprint": "fp-1"}
    problem(call("/v1/acquire", dict(body, wait_ms=60001)), 400, "invalid-request")
    assert acquire(key, wait_ms=0)["decision"] == "in_flight"


def test_a_release_passes_its_status_and_retry_after_to_the_callers_that_wait():
    key = new_key()
    lease = acquire(key)["lease"]
    for bad, field in [({"status": 600}, "status"), ({"status": 99}, "status"), ({"status": 101}, "status"),
                       ({"retry_after_ms": 86_400_001}, "retry_after_ms")]:
        body = problem(call("/v1/release", held(key, lease, **bad)), 400, "invalid-request")
        assert body["field"] == field, body
    with ThreadPoolExecutor(max_workers=5) as pool:
        waiting = [pool.submit(acquire, key, wait_ms=2000) for _ in range(5)]
        time.sleep(0.5)
        released = held(key, lease, status=429, retry_after_ms=5000)
        assert call("/v1/release", released).status_code == 200
        answers = [w.result(timeout=10) for w in waiting]
    # Not before the Retry-After, which is past their wait: nobody runs it; all hear 429.
    assert all(a == {"decision": "released", "status": 429, "retry_after_ms": 5000}
               for a in answers), answers


def key_id(principal, scope, key):
    """The key id of /v1/wait's events: SHA-256 over the parts, each followed by NUL."""
    parts = b"".join(p.encode() + b"\0" for p in (principal, scope, key))
    return hashlib.sha256(parts).hexdigest()[:32]


def test_wait_long_polls_the_events_of_the_namespace_with_ids_a_client_can_compute():
    start = call("/v1/wait", {"after": None, "wait_ms": 0}).json()
    other = call("/v1/wait", {"after": None, "wait_ms": 0}, TOKEN_B).json()
    assert start["events"] == [] and start["missed"] is False
    done, released = new_key(), new_key()
    with ThreadPoolExecutor(max_workers=1) as pool:
        polling = pool.submit(call, "/v1/wait", {"after": start["cursor"], "wait_ms": 10_000})
        time.sleep(0.3)
        done_lease = acquire(done)["lease"]
        assert call("/v1/complete", held(done, done_lease, response=RESPONSE)).status_code == 200
        first = polling.result(timeout=15).json()
    assert first["events"] == [f"w {key_id('user-42', SCOPE, done)}"], first
    lease = acquire(released)["lease"]
    assert call("/v1/release", held(released, lease, status=429, retry_after_ms=1500)).status_code == 200
    second = call("/v1/wait", {"after": first["cursor"], "wait_ms": 0}).json()
    [event] = second["events"]
    kind, kid, _lease_id, status, retry = event.split(" ")
    assert (kind, kid, status, retry) == ("r", key_id("user-42", SCOPE, released), "429", "1500")
    # A repeated complete tells nothing new; another namespace heard nothing of these.
    repeated = call("/v1/complete", held(done, done_lease, response=RESPONSE)).json()
    assert repeated["repeated"] is True, repeated
    assert call("/v1/wait", {"after": second["cursor"], "wait_ms": 0}).json()["events"] == []
    assert call("/v1/wait", {"after": other["cursor"], "wait_ms": 0}, TOKEN_B).json()["events"] == []
    for bad in [{"after": None, "wait_ms": 30_001}, {"after": None}, {"after": 5, "wait_ms": 0}]:
        problem(call("/v1/wait", bad), 400, "invalid-request")
    stale = call("/v1/wait", {"after": "0-0", "wait_ms": 0}).json()
    assert stale["missed"] is True, stale
