"""The long-run studies' options (simulate/failures/long_run_args.py), shared by
scripts/compare_ft.py and scripts/cpr_shards.py: refused in one line before any
simulation, never a loop without end."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulate.failures.long_run_args import (
    MAX_FAILURES,
    check_long_runs,
    check_progress,
    number_list,
)
from simulate.run.options import UsageError


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=6))
def test_a_list_typed_in_ascii_digits_reads_back(values):
    assert number_list(",".join(map(str, values)), "--shards", int) == values


@pytest.mark.parametrize(
    "text", ["1,,2", "", ",4", "٣", "１", "1_0", "2,x", "0", "-1", "nan", "inf"]
)
def test_empty_items_other_digits_and_non_positive_values_are_refused(text):
    with pytest.raises(UsageError, match="^--mtbf "):
        number_list(text, "--mtbf")


def test_mtbf_days_and_failure_count_are_bounded():
    check_long_runs([3600.0, 86400.0], 30)
    for mtbfs, days, words in [([1e-9], 1, "60..3.2e+07"), ([59.0], 1, "60..3.2e+07"),
                               ([3600.0], 1e-30, "--days"), ([3600.0], 4000, "--days"),
                               ([60.0], 3650, f"more than {MAX_FAILURES:,}")]:  # fmt: skip
        with pytest.raises(UsageError, match=words.replace("+", r"\+")):
            check_long_runs(mtbfs, days)


def test_a_rollback_scheme_must_complete_a_checkpoint_between_failures():
    check_progress("full", 19 * 3600.0, 3600.0)
    with pytest.raises(UsageError, match="would never complete one"):
        check_progress("full", 21 * 3600.0, 3600.0)


@pytest.mark.parametrize("script", ["scripts/compare_ft.py", "scripts/cpr_shards.py"])
@pytest.mark.parametrize("argv", [["--mtbf", "1e-9"], ["--mtbf", "3600,,60"], ["--days", "1e-30"]])
def test_both_scripts_refuse_in_one_line_before_simulating(tmp_path, script, argv):
    done = subprocess.run([sys.executable, script, *argv, "--outdir", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o").exists()
