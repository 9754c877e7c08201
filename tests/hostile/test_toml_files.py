"""Round three: `--thresholds FILE` and `--devices FILE` within bounds. The probes: dotted keys of 5k-100k parts
(quadratic in the TOML reader: 11.7 GB at 100k), arrays / inline tables / headers nested 50k deep (RecursionError,
exit 70), and files past the 1 MiB cap (the override silently ignored; "no [[device]] tables", the wrong reason)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perftracker.analyzers.efficiency.devices import device_table
from perftracker.analyzers.thresholds import read_overrides
from perftracker.bounded_toml import TomlRefused, read_toml
from perftracker.cli import app
from perftracker.errors import InputError, UsageError

HOSTILE = {
    "dotted_20k": '"x" = 1\n' + "a" + ".a" * 20_000 + " = 1\n",
    "dotted_100k": "a" + ".a" * 100_000 + " = 1\n",
    "arrays_50k": "x = " + "[" * 50_000 + "]" * 50_000 + "\n",
    "inline_50k": "x = " + "{a = " * 50_000 + "1" + "}" * 50_000 + "\n",
    "headers_deep": "[" * 50_000 + "a" + "]" * 50_000 + "\n",
    "long_key": "k" * 200_000 + " = 1\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_thresholds_file_is_a_usage_error_in_linear_time(name: str, tmp_path: Path) -> None:
    # GIVEN a thresholds file shaped to blow the TOML reader's stack or time
    path = tmp_path / f"{name}.toml"
    path.write_text(HOSTILE[name])
    # WHEN read THEN it is refused at once, naming the file and why (no RecursionError, no minutes)
    began = time.process_time()
    with pytest.raises(UsageError) as caught:
        read_overrides(path)
    assert time.process_time() - began < 5
    assert caught.value.where == str(path) and ("nested" in caught.value.what or "key" in caught.value.what)


def test_a_thresholds_file_past_the_cap_is_refused_not_ignored(tmp_path: Path) -> None:
    # GIVEN 1.2 MB of comments, then an override past the 1 MiB cap
    path = tmp_path / "big.toml"
    path.write_text("# padding\n" * 120_000 + '"straggler.alpha" = 0.9\n')
    # WHEN given to analyze THEN exit 2 saying the file is over the cap (not exit 0 with the override dropped)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--thresholds", str(path), "-q"])
    assert result.exit_code == 2, result.output
    assert "cap" in " ".join(result.output.split())


@pytest.mark.parametrize("text", ["x = " + "[" * 100_000 + "]" * 100_000, "a" + ".a" * 50_000 + " = 1",
                                  "# pad\n" * 200_000 + "[[device]]\nname = 'x'\n"])
def test_a_hostile_devices_file_is_an_input_error_naming_the_file(text: str, tmp_path: Path) -> None:
    # GIVEN a devices file nested 100k deep, with 50k dotted parts, or past the 1 MiB cap
    path = tmp_path / "devices.toml"
    path.write_text(text)
    # WHEN read THEN an InputError naming the file and the real reason (not "no [[device]] tables")
    with pytest.raises(InputError) as caught:
        device_table((path,))
    assert caught.value.where == str(path) and "no [[device]]" not in caught.value.what


def test_real_shaped_files_still_read(tmp_path: Path) -> None:
    # GIVEN the shapes perftracker documents (dotted names in quotes, tables, arrays of tables, strings with
    # brackets, dots and '#')
    path = tmp_path / "ok.toml"
    path.write_text('"straggler.alpha" = 0.005\n[degradation]\nmin_steps = 12\n'
                    '[[device]]\nname = "A.B [x] # y"\npatterns = ["a\\\\.b", \'[c]\']\nmemory_tbps = 1.5\n')
    # WHEN read THEN every value is there
    table = read_toml(path)
    assert table["straggler.alpha"] == 0.005 and table["degradation"]["min_steps"] == 12
    assert table["device"][0]["patterns"] == ["a\\.b", "[c]"]
    with pytest.raises(TomlRefused, match="not valid TOML"):
        (tmp_path / "bad.toml").write_text("x = = 1\n")
        read_toml(tmp_path / "bad.toml")
