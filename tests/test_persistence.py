"""The PMEM image format, torn writes and persistence domains."""

import numpy as np
import pytest

from components.persistence.image import CorruptImage, ImageLayout, PmemImage
from components.persistence.journal import Journal, Phase
from components.persistence.protocols import RedoProtocol, UndoProtocol
from workloads.options import RunOptions
from workloads.recording import build_journal, initial_image, simulate

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
LAYOUT = ImageLayout(total_rows=16, dim=4, mlp_count=10, max_rows=8)


def make_image(path=None):
    table = np.arange(64, dtype=np.float32).reshape(16, 4)
    return PmemImage.create(LAYOUT, table, np.ones(10, dtype=np.float32), path)


def test_image_file_round_trips_and_keeps_the_initial_checkpoint(tmp_path):
    path = str(tmp_path / "pmem.img")
    make_image(path).seal()
    image = PmemImage.open(path)
    assert image.layout == LAYOUT
    assert np.array_equal(image.table()[3], [12, 13, 14, 15])
    assert np.array_equal(image.mlp_record("base")[1], np.ones(10, dtype=np.float32))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b.__setitem__(0, 0), "bad magic"),
        (lambda b: b.__setitem__(70, b[70] ^ 1), "layout header fails its CRC"),
        (lambda b: b.__setitem__(LAYOUT.offset("data") + 5, 77), "data region fails its CRC"),
    ],
)
def test_a_corrupt_image_is_refused_with_a_clear_error(tmp_path, damage, message):
    path = str(tmp_path / "pmem.img")
    make_image(path).seal()
    raw = np.fromfile(path, dtype=np.uint8)
    damage(raw)
    raw.tofile(path)
    with pytest.raises(CorruptImage, match=f"corrupt PMEM image {path}: .*{message}"):
        PmemImage.open(path)


def test_a_truncated_image_is_refused(tmp_path):
    path = tmp_path / "pmem.img"
    make_image(str(path)).seal()
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(CorruptImage, match="truncated to 5000 B"):
        PmemImage.open(str(path))


def test_a_flagged_record_that_fails_its_crc_is_corruption_not_a_state():
    image = make_image()
    protocol = UndoProtocol(image)
    phase = protocol.emb_log_phase(0, 0, np.array([1, 2]), np.zeros((2, 4), np.float32))
    for offset, data in phase.writes:
        image.write(offset, data)
    for offset, data in protocol.flag_phase("emb0", 0).writes:
        image.write(offset, data)
    image.buf[LAYOUT.offset("emb0") + 64 + 9] ^= 1
    with pytest.raises(CorruptImage, match="emb0 record of batch 0 fails its CRC"):
        protocol.recover(image)


def test_writes_tear_at_the_8_byte_atomic_unit():
    journal = Journal()
    phase = Phase()
    phase.add(0, np.full(64, 7, dtype=np.uint8))
    journal.add_phase(phase, 0, 80, None)
    frozen = journal.frozen()
    base = np.zeros(64, dtype=np.uint8)
    assert frozen.image_at(base, 9).sum() == 0  # under one word's share of the interval
    assert np.array_equal(np.flatnonzero(frozen.image_at(base, 25)), np.arange(16))
    assert np.array_equal(np.flatnonzero(frozen.image_at(base, 79)), np.arange(56))
    assert frozen.image_at(base, 80).all()


def test_an_8_byte_flag_is_never_torn():
    journal = Journal()
    phase = Phase()
    phase.add(0, np.full(8, 1, dtype=np.uint8))
    journal.add_phase(phase, 100, 200, None)
    frozen = journal.frozen()
    states = {bytes(frozen.image_at(np.zeros(8, np.uint8), t)) for t in range(90, 210)}
    assert states == {bytes(8), bytes([1] * 8)}


def _first_update(domain: str):
    """(journal, base, tick the first in-place write was issued) for a PMEM-system run."""
    options = RunOptions(
        system="pmem", model="rmc1", rows=64, batch_size=8, batches=1, progress=False,
        sets=[("board.storage.domain", domain)],
    )  # fmt: skip
    stretch = simulate(options)
    base = initial_image(options)
    journal = build_journal(RedoProtocol(base), stretch)
    update = next(r for r in stretch.records if r.name == "update")
    issued, _ = stretch.writes[update.uid][0]
    return journal.frozen(), base, issued, stretch.facts[0]


def test_eadr_keeps_host_stores_at_issue_and_adr_only_once_the_wpq_accepts_them():
    survived = {}
    for domain in ("adr", "eadr"):
        journal, base, issued, facts = _first_update(domain)
        image = PmemImage(base.layout, journal.image_at(base.buf, issued))
        survived[domain] = np.array_equal(image.table()[facts.rows[0]], facts.new[0])
    assert survived == {"adr": False, "eadr": True}
