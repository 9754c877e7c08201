"""Round three: the one redaction catches PEM private keys (whole, cut or unterminated), HTTP credentials after
their scheme word and `name: value` secrets, and removes control characters; text that diagnoses stays."""

from __future__ import annotations

import pytest

from perftracker.analyzers.findings import safe_evidence
from perftracker.redaction import safe_text

BODY = "MIIEpAIBAAKCAQEA7bq9Zx3kQwErTyUiOpAsDfGh"


@pytest.mark.parametrize("text", [
    f"-----BEGIN RSA PRIVATE KEY-----\n{BODY}\n-----END RSA PRIVATE KEY-----",
    f"key: -----BEGIN OPENSSH PRIVATE KEY----- {BODY}",  # cut: no END line
    f"-----BEGIN PRIVATE KEY {BODY}",  # the BEGIN line itself cut
    f"Authorization: Bearer {BODY[:20]}", f"Authorization: Basic {BODY[:16]}==", f"password: {BODY[:8]}",
    f'"api_key": "{BODY[:10]}"', f"db secret:{BODY[:9]}",
])
def test_secret_forms_are_hidden(text: str) -> None:
    shown = safe_text(text)
    assert BODY[:8] not in shown and "<redacted>" in shown and "\n" not in shown


@pytest.mark.parametrize("text", ["basic configuration loaded", "at::secret::kernel_name", "tokens: 2048",
                                  "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "token count 12345678"])
def test_diagnosing_text_stays(text: str) -> None:
    assert safe_text(text) == text


def test_evidence_keys_are_redacted_like_values() -> None:
    # GIVEN an NCCL WARN line kept as a key of a count (evidence.distinct), with an ESC byte
    line = "NCCL WARN connect password=hunter2 ghp_AbCdEf0123456789AbCdEf0123456789abcd \x1b[2J"
    safe = safe_evidence({"distinct": {line: 3}})
    (key,) = safe["distinct"]
    assert "hunter2" not in key and "ghp_" not in key and "\x1b" not in key and safe["distinct"][key] == 3
