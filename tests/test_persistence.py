"""The PMEM image, the journal matched to device requests by address, the persistency
model's crash states, and each protocol's guarantee."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.memory.write_stream import PersistedWrites
from components.persistence.explorer import CrashExplorer, ExploreSettings
from components.persistence.image import (
    RECORD_HEADER,
    CorruptImage,
    ImageLayout,
    PmemImage,
    identity_mismatch,
)
from components.persistence.journal import JournalBuilder, Requests
from components.persistence.protocols import PROTOCOLS, UndoProtocol, pad_params
from components.persistence.writes import Writes
from simulate.failures.oracle import expected
from simulate.failures.recording import build_journal, persist_domain, run_stretch
from simulate.run.options import SYSTEMS, RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
LAYOUT = ImageLayout(total_rows=16, dim=4, mlp_count=10, max_rows=8)


def make_image(path=None, layout=LAYOUT, identity=None):
    table = np.arange(64, dtype=np.float32).reshape(16, 4)
    return PmemImage.create(layout, table, np.ones(10, dtype=np.float32), path, identity)


# ----- the image ---------------------------------------------------------------------------
def test_image_file_round_trips_with_its_identity_and_the_initial_checkpoint(tmp_path):
    path = str(tmp_path / "pmem.img")
    make_image(path, identity={"system": "cxl-b", "seed": 3}).seal()
    image = PmemImage.open(path)
    assert image.layout == LAYOUT and image.identity == {"system": "cxl-b", "seed": 3}
    assert np.array_equal(image.table()[3], [12, 13, 14, 15])
    batch, params, acc = image.mlp_record("base")
    assert batch == 0 and np.array_equal(params, np.ones(10)) and acc is None


def test_identity_mismatch_names_every_differing_field():
    found = {"system": "cxl-b", "seed": 1, "rows": 64}
    assert identity_mismatch(found, dict(found)) == []
    assert identity_mismatch(found, {**found, "seed": 2, "rows": 32}) == [
        "rows 64 (these options: 32)",
        "seed 1 (these options: 2)",
    ]


def test_adagrad_regions_come_after_every_shared_region():
    """The boards lay out an SGD image; an Adagrad image must keep every address they
    write (its accumulator regions follow the seal)."""
    sgd, ada = LAYOUT, ImageLayout(16, 4, 10, 8, "adagrad")
    for name, (start, size) in sgd.regions().items():
        assert ada.regions()[name] == (start, size)
    assert min(ada.offset(n) for n in ("rowacc", "mlpacc0", "baseacc")) >= sgd.size


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b.__setitem__(0, 0), "bad magic"),
        (lambda b: b.__setitem__(70, b[70] ^ 1), "header fails its CRC"),
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
    protocol = UndoProtocol(LAYOUT)
    for group in protocol.emb_record(0, 0, np.array([1, 2]), np.zeros((2, 4), np.float32), None):
        image.words[group.words()[0]] = group.words()[1]
    flag = protocol.flag("emb0", 0)
    image.words[flag.words()[0]] = flag.words()[1]
    image.buf[LAYOUT.offset("emb0") + RECORD_HEADER + 9] ^= 1
    with pytest.raises(CorruptImage, match="emb0 record of batch 0 fails its CRC"):
        protocol.recover(image)


# ----- the journal: functional writes matched to device requests by address -----------------
def requests(*streams):
    """Requests from (addresses, size, persist ticks, issue tick) streams."""
    return Requests.from_events(
        [
            PersistedWrites(1, np.array(a), size, np.array(t), issued)
            for a, size, t, issued in streams
        ]
    )


def test_a_write_spanning_requests_takes_each_requests_persist_tick():
    """A 96 B write over three 32 B requests is cut into three pieces, each durable at
    its own request's tick: torn at request granularity, not spread by bytes."""
    payload = np.arange(96, dtype=np.uint8)
    builder = JournalBuilder(LAYOUT)
    reqs = requests(([4096, 4128, 4160], 32, [300, 100, 200], 50))
    builder.add_op(7, 10, [[Writes.one(4096, payload)]], reqs)
    journal = builder.freeze()
    assert journal.dst.tolist() == [512, 516, 520] and journal.count.tolist() == [4, 4, 4]
    assert journal.p.tolist() == [300, 100, 200]
    assert journal.lo.tolist() == [50] * 3 and journal.hi.tolist() == [300] * 3
    words = np.zeros(1024, dtype=np.uint64)
    journal.image_at(words, 150)
    got = words.view(np.uint8)[4096:4192]
    assert np.array_equal(got[32:64], payload[32:64]) and not got[:32].any() and not got[64:].any()


def test_bytes_no_request_covered_are_unmatched_or_clipped():
    reqs = requests(([4096], 16, [100], 0))
    builder = JournalBuilder(LAYOUT)
    builder.add_op(1, 5, [[Writes.one(4096, np.ones(32, np.uint8))]], reqs)
    clipped = JournalBuilder(LAYOUT)
    clipped.add_op(1, 5, [[Writes.one(4096, np.ones(32, np.uint8), clip=True)]], reqs)
    assert builder.freeze().unmatched_bytes == 16
    only = clipped.freeze()
    assert only.unmatched_bytes == 0 and only.count.tolist() == [2]


def test_epochs_are_ordered_by_declared_fences_and_checked_against_the_timing():
    """Epoch k+1's writes may not become durable before epoch k's fence; a declared
    order the timing contradicts is reported (the board did not fence there)."""
    rows = Writes.one(4096, np.ones(16, np.uint8))
    flag = Writes.word(4096 + 64, 1)
    timed = requests(([4096], 16, [100], 20), ([4160], 8, [300], 150))
    good = JournalBuilder(LAYOUT)
    good.add_op(1, 0, [[rows], [flag]], timed)
    journal = good.freeze()
    assert journal.unhonoured_fences == []
    assert journal.hi.tolist() == [100, 300] and journal.lo.tolist() == [20, 150]
    bad = JournalBuilder(LAYOUT)
    bad.add_op(1, 0, [[flag], [rows]], timed)  # flag declared first
    reversed_ = bad.freeze()
    assert reversed_.unhonoured_fences == [(1, 1)]
    flag_piece, rows_piece = 0, 1
    assert reversed_.hi[flag_piece] <= reversed_.lo[rows_piece]  # rows only after the flag


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_real_protocol_write_is_carried_by_a_device_request(system):
    """The protocols and the boards agree: every functional byte lands at an address the
    timing wrote in the same op, and every declared fence is one the timing honours."""
    options = RunOptions(system=system, model="rmc1", rows=64, batch_size=8, batches=2)
    options.progress = False
    stretch = run_stretch(options)
    journal = build_journal(PROTOCOLS[system](stretch.layout), stretch)
    assert journal.unmatched_bytes == 0
    assert journal.unhonoured_fences == [] and journal.overlaps == 0
    assert (journal.lo <= journal.p).all() and (journal.p <= journal.hi).all()
    if system != "dram":
        assert len(journal) > 1000


@pytest.mark.parametrize("domain", ["adr", "eadr"])
def test_host_stores_reorder_within_their_fence_only_under_adr(domain):
    """Under ADR an update's stores may become durable in any order until its fence
    (clwb + sfence); under eADR the caches are in the domain: durable at issue, in
    program order (no window to reorder in)."""
    options = RunOptions(system="pmem", model="rmc1", rows=64, batch_size=8, batches=1)
    options.progress = False
    options.sets = [("board.storage.domain", domain)]
    stretch = run_stretch(options)
    journal = build_journal(PROTOCOLS["pmem"](stretch.layout), stretch)
    update = next(r for r in stretch.records if r.name == "update")
    mine = journal.op == update.uid
    assert persist_domain(stretch.board) == domain
    if domain == "adr":
        assert (journal.lo[mine] < journal.hi[mine]).all()
        assert np.unique(journal.hi[mine]).size == 1
    else:
        assert (journal.lo[mine] == journal.hi[mine]).all()


# ----- the crash states the model allows --------------------------------------------------------
def toy_journal(windows):
    """One piece per (lo, p, hi, words): distinct addresses, payload value = index + 1."""
    builder = JournalBuilder(LAYOUT)
    offset = 4096
    for k, (lo, p, _hi, words) in enumerate(windows):
        reqs = requests(([offset], 8 * words, [p], lo))
        data = np.full(words, k + 1, dtype=np.uint64)
        builder.add_op(k, lo, [[Writes.one(offset, data)]], reqs)
        offset += 8 * words
    journal = builder.freeze()
    journal.hi[:] = [hi for _, _, hi, _ in windows]
    return journal


def state_words(journal, explorer, state):
    """Which words of each piece the image holds now (True = durable)."""
    state.apply()
    return [explorer.words[d : d + n] != 0 for d, n in zip(journal.dst, journal.count, strict=True)]


def test_a_small_interval_is_explored_exhaustively_word_by_word():
    journal = toy_journal([(0, 10, 50, 2), (5, 20, 50, 1)])
    explorer = CrashExplorer(journal, np.zeros(1024, np.uint64), ExploreSettings(budget=8))
    seen = set()
    for state in explorer.walk():
        if state.mode == "full" and state.tick == 5:
            seen.add(tuple(np.concatenate(state_words(journal, explorer, state)).tolist()))
    assert len(seen) == 8  # 3 words in flight: every subset of them


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30), st.integers(1, 3)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 5),
)
def test_every_visited_state_is_allowed_and_undone(windows, seed):
    """Whatever the windows: a piece whose fence passed is durable, one not yet issued
    is not, a prefix state holds exactly the pieces with p <= T, and an explored state
    leaves no trace on the next one."""
    windows = [(lo, max(lo, p), max(lo, p, hi), n) for lo, p, hi, n in windows]
    journal = toy_journal(windows)
    journal.lo[:] = [w[0] for w in windows]
    journal.p[:] = [w[1] for w in windows]
    explorer = CrashExplorer(
        journal, np.zeros(1024, np.uint64), ExploreSettings(budget=6, seed=seed)
    )
    for state in explorer.walk():
        held = state_words(journal, explorer, state)
        for k, (lo, p, hi, _) in enumerate(windows):
            if state.mode == "prefix":
                assert held[k].all() == (p <= state.tick) and held[k].any() == (p <= state.tick)
            elif hi <= state.tick:
                assert held[k].all()
            elif lo > state.tick:
                assert not held[k].any()


# ----- protocol guarantees and recovery pieces --------------------------------------------
@pytest.mark.parametrize(
    "kind, flags, base, want",
    [
        ("redo", [0, 0, 0, 0], 0, (0, 0)),
        ("redo", [3, 4, 0, 0], 0, (4, 4)),  # logs of batches 2 and 3 committed
        ("undo", [3, 4, 3, 0], 0, (2, 2)),  # batch 3 has no MLP log yet
        ("undo", [5, 4, 5, 4], 0, (4, 4)),
        ("relaxed", [5, 4, 2, 0], 0, (4, 1)),  # MLP copy of batch 1
        ("relaxed", [5, 4, 6, 0], 0, (4, 0)),  # a copy newer than R does not count
        ("relaxed", [5, 4, 0, 0], 3, (4, 3)),  # an earlier recovery made copy 3 the base
        ("none", [9, 9, 9, 9], 0, (0, 0)),
    ],
)
def test_each_protocol_guarantees_a_specific_state(kind, flags, base, want):
    got = expected(kind, np.array(flags) - 1, base)  # the batch each flag marks
    assert (got.batch, got.mlp_batch) == want


def test_undo_rollback_restores_each_row_to_its_oldest_logged_value():
    """Logs of batches 2 and 1 both hold row 3: the older value (batch 1's) wins, one
    write per row, so the writes of the epoch may persist in any order."""
    image = make_image()
    protocol = UndoProtocol(LAYOUT)
    logs = {1: ([3, 5], 10.0), 2: ([3, 7], 20.0)}
    for n, (rows, value) in logs.items():
        values = np.full((2, 4), value, np.float32)
        for group in protocol.emb_record(n % 2, n, np.array(rows), values, None):
            image.words[group.words()[0]] = group.words()[1]
    rec = protocol.plan(image)
    rows = protocol.rollback(image, rec, [(2, "emb0"), (1, "emb1")])
    offsets = rows[0].offsets
    values = rows[0].data.view(np.float32)[:, 0]
    got = dict(
        zip(((offsets - LAYOUT.offset("data")) // 16).tolist(), values.tolist(), strict=True)
    )
    assert got == {3: 10.0, 5: 10.0, 7: 20.0}


def test_padded_parameters_are_whole_words():
    assert pad_params(np.ones(3, np.float32)).tolist() == [1, 1, 1, 0]
