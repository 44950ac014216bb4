"""No field of a PMEM image that recovery acts on is outside a checksum: record headers
(batch and count under the record's CRC), flags (each word self-checking), the image
header (its JSON fields type-checked); a damaged or ill-typed field is a corrupt image,
one error line, never a traceback nor a silently different state."""

import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.persistence.image import (
    FLAG_NAMES,
    HEADER_BYTES,
    CorruptImage,
    ImageLayout,
    PmemImage,
    flag_batches,
    flag_word,
)
from components.persistence.protocols import UndoProtocol

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"
LAYOUT = ImageLayout(total_rows=16, dim=4, mlp_count=10, max_rows=8)
SMALL = ["--system", "cxl-b", "--model", "rmc1", "--rows", "64", "--batch-size", "8"]
SMALL += ["--functional", "--no-progress"]


def make_image(path=None):
    table = np.arange(64, dtype=np.float32).reshape(16, 4)
    return PmemImage.create(LAYOUT, table, np.ones(10, np.float32), path, {"seed": 1})


@given(st.integers(0, (1 << 32) - 2), st.integers(0, 63))
def test_a_flag_word_reads_back_its_batch_and_any_flipped_bit_fails_its_check(batch, bit):
    word = flag_word(batch)
    assert flag_batches(np.array([word, 0], np.uint64)).tolist() == [batch, -1]
    assert flag_batches(np.array([word ^ (1 << bit)], np.uint64)).tolist() == [-2]


@given(st.sampled_from(["batch", "count", "crc"]), st.integers(0, 63), st.integers(0, 6))
def test_a_flipped_bit_in_any_record_header_field_is_refused(field, bit, batch):
    """The CRC covers batch and count: a header whose batch was changed by one bit is
    not believed (before, the base record's batch was outside every check)."""
    image = make_image()
    protocol = UndoProtocol(LAYOUT)
    rows = np.array([1, 2, 5])
    for group in protocol.emb_record(batch % 2, batch, rows, np.zeros((3, 4), np.float32), None):
        image.words[group.words()[0]] = group.words()[1]
    for region in (f"emb{batch % 2}", "base"):
        start = LAYOUT.offset(region) + {"batch": 0, "count": 8, "crc": 16}[field]
        bit = bit % 32 if field == "crc" else bit
        copy = image.copy()
        copy.buf[start + bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptImage, match="fails its CRC|record size|record count"):
            copy.record(region, LAYOUT.mlp_bytes if region == "base" else None)


def test_flags_all_ones_are_a_corrupt_image_not_a_recovery():
    image = make_image()
    image.region("flags")[: 8 * len(FLAG_NAMES)] = 0xFF
    with pytest.raises(CorruptImage, match="flag emb0 fails its check"):
        UndoProtocol(LAYOUT).plan(image)


def rewrite_header(path: Path, header) -> None:
    """Replace an image's header JSON by ``header`` (any JSON), with a valid CRC."""
    body = json.dumps(header).encode()
    raw = bytearray(path.read_bytes())
    raw[64:HEADER_BYTES] = bytes(HEADER_BYTES - 64)
    raw[64 : 64 + len(body)] = body
    raw[12:20] = np.array([len(body), zlib.crc32(body)], "<u4").tobytes()
    path.write_bytes(bytes(raw))


WRONG = st.one_of(
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(max_value=0),
    st.integers(min_value=(1 << 40) + 1, max_value=1 << 70),
)
FIELDS = ["total_rows", "dim", "mlp_count", "max_rows", "optimizer"]


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=st.sampled_from([*FIELDS, "layout", "identity", "header"]),
    value=WRONG,
)
def test_an_image_header_with_an_ill_typed_field_is_always_refused(tmp_path, where, value):
    """Any header field of the wrong JSON type (or out of range) is a CorruptImage with
    the image's path, never another exception and never an image opened with it."""
    path = tmp_path / "pmem.img"
    make_image(str(path)).buf.flush()
    header = {"layout": LAYOUT.fields(), "identity": {"seed": 1}}
    if where in FIELDS:
        if where == "optimizer" and value in ("sgd", "adagrad"):
            value = 3
        header["layout"][where] = value
    elif where == "header":
        header = value if not isinstance(value, dict) else [value]
    else:
        header[where] = value if not isinstance(value, dict) else [value]
    rewrite_header(path, header)
    with pytest.raises(CorruptImage, match=f"corrupt PMEM image {path}"):
        PmemImage.open(str(path))


def run(args, outdir):
    command = [sys.executable, str(CONFIG), *SMALL, *args, "--outdir", str(outdir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def one_line_error(proc, needle):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainingcxl.py: error:"), proc.stderr
    assert needle in lines[0], proc.stderr


@pytest.fixture(scope="module")
def cut_image(tmp_path_factory):
    """An image a power cut at 0.4 ms of a 6-batch CXL-B run left."""
    where = tmp_path_factory.mktemp("cut")
    image = where / "pmem.img"
    args = ["--batches", "6", "--fail-at", "0.4ms", "--pmem-image", str(image)]
    cut = run([*args, "--halt-on-failure"], where / "out")
    assert cut.returncode == 0, cut.stderr
    return image


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda h: h["layout"].update(dim="4"), "dim must be an integer"),
        (lambda h: h["layout"].update(total_rows=True), "total_rows must be an integer"),
        (lambda h: h.update(identity=[1]), "identity is not an object"),
        (lambda h: h.update(layout=None), "not an object with a layout"),
    ],
)
def test_an_ill_typed_header_is_one_error_line_and_the_image_untouched(
    cut_image, tmp_path, damage, needle
):
    image = tmp_path / "pmem.img"
    image.write_bytes(cut_image.read_bytes())
    header = PmemImage.open(str(image), writable=False)
    fields = {"layout": header.layout.fields(), "identity": header.identity}
    damage(fields)
    rewrite_header(image, fields)
    before = image.read_bytes()
    one_line_error(run(["--batches", "6", "--pmem-image", str(image)], tmp_path / "x"), needle)
    assert image.read_bytes() == before


def test_flags_all_ones_are_one_error_line(cut_image, tmp_path):
    image = tmp_path / "pmem.img"
    raw = bytearray(cut_image.read_bytes())
    start = PmemImage.open(str(cut_image), writable=False).layout.offset("flags")
    raw[start : start + 8 * len(FLAG_NAMES)] = b"\xff" * (8 * len(FLAG_NAMES))
    image.write_bytes(bytes(raw))
    proc = run(["--batches", "6", "--pmem-image", str(image)], tmp_path / "x")
    one_line_error(proc, "flag emb0 fails its check")


def test_an_image_cut_beyond_the_run_is_one_error_line(cut_image, tmp_path):
    from simulate.failures.oracle import expected_for

    image = tmp_path / "pmem.img"
    image.write_bytes(cut_image.read_bytes())
    cut = expected_for("undo", PmemImage.open(str(image), writable=False)).batch
    assert cut >= 2  # the precondition: the cut is beyond a 1-batch run
    proc = run(["--batches", "1", "--pmem-image", str(image)], tmp_path / "x")
    one_line_error(proc, f"was cut at batch {cut}, beyond the --batches 1")


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.sampled_from(FIELDS), value=WRONG)
def test_any_ill_typed_layout_field_is_refused_by_the_cli_in_one_line(
    cut_image, tmp_path_factory, where, value
):
    """The same property end to end: one `error:` line, exit 2, the image untouched."""
    tmp_path = tmp_path_factory.mktemp("bad")
    image = tmp_path / "pmem.img"
    image.write_bytes(cut_image.read_bytes())
    header = PmemImage.open(str(image), writable=False)
    fields = {"layout": header.layout.fields(), "identity": header.identity}
    fields["layout"][where] = 3 if where == "optimizer" and value in ("sgd", "adagrad") else value
    rewrite_header(image, fields)
    before = image.read_bytes()
    proc = run(["--batches", "6", "--pmem-image", str(image)], tmp_path / "x")
    one_line_error(proc, f"corrupt PMEM image {image}: unreadable header")
    assert image.read_bytes() == before
