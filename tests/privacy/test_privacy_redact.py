"""The redactor as a pure function: each kind, and the look-alikes it must leave alone."""

from __future__ import annotations

import pytest

from clawrl_app.config import ConfigError, load_settings
from clawrl_app.privacy.policy import PrivacyPolicy
from clawrl_app.privacy.redact import KINDS, InvalidPattern, Redactor, luhn_ok

R = Redactor()

FOUND = [
    ("key sk-proj-abcDEF1234567890abcdef1234 ok", "key [REDACTED:openai_key] ok", "openai_key"),
    ("sk-abcdefghijklmnopqrstuvwxyz012345", "[REDACTED:openai_key]", "openai_key"),
    ("t ghp_abcdefghijklmnopqrstuvwxyz0123456789", "t [REDACTED:github_token]", "github_token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[REDACTED:github_token]", "github_token"),
    ("id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED:aws_key].", "aws_key"),
    ("xoxb-123456789012-abcdefghij", "[REDACTED:slack_token]", "slack_token"),
    (
        "Authorization: Bearer abcdef0123456789abcdef",
        "Authorization: Bearer [REDACTED:bearer_token]",
        "bearer_token",
    ),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
        "[REDACTED:jwt]",
        "jwt",
    ),
    ("api_key=0a1b2c3d4e5f60718293a4b5c6d7e8f9", "api_key=[REDACTED:secret]", "secret"),
    ('OPENAI_API_KEY: "a1B2c3D4e5F6g7H8i9J0"', 'OPENAI_API_KEY: "[REDACTED:secret]"', "secret"),
    ('{"password": "hunter22"}', '{"password": "[REDACTED:secret]"}', "secret"),
    ("db_password=pa55", "db_password=[REDACTED:secret]", "secret"),
    (
        "postgres://admin:s3cr3t@db.local:5432/app",
        "postgres://admin:[REDACTED:url_password]@db.local:5432/app",
        "url_password",
    ),
    ("mail jane.doe+x@example.co.uk now", "mail [REDACTED:email] now", "email"),
    ("card 4111 1111 1111 1111.", "card [REDACTED:card].", "card"),
    ("4111-1111-1111-1111", "[REDACTED:card]", "card"),
    ("5500005555555559", "[REDACTED:card]", "card"),
    ("call +1 (415) 555-2671 now", "call [REDACTED:phone] now", "phone"),
    ("(555) 123-4567", "[REDACTED:phone]", "phone"),
    ("030 1234 5678", "[REDACTED:phone]", "phone"),
    ("+14155552671", "[REDACTED:phone]", "phone"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
        "[REDACTED:private_key]",
        "private_key",
    ),
]


@pytest.mark.parametrize(("text", "want", "kind"), FOUND)
def test_each_kind_is_replaced_by_its_marker(text: str, want: str, kind: str) -> None:
    r = R.redact(text)
    assert r.text == want
    assert r.counts == {kind: 1}
    assert kind in KINDS


KEPT = [
    "version 1.2.3 and 10.0.19041.1, python 3.11.4",
    "date 2024-01-15, 15/01/2024, 01-15-2024",
    "ISO 2024-01-15T10:30:00Z, 2024-01-15 10:30:00+02:00, duration 12:30:45",
    "price $1,234.56, 1 234 567 EUR, 99.99",
    "commit a1b2c3d, 5f00d97, sha 3f786850e387550fdab836ed7e6dc881de23001b",
    # Luhn-valid digit runs inside ids the endpoint mints itself (about 1 in 640 did)
    '{"id": "call_aa54f2971155451388ca8931"}, call_4111111111111111ab, x4111111111111111',
    "order 1234 5678 9012 3456 and order #4111111111111112 (Luhn fails)",
    "unix time 1718000000, port 30000, ip 192.168.100.200",
    "max_tokens: 512, keyboard=qwerty, token_count = 1234567890123456",
    "password = get_password()",
    "secret = os.environ['SECRET']",
    "git@github.com:org/repo.git",
    "the Bearer scheme",
    "",
]


@pytest.mark.parametrize("text", KEPT)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert R.redact(text).text == text


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and luhn_ok("79927398713")
    assert not luhn_ok("4111111111111112") and not luhn_ok("1234567890123456")


def test_several_findings_counted_per_kind_and_markers_stay_stable() -> None:
    text = "a@b.io, c@d.io, key sk-abcdefghijklmnopqrstuvwxyz012345"
    r = R.redact(text)
    assert r.counts == {"email": 2, "openai_key": 1} and r.total == 3
    assert R.redact(r.text).text == r.text  # redacting again finds nothing new


def test_user_patterns_run_first_and_count_as_custom() -> None:
    r = Redactor([r"ACME-\d{6}", "(?i)project falcon"]).redact("ACME-123456 is Project Falcon")
    assert r.text == "[REDACTED:custom] is [REDACTED:custom]"
    assert r.counts == {"custom": 2}


def test_redact_value_walks_json_and_keeps_keys() -> None:
    value = {"messages": [{"role": "user", "content": "me@x.org"}], "n": 3, "email": None}
    out, counts = R.redact_value(value)
    assert out == {
        "messages": [{"role": "user", "content": "[REDACTED:email]"}],
        "n": 3,
        "email": None,
    }
    assert counts == {"email": 1}
    assert value["messages"][0]["content"] == "me@x.org"  # the input is not changed


def test_invalid_user_pattern_is_a_config_error_naming_it() -> None:
    with pytest.raises(InvalidPattern, match="not a valid regular expression"):
        Redactor(["(unclosed"])
    with pytest.raises(ConfigError, match=r"privacy.redact_patterns .*\(unclosed"):
        load_settings(env={"CLAWRL_PRIVACY__REDACT_PATTERNS": '["(unclosed"]'})
    with pytest.raises(ConfigError, match="empty string"):
        load_settings(env={"CLAWRL_PRIVACY__INCOGNITO_PATTERNS": "x*"})


def test_incognito_rules() -> None:
    s = load_settings(
        env={
            "CLAWRL_PRIVACY__INCOGNITO_PATTERNS": '["^/private"]',
            "CLAWRL_PRIVACY__INCOGNITO_SOURCES": "^scratch/",
        }
    ).settings.privacy
    policy = PrivacyPolicy.from_settings(s)
    private = [
        {"role": "system", "content": "/private no"},
        {"role": "user", "content": "/private hi"},
    ]
    assert policy.incognito_reason(private) == "privacy.incognito_patterns"
    later = [{"role": "user", "content": "hi"}, {"role": "user", "content": "/private"}]
    assert policy.incognito_reason(later) is None  # only the first user message counts
    parts = [{"role": "user", "content": [{"type": "text", "text": "/private x"}]}]
    assert policy.incognito_reason(parts) == "privacy.incognito_patterns"
    hi = [{"role": "user", "content": "hi"}]
    assert policy.incognito_reason(hi, ("scratch/1.0", None)) == "privacy.incognito_sources"
    assert policy.incognito_reason(hi, ("openai-python/1.0", "env:terminal")) is None
    off = load_settings(env={"CLAWRL_PRIVACY__REDACT": "false"}).settings.privacy
    assert PrivacyPolicy.from_settings(off).redactor is None
