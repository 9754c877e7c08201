"""What perftracker never keeps: secret-looking variables (even under an allowed prefix), credentials in
values, and the values of secret-looking command-line options, in every form they are written."""

from __future__ import annotations

import pytest

from perftracker.collectors.env import read_env_file
from perftracker.redaction import REDACTED, keep_variable, redact_command, redact_value, safe_env

# The variables the issue found slipping through the old name filter, each with a value to grep for.
PLANTED_ENV = {
    "MASTER_PWD": "s3cr3t-master-pwd",
    "NCCL_PASS": "s3cr3t-nccl-pass",
    "TORCH_HUB_CREDS": "s3cr3t-hub-creds",
    "PYTORCH_SIGNING_KEYS": "s3cr3t-signing-keys",
    "TORCH_S3_KEYID": "s3cr3t-keyid",
    "CUDA_BEARER": "s3cr3t-bearer",
    "NCCL_CERT": "s3cr3t-cert",
    "PERFTRACKER_WEBHOOK": "https://hooks.example.com/s3cr3t-webhook",
    "TORCH_URL2": "https://bob:s3cr3t-url-password@models.example.com/x",
    "TORCH_URL3": "https://models.example.com/x?access_token=s3cr3t-query-token&v=1",
    "MASTER_ADDR": "h?token=s3cr3t-master-token",
    "TORCH_ARTIFACT": "aZ3kQ9vL2mX8pR4tW7yB1nC6dF5gH0jK",  # a 32-character random key
}
PLANTED_ARGS = ["--password", "s3cr3t-arg-password", "--token=s3cr3t-arg-token", "--api-key", "s3cr3t-arg-apikey",
                "--secret=s3cr3t-arg-secret", "key=s3cr3t-arg-key", "--url", "https://al:s3cr3t-arg-url@h.example/x"]
PLANTED_VALUES = [*[v for v in PLANTED_ENV.values() if "example.com/x" not in v], "s3cr3t-url-password",
                  "s3cr3t-query-token", "s3cr3t-webhook", "s3cr3t-arg-password", "s3cr3t-arg-token",
                  "s3cr3t-arg-apikey", "s3cr3t-arg-secret", "s3cr3t-arg-key", "s3cr3t-arg-url"]
# What must stay: documented settings, paths, lists, GPU UUIDs, run ids, host names.
USEFUL_ENV = {
    "NCCL_IB_PKEY": "0x8001", "UCX_IB_PKEY": "0x8001", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
    "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_DEBUG_FILE": "/tmp/pytest-of-root/pytest-3/test_run_0/nccl/%h.%p.log",
    "CUDA_VISIBLE_DEVICES": "GPU-8f6c1f9a-1b2c-4d5e-8f9a-0b1c2d3e4f5a,MIG-8f6c1f9a-1b2c-4d5e-8f9a-0b1c2d3e4f5b",
    "LD_LIBRARY_PATH": "/usr/local/cuda-12.1/lib64:/usr/lib/x86_64-linux-gnu", "MASTER_ADDR": "10.0.0.1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128",
    "TORCHELASTIC_RUN_ID": "4df3a650f9204e119aa4c6618f9863a8", "HOSTNAME": "train-job-7f9c8d6b5-x2x9k",
    "TORCH_HOME": "/home/MyUser/.cache/torch", "RANK": "3",
}


def test_secret_looking_names_are_dropped_even_under_an_allowed_prefix() -> None:
    # GIVEN the planted variables, each under an allowed prefix WHEN the environment is filtered
    kept = safe_env({**PLANTED_ENV})
    # THEN none is kept, whatever the word in its name or the credential in its value
    assert kept == {}
    # AND documented settings whose names merely contain such a word are kept by name
    assert keep_variable("NCCL_IB_PKEY") and keep_variable("UCX_IB_PKEY")
    assert not keep_variable("NCCL_IB_PKEY_SECRET") and not keep_variable("HOME")


def test_useful_values_are_kept_verbatim() -> None:
    # GIVEN settings perftracker needs: paths, lists, UUIDs, ids, host names WHEN filtered
    # THEN every one is kept as it was
    assert safe_env(USEFUL_ENV) == USEFUL_ENV


@pytest.mark.parametrize("value,shown", [
    ("https://bob:pw@host/x", f"https://{REDACTED}@host/x"),
    ("https://ghp_abc@github.com/o/r", f"https://{REDACTED}@github.com/o/r"),
    ("h?token=abc&x=1", f"h?token={REDACTED}&x=1"),
    ("s3://b/k?X-Amz-Signature=abc", f"s3://b/k?X-Amz-Signature={REDACTED}"),
    ("a1GbKe19j0c1Mq515eA/s2hfiteYWBp5NxUFzEbu", REDACTED),  # base64 with a slash, whole
    ("/data/a1GbKe19j0c1Mq515eA3s2hfiteYWBp5NxUFzEbu/x", f"/data/{REDACTED}/x"),
    ("58b6ee496a80839eba787d23d5b381f77746f841", REDACTED),  # 40 hex digits
    ("hf_abcdefghijklmnopqrstuvwx", REDACTED),  # a known token prefix
    ("/usr/lib/x86_64-linux-gnu:/opt/nccl-2.21.5/lib", "/usr/lib/x86_64-linux-gnu:/opt/nccl-2.21.5/lib"),
])
def test_credentials_in_values_are_redacted_and_the_rest_is_kept(value: str, shown: str) -> None:
    assert redact_value(value) == shown


def test_command_lines_hide_the_values_of_secret_options_in_every_form() -> None:
    # GIVEN a command line with secrets as `--opt value`, `--opt=value`, `key=value` and URL user info
    argv = ["python", "train.py", *PLANTED_ARGS, "--lr", "0.1", "--use-auth", "--epochs", "3", "db.password=pw"]
    # WHEN it is redacted
    shown = redact_command(argv)
    # THEN no secret is left, the options themselves stay, and everything else is as it was
    assert not [v for v in PLANTED_VALUES if v in " ".join(shown)]
    assert shown == ["python", "train.py", "--password", REDACTED, f"--token={REDACTED}", "--api-key", REDACTED,
                     f"--secret={REDACTED}", f"key={REDACTED}", "--url", f"https://{REDACTED}@h.example/x",
                     "--lr", "0.1", "--use-auth", "--epochs", "3", f"db.password={REDACTED}"]


def test_env_files_drop_secret_names_and_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # GIVEN a job spec holding planted secrets next to real settings
    spec = tmp_path / "job.env"
    spec.write_text("".join(f"export {k}='{v}'\n" for k, v in PLANTED_ENV.items()) + "NCCL_IB_HCA=mlx5_0\n")
    # WHEN read (lint-env, analyze) THEN only the setting is kept
    assert read_env_file(spec) == {"NCCL_IB_HCA": ("mlx5_0", len(PLANTED_ENV) + 1)}
    assert safe_env({"NCCL_IB_HCA": "mlx5_0", **PLANTED_ENV}) == {"NCCL_IB_HCA": "mlx5_0"}
