"""Data safety of every script that writes a set of outputs (scaling, compare_ft,
reproduce_paper, sweeps): a run that fails leaves the previous set byte for byte, a
folder of the user's under an output's name is refused before any work and kept, and a
successful run replaces the set whole while the user's other files stay.

The simulations are replaced by stand-ins (what is checked is where the outputs go, not
their numbers), so each test takes well under a second.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the entry points, imported as modules

import compare_ft  # noqa: E402
import reproduce_paper  # noqa: E402
import scaling  # noqa: E402

DISK_FULL = OSError(errno.ENOSPC, "No space left on device")


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for a directory)."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def previous_set(folder: Path, names: tuple[str, ...]) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text(f"previous {name}")
    (folder / "notes.md").write_text("the user's")
    return folder


def never(*args, **kwargs):
    raise AssertionError("work started before the outputs were checked")


# ----- scaling.py --------------------------------------------------------------------------
ROW = {"system": "cxl", "model": "rm1", "gpus": 1, "cxl_mems": 1, "batch_ms": 2.0,
       "samples_per_s": 64000.0, "checkpoint_share": 0.1, "commit_share": None,
       "commit_switch_share": None, "energy_per_sample_mj": 1.0, "saturated": "GPU SMs",
       "utilisation": 0.5, "speedup": 1.0}  # fmt: skip
SCALING = ["--models", "rm1", "--systems", "cxl", "--gpus", "1", "--mems", "1", "--batches", "2"]


@pytest.fixture
def quick_scaling(monkeypatch):
    monkeypatch.setattr(scaling, "check_grid", lambda args: None)
    monkeypatch.setattr(scaling, "study", lambda args: [dict(ROW)])


def test_scaling_failing_while_writing_leaves_the_previous_set(
    tmp_path, quick_scaling, monkeypatch
):
    out = previous_set(tmp_path / "s", scaling.TABLE_OUTPUTS)
    before = tree(out)

    def full_disk(rows, outdir):
        raise DISK_FULL  # after scaling.csv and scaling.md are written

    monkeypatch.setattr(scaling, "plot", full_disk)
    assert scaling.main([*SCALING, "--outdir", str(out)]) == 2
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no staging left


def test_scaling_replaces_its_set_whole_and_keeps_the_users_files(tmp_path, quick_scaling):
    out = previous_set(tmp_path / "s", scaling.TABLE_OUTPUTS)
    assert scaling.main([*SCALING, "--outdir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.md", *scaling.TABLE_OUTPUTS]
    assert (out / "notes.md").read_text() == "the user's"
    assert (out / "scaling.csv").read_text().startswith("system,model,gpus")
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", ["scaling.png", "recovery.md"])
def test_scaling_refuses_a_users_folder_under_an_outputs_name(tmp_path, monkeypatch, name):
    out = tmp_path / "s"
    (out / name).mkdir(parents=True)
    (out / name / "mine.txt").write_text("mine")
    before = tree(out)
    monkeypatch.setattr(scaling, "check_grid", never)
    monkeypatch.setattr(scaling, "recovery_study", never)
    extra = ["--recovery"] if name == "recovery.md" else []
    assert scaling.main([*SCALING, *extra, "--outdir", str(out)]) == 2
    assert tree(out) == before


# ----- compare_ft.py ---------------------------------------------------------------------
def test_compare_ft_refuses_a_users_folder_before_timing(tmp_path, monkeypatch, capsys):
    out = tmp_path / "ft"
    (out / "REPORT.md").mkdir(parents=True)
    (out / "REPORT.md" / "mine.txt").write_text("mine")
    before = tree(out)
    monkeypatch.setattr(compare_ft, "timed_run", never)
    assert compare_ft.main(["--outdir", str(out), "--model", "rmc1"]) == 2
    assert tree(out) == before
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"compare_ft.py: error: exists and is a directory, not a regular file: "
                     f"{out / 'REPORT.md'}"]  # fmt: skip


def test_compare_ft_failing_while_writing_leaves_the_previous_report(tmp_path, monkeypatch):
    out = previous_set(tmp_path / "ft", compare_ft.OWNED)
    before = tree(out)

    def compared(args):  # what compare() does once its numbers are in: the set's writing
        with compare_ft.replacing_dir(Path(args.outdir), compare_ft.OWNED) as staging:
            (staging / "REPORT.md").write_text("new")
            raise DISK_FULL  # while the plots are written

    monkeypatch.setattr(compare_ft, "compare", compared)
    assert compare_ft.main(["--outdir", str(out), "--model", "rmc1"]) == 2
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--mtbf", "0.001"], "--mtbf values must be in 60..3.2e+07 seconds"),
        (["--days", "1e-30"], "--days must be in [0.001, 3650]"),
        (["--mtbf", "60", "--days", "3650"], "more than 100,000"),
        (["--model", "rm9"], "unknown model 'rm9'"),
        (["--mtbf", "٣٦٠٠"], "--mtbf expects seconds separated by commas"),
    ],
)
def test_compare_ft_refuses_options_before_its_progress_bars(tmp_path, monkeypatch, capsys,
                                                             args, needle):  # fmt: skip
    monkeypatch.setattr(compare_ft, "timed_run", never)
    assert compare_ft.main(["--outdir", str(tmp_path / "ft"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "ft").exists()


# ----- reproduce_paper.py ----------------------------------------------------------------
def test_reproduce_paper_refuses_a_users_folder_before_running(tmp_path, monkeypatch):
    out = tmp_path / "repro"
    (out / "REPORT.md").mkdir(parents=True)
    (out / "REPORT.md" / "mine.txt").write_text("mine")
    before = tree(out)
    monkeypatch.setattr(reproduce_paper, "run_job", never)
    assert reproduce_paper.main(["--models", "rmc1", "--batches", "2", "--outdir", str(out)]) == 2
    assert tree(out) == before


def test_reproduce_paper_failing_half_way_leaves_the_previous_reproduction(tmp_path, monkeypatch):
    out = previous_set(tmp_path / "repro", ("REPORT.md", "timeline_rmc1.png"))
    (out / "cxl-rmc1").mkdir()
    (out / "cxl-rmc1" / "stats.txt").write_text("previous run")
    before = tree(out)
    calls = []

    def second_run_fails(options):
        calls.append(options.system)
        if len(calls) == 2:
            raise DISK_FULL
        Path(options.outdir).mkdir(parents=True)
        (Path(options.outdir) / "stats.txt").write_text("new run")
        return {}

    monkeypatch.setattr(reproduce_paper, "run_job", second_run_fails)
    assert reproduce_paper.main(["--models", "rmc1", "--batches", "2", "--outdir", str(out)]) == 2
    assert len(calls) == 2
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro"]
