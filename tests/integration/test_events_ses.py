"""``POST /events/ses``: SNS notifications signed in the test with an X.509 certificate that the
injected fetcher serves, on SQLite and PostgreSQL. The string SNS signs is built here
independently of the product's, so a wrong canonical form in either would show.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from sqlalchemy.engine import Engine

from tests.support.webhooks import (
    CERT_URL,
    RSA_KEY,
    SUBSCRIBE_URL,
    TOPIC,
    AsgiClient,
    Fetcher,
    app_for,
    feedback_count,
    self_signed,
    suppressions,
)


@pytest.fixture
def fetcher() -> Fetcher:
    return Fetcher()


@pytest.fixture
def client(engine: Engine, fetcher: Fetcher) -> AsgiClient:
    return app_for(engine, fetcher)


_SIGNED = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type",
    ),
}  # fmt: skip


def sns(
    kind: str,
    message: str,
    *,
    version: str = "1",
    topic: str = TOPIC,
    cert_url: str = CERT_URL,
    key: rsa.RSAPrivateKey = RSA_KEY,
    message_id: str = "b1a2c3d4-0000-4000-8000-000000000001",
    **extra: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "Type": kind,
        "MessageId": message_id,
        "TopicArn": topic,
        "Message": message,
        "Timestamp": "2026-12-03T04:00:00.000Z",
        "SignatureVersion": version,
        "SigningCertURL": cert_url,
        **extra,
    }
    text = "".join(f"{n}\n{body[n]}\n" for n in _SIGNED[kind] if n in body)
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()  # noqa: S303 - SNS v1 is SHA1
    signature = key.sign(text.encode(), padding.PKCS1v15(), algorithm)
    body["Signature"] = base64.b64encode(signature).decode()
    return body


def ses_bounce(address: str, bounce_type: str = "Permanent", herald_key: str = "") -> str:
    headers = [{"name": "X-Herald-Key", "value": herald_key}] if herald_key else []
    return json.dumps(
        {
            "notificationType": "Bounce",
            "bounce": {
                "bounceType": bounce_type,
                "bounceSubType": "General",
                "bouncedRecipients": [
                    {"emailAddress": address, "status": "5.1.1", "diagnosticCode": "smtp; 550"}
                ],
            },
            "mail": {"messageId": "ses-1", "headers": headers},
        }
    )


def post_sns(client: AsgiClient, body: dict[str, Any]) -> Any:
    # SNS posts JSON as text/plain.
    return client.post(
        "/events/ses",
        content=json.dumps(body).encode(),
        headers={
            "Content-Type": "text/plain; charset=UTF-8",
            "x-amz-sns-message-type": body["Type"],
        },
    )


def test_ses_hard_bounce_suppresses_once(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("Alice@Example.COM"), Subject="Amazon SES Email Event")
    response = post_sns(client, body)
    assert response.status_code == 200, response.text
    assert response.json()["recorded"] == 1
    assert suppressions(engine) == {("alice@example.com", "global", "ses")}
    again = post_sns(client, body)  # SNS retries reuse the MessageId
    assert again.json() == {"recorded": 0, "suppressed": 0, "duplicates": 1, "ignored": 0}
    assert feedback_count(engine) == 1
    assert fetcher.fetched == [CERT_URL]  # cached


def test_ses_signature_version_2_and_complaints(engine, client) -> None:
    complaint = json.dumps(
        {
            "notificationType": "Complaint",
            "complaint": {"complainedRecipients": [{"emailAddress": "bob@example.com"}]},
        }
    )
    assert post_sns(client, sns("Notification", complaint, version="2")).status_code == 200
    assert suppressions(engine) == {("bob@example.com", "global", "ses")}


def test_ses_soft_bounce_is_counted_only(engine, client) -> None:
    body = sns("Notification", ses_bounce("carol@example.com", "Transient"))
    assert post_sns(client, body).json()["recorded"] == 1
    assert suppressions(engine) == set()


def test_ses_altered_or_forged_records_nothing(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("alice@example.com"))
    body["Message"] = ses_bounce("victim@example.com")
    assert post_sns(client, body).status_code == 403
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert (
        post_sns(client, sns("Notification", ses_bounce("x@example.com"), key=other)).status_code
        == 403
    )
    unsigned = sns("Notification", ses_bounce("y@example.com"))
    del unsigned["Signature"]
    assert post_sns(client, unsigned).status_code == 403
    wrong_version = sns("Notification", ses_bounce("z@example.com"), version="3")
    assert post_sns(client, wrong_version).status_code == 403
    assert client.post("/events/ses", content=b"{not json").status_code == 400
    assert suppressions(engine) == set()
    assert feedback_count(engine) == 0


@pytest.mark.parametrize(
    "url",
    [
        "https://sns.us-east-1.amazonaws.com.evil.example/cert.pem",
        "https://sns-bucket.s3.amazonaws.com/cert.pem",  # "ends with amazonaws.com" is unsafe
        "https://evil.example/sns.us-east-1.amazonaws.com/cert.pem",
        "http://sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.txt",
        "https://user@sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com:8443/cert.pem",
        "https://sns.us-east-1.amazonaws.com/cert.pem?x=1",
    ],
)
def test_ses_cert_url_must_be_an_sns_endpoint(engine, client, fetcher, url: str) -> None:
    body = sns("Notification", ses_bounce("alice@example.com"), cert_url=url)
    assert post_sns(client, body).status_code == 403
    assert fetcher.fetched == []
    assert feedback_count(engine) == 0


def test_ses_topic_allowlist_checked_before_any_fetch(engine, client, fetcher) -> None:
    body = sns("Notification", ses_bounce("a@example.com"), topic=TOPIC + "-other")
    assert post_sns(client, body).status_code == 403
    assert fetcher.fetched == []


def test_ses_expired_certificate_and_fetch_failures(engine, fetcher) -> None:
    fetcher.pem = self_signed(RSA_KEY, days=-1, start=-10)
    with app_for(engine, fetcher) as expired:
        assert (
            post_sns(expired, sns("Notification", ses_bounce("a@example.com"))).status_code == 403
        )
    down = Fetcher(fail=True)
    with app_for(engine, down) as unavailable:
        assert (
            post_sns(unavailable, sns("Notification", ses_bounce("a@example.com"))).status_code
            == 503
        )
    assert feedback_count(engine) == 0


def test_ses_subscription_confirmation(engine, client, fetcher) -> None:
    confirm = sns(
        "SubscriptionConfirmation",
        "You have chosen to subscribe to the topic",
        SubscribeURL=SUBSCRIBE_URL,
        Token="2336412f37",
    )
    assert post_sns(client, confirm).status_code == 200
    assert fetcher.subscribed == [SUBSCRIBE_URL]
    # Signed, but pointing elsewhere: refused, nothing fetched.
    evil = sns(
        "SubscriptionConfirmation",
        "subscribe",
        SubscribeURL="https://evil.example/?Action=ConfirmSubscription",
        Token="t",
    )
    assert post_sns(client, evil).status_code == 403
    other_topic = sns(
        "SubscriptionConfirmation",
        "subscribe",
        SubscribeURL=SUBSCRIBE_URL.replace("herald-bounces", "someone-elses"),
        Token="t",
    )
    assert post_sns(client, other_topic).status_code == 403
    forged = dict(confirm, SubscribeURL=SUBSCRIBE_URL + "&x=1")
    assert post_sns(client, forged).status_code == 403
    assert fetcher.subscribed == [SUBSCRIBE_URL]
    assert feedback_count(engine) == 0


# -------------------------------------------------------------------------------- SendGrid
