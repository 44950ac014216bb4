"""components/sim/outputs.py: a run's outputs replace the previous ones as a set."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from components.sim import outputs
from components.sim.outputs import replacing_dir, replacing_files

OWNED = ("a.txt", "b.txt", "plot.png")


def contents(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def write_set(folder, **files):
    for name, text in files.items():
        (folder / name.replace("_", ".")).write_text(text)


@pytest.fixture
def previous(tmp_path):
    out = tmp_path / "out"
    with replacing_dir(out, OWNED) as staging:
        write_set(staging, a_txt="old a", b_txt="old b", plot_png="old plot")
    return out


def test_a_new_outdir_appears_complete_and_nothing_else_is_left(tmp_path, previous):
    assert contents(previous) == {"a.txt": b"old a", "b.txt": b"old b", "plot.png": b"old plot"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt(), ValueError("bad")],
)
def test_a_run_failing_half_way_leaves_the_previous_set(tmp_path, previous, failure):
    before = contents(previous)
    with pytest.raises(type(failure)):
        with replacing_dir(previous, OWNED) as staging:
            write_set(staging, a_txt="new a")
            raise failure
    assert contents(previous) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_new_set_replaces_the_old_one_whole(tmp_path, previous):
    inode = previous.stat().st_ino
    with replacing_dir(previous, OWNED) as staging:
        write_set(staging, a_txt="new a", b_txt="new b")
    assert contents(previous) == {"a.txt": b"new a", "b.txt": b"new b"}  # no old plot
    assert previous.stat().st_ino != inode  # exchanged, not rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_without_an_atomic_exchange_the_result_is_the_same(tmp_path, previous, monkeypatch):
    monkeypatch.setattr(outputs, "_exchange", lambda a, b: False)
    with replacing_dir(previous, OWNED) as staging:
        write_set(staging, a_txt="new a")
    assert contents(previous) == {"a.txt": b"new a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_files_that_are_not_outputs_stay(tmp_path, previous):
    (previous / "cut.img").write_bytes(b"image")
    (previous / "gem5").mkdir()
    (previous / "gem5" / "config.ini").write_text("gem5's own")
    with replacing_dir(previous, OWNED) as staging:
        write_set(staging, b_txt="new b")
    assert (previous / "cut.img").read_bytes() == b"image"
    assert (previous / "gem5" / "config.ini").read_text() == "gem5's own"
    assert (previous / "b.txt").read_text() == "new b"
    assert not (previous / "a.txt").exists() and not (previous / "plot.png").exists()
    assert sorted(p.name for p in previous.iterdir()) == ["b.txt", "cut.img", "gem5"]


def test_the_working_directory_is_never_swapped_away(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inode = tmp_path.stat().st_ino
    with replacing_dir(tmp_path, OWNED) as staging:
        write_set(staging, a_txt="here")
    assert tmp_path.stat().st_ino == inode and (tmp_path / "a.txt").read_text() == "here"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_nested_sets_swap_their_directories(tmp_path):
    """reproduce_paper: per-run directories inside the report's set."""
    owned = lambda name: name.startswith("run-") or name == "REPORT.md"  # noqa: E731
    runs = lambda name: name.startswith("run-")  # noqa: E731
    for text in ("old", "new"):
        with replacing_dir(tmp_path / "repro", owned, runs) as staging:
            (staging / "REPORT.md").write_text(text)
            for run in ("run-1", "run-2") if text == "old" else ("run-1",):
                with replacing_dir(staging / run, OWNED) as inner:
                    write_set(inner, a_txt=f"{text} {run}")
    repro = tmp_path / "repro"
    assert sorted(p.name for p in repro.iterdir()) == ["REPORT.md", "run-1"]
    assert (repro / "run-1" / "a.txt").read_text() == "new run-1"


def test_staging_left_by_a_killed_run_is_cleaned_up_by_the_next(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], text=True,
                          capture_output=True).stdout.strip()  # fmt: skip
    stale = tmp_path / f".out{outputs.STAGING}{outputs.socket.gethostname()}-{dead}"
    stale.mkdir()
    (stale / "a.txt").write_text("half")
    alive = tmp_path / f".out{outputs.STAGING}{outputs.socket.gethostname()}-{os.getppid()}"
    alive.mkdir()
    with replacing_dir(tmp_path / "out", OWNED) as staging:
        write_set(staging, a_txt="new")
    assert not stale.exists() and alive.exists()  # a live process's staging is its own


def test_replacing_files_leaves_no_temporary_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "REPORT.md"
    target.write_text("good report")

    def full(self, text):
        self.open("w").write(text[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(target), "write_text", full)
    with pytest.raises(OSError), replacing_files(target) as (temp,):
        temp.write_text("new report")
    monkeypatch.undo()
    assert target.read_text() == "good report"
    assert [p.name for p in tmp_path.iterdir()] == ["REPORT.md"]


@pytest.mark.parametrize("name", ["a.txt", "plot.png"])
@pytest.mark.parametrize("others", [False, True], ids=["swapped", "moved-in"])
def test_a_users_directory_under_an_outputs_name_is_refused_and_kept(tmp_path, name, others):
    """A folder of the user's called like a file of the set is neither replaced nor
    removed, whether the outdir is swapped whole or its entries moved in one by one:
    the set is refused before anything is written."""
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    (out / name / "mine.txt").write_text("mine")
    if others:
        (out / "notes.md").write_text("the user's")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(outputs.NotRegularFile, match="is a directory, not a regular file"):
        with replacing_dir(out, OWNED) as staging:
            write_set(staging, a_txt="new a", b_txt="new b")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (out / name / "mine.txt").read_text() == "mine"
