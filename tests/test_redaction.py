"""Redaction by key names, value shapes, URL passwords and fragments of marked secrets:
none of these reaches a cassette."""

from __future__ import annotations

import json

import pytest

from tether.replay import Redactor

ENVIRON = {
    "DB_PASS": "correct-horse-battery",
    "DATABASE_URL": "postgresql://app:Tr0ub4dor-pw@db.internal:5432/app",
    "HOME": "/home/user",
    "PWD": "/srv/app/current",
}
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
STRIPE = "rk_live_" + "51HabcdefGHIJKLmnopqrSTUV"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
OPENAI = "sk-" + "proj-abcdefghijklmnopqrstuvwxyz123456"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
MARKED = "sess-7f3a9c2e41b8d6a0"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([MARKED], environ=ENVIRON)


@pytest.mark.parametrize("secret", [GITHUB, STRIPE, AWS, OPENAI, PEM])
def test_value_shapes(redactor: Redactor, secret: str) -> None:
    text = redactor.text(f"the tool printed {secret} in its log")
    assert secret not in text and "[redacted]" in text
    assert text.startswith("the tool printed ") and text.endswith(" in its log")


@pytest.mark.parametrize(
    "key", ["passwd", "pwd", "private_key", "x_api_key", "x-api-key", "client_secret", "db_pass"]
)
def test_key_names(redactor: Redactor, key: str) -> None:
    assert redactor.value({key: "hunter2", "order": "C-1042"}) == {
        key: "[redacted]",
        "order": "C-1042",
    }


def test_the_working_directory_is_not_a_password(redactor: Redactor) -> None:
    assert redactor.text("log at /srv/app/current/x.log") == "log at /srv/app/current/x.log"


def test_ordinary_keys_stay(redactor: Redactor) -> None:
    value = {"max_tokens": 5, "input_tokens": 3, "key": "order", "passenger": "Ada"}
    assert redactor.value(value) == value


def test_environment_passwords_and_dsns(redactor: Redactor) -> None:
    text = redactor.text(
        "login with correct-horse-battery; url Tr0ub4dor-pw; "
        "other mysql://root:s3cr3t-root@127.0.0.1/shop"
    )
    assert "correct-horse-battery" not in text and "[redacted:DB_PASS]" in text
    assert "Tr0ub4dor-pw" not in text and "[redacted:DATABASE_URL]" in text
    assert "s3cr3t-root" not in text and "mysql://root:[redacted]@127.0.0.1/shop" in text


def test_a_fragment_of_a_marked_secret_echoed_by_the_model(redactor: Redactor) -> None:
    fragment = MARKED[3:17]  # "-7f3a9c2e41b8d6"
    text = redactor.text(f"Your session is {fragment}, keep it safe.")
    assert fragment not in text
    for i in range(len(fragment) - 7):
        assert fragment[i : i + 8] not in text
    assert text == "Your session is [redacted], keep it safe."


def test_redaction_is_idempotent(redactor: Redactor) -> None:
    value = {
        "text": f"{GITHUB} {STRIPE} {MARKED[2:12]} postgresql://a:b1234@h/db api_key=abcd1234",
        "passwd": "x",
    }
    clean = redactor.value(value)
    assert redactor.value(clean) == clean
    assert "abcd1234" not in json.dumps(clean)
