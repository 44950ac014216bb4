"""Check the simulator against published measurements of real devices.

    python scripts/validate.py                  # every row; rewrites docs/validation.md
    python scripts/validate.py --fast           # the fast rows (the tests run these)
    python scripts/validate.py --device optane  # one file of docs/validation/

Each row of docs/validation/<device>.yaml holds a published value with its source, the
simulator command that measures the same thing, where its output holds the figure, and
the band the ratio must stay in (|simulated / published - 1| <= band). The script runs
every command from the repository root (``python <command...>``; a command shared by
several rows runs once), prints the table and exits 1 when a row leaves its band. A
full run (no --fast, no --device) regenerates docs/validation.md; a partial run leaves
it alone unless --doc names a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("validate.py")

import yaml  # noqa: E402

from components.sim.outputs import NotRegularFile, check_replaceable, replacing_files  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402

ROWS_DIR = ROOT / "docs" / "validation"
DOC = ROOT / "docs" / "validation.md"
FIELDS = {
    "id": str,
    "experiment": str,
    "published": (int, float),
    "unit": str,
    "source": str,
    "role": str,
    "band": (int, float),
    "fast": bool,
    "command": list,
    "output": str,
    "metric": str,
}
ROLES = ("calibration", "validation")
OUTPUTS = ("results.json", "stdout")


class RowError(ValueError):
    """A rows file that does not follow the schema (one line, exit 2)."""


@dataclass(frozen=True)
class Row:
    id: str
    experiment: str
    published: float
    unit: str
    source: str
    role: str
    band: float
    fast: bool
    command: tuple[str, ...]
    output: str
    metric: str
    device: str


@dataclass(frozen=True)
class Verdict:
    row: Row
    simulated: float

    @property
    def ratio(self) -> float:
        return self.simulated / self.row.published

    @property
    def in_band(self) -> bool:
        return in_band(self.simulated, self.row.published, self.row.band)


def in_band(simulated: float, published: float, band: float) -> bool:
    """Whether |simulated / published - 1| <= band (a NaN never is); a band's edge, in
    decimal, is in it."""
    return abs(simulated / published - 1.0) <= band + 1e-12


def load_rows(path: Path) -> list[Row]:
    """The rows of one file, each checked against the schema."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RowError(f"{path.name}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, list):
        raise RowError(f"{path.name}: expected a list of rows")
    rows = []
    for number, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            raise RowError(f"{path.name}: row {number} is not a mapping")
        label = f"{path.name}: row {entry.get('id', number)}"
        for name, kind in FIELDS.items():
            value = entry.get(name)
            if (
                value is None
                or not isinstance(value, kind)
                or isinstance(value, bool) != (kind is bool)
            ):
                raise RowError(f"{label}: field {name!r} missing or not {_kind(kind)}")
        if entry["role"] not in ROLES or entry["output"] not in OUTPUTS:
            raise RowError(f"{label}: role must be one of {ROLES}, output one of {OUTPUTS}")
        if not entry["published"] or not 0 < entry["band"] < 1 or not entry["command"]:
            raise RowError(f"{label}: published must be non-zero, band in (0, 1), a command")
        rows.append(
            Row(
                **{k: entry[k] for k in FIELDS if k != "command"},
                command=tuple(str(part) for part in entry["command"]),
                device=path.stem,
            )
        )
    return rows


def _kind(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def select(rows: list[Row], fast: bool) -> list[Row]:
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise RowError(f"row id {row.id!r} appears twice")
        seen.add(row.id)
    return [row for row in rows if row.fast or not fast]


def metric(document, path: str) -> float:
    """The number at a dotted path (a list index as a number: streams.0.bandwidth_gbps)."""
    value = document
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return float(value)


def run_command(command: tuple[str, ...], output: str) -> dict:
    """Run one row's command from the repository root; its JSON output."""
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--outdir", tmp] if output == "results.json" else ["--json"]
        done = subprocess.run(
            [sys.executable, *command, *extra], cwd=ROOT, capture_output=True, text=True
        )
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {last}")
        if output == "results.json":
            return json.loads((Path(tmp) / "results.json").read_text())
        return json.loads(done.stdout)


def measure(rows: list[Row], runner=None) -> list[Verdict]:
    """Each row's simulated value; a command several rows share runs once."""
    runner = runner or run_command
    outputs: dict[tuple, dict] = {}
    verdicts = []
    for row in rows:
        key = (row.command, row.output)
        if key not in outputs:
            print(f"  running {' '.join(row.command)}", file=sys.stderr, flush=True)
            outputs[key] = runner(row.command, row.output)
        verdicts.append(Verdict(row, metric(outputs[key], row.metric)))
    return verdicts


def table(verdicts: list[Verdict]) -> str:
    """The markdown table of docs/validation.md."""
    lines = [
        "| id / experiment | published (source) | simulated (command) | ratio | band | role "
        "| in band |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        row = v.row
        command = " ".join(["python", *row.command])
        lines.append(
            f"| `{row.id}`<br>{row.experiment} | {row.published:g} {row.unit}<br>{row.source} "
            f"| {v.simulated:.4g} {row.unit}<br>`{command}` ({row.output}: `{row.metric}`) "
            f"| {v.ratio:.3f} | ±{row.band:.0%} | {row.role} | {'yes' if v.in_band else '**NO**'} |"
        )
    return "\n".join(lines) + "\n"


def document(verdicts: list[Verdict]) -> str:
    held = sum(v.in_band for v in verdicts)
    return (
        "# Validation against real devices\n\n"
        "Generated by `python scripts/validate.py` from the rows in docs/validation/*.yaml "
        "(do not edit by hand). Each row: a published measurement of a real device with "
        "its source, the simulator command that measures the same thing and the band the "
        "ratio must stay in. `calibration` rows were fitted on (or give a parameter); "
        "`validation` rows are held out and were never fitted. The script exits 1 when a "
        "row leaves its band; `--fast` runs the subset the tests run "
        "(tests/test_validation.py). Why a row is out of its band is explained on the "
        "device's page (Optane: docs/calibration.md, 'Optane rows out of their band'; the "
        "CXL memory expander: docs/calibration.md, 'The CXL-A 2:1 row out of its band').\n\n"
        f"{held} of {len(verdicts)} rows in band.\n\n" + table(verdicts)
    )


def files(device: str | None) -> list[Path]:
    found = sorted(ROWS_DIR.glob("*.yaml"))
    if device is None:
        return found
    chosen = [p for p in found if p.stem == device]
    if not chosen:
        names = ", ".join(p.stem for p in found) or "none"
        raise RowError(f"--device {device!r}: no docs/validation/{device}.yaml (have: {names})")
    return chosen


def check_doc(doc: Path) -> None:
    """--doc is refused before any row runs: its folder must exist and take a new file,
    and it must be a file (or missing), replaced only once the document is complete."""
    if not doc.parent.is_dir():
        raise UsageError(f"--doc {doc}: {doc.parent} is not a directory")
    try:
        check_replaceable(doc)
        with tempfile.TemporaryFile(dir=doc.parent):  # its folder takes a new file
            pass
    except NotRegularFile as exc:
        raise UsageError(f"--doc {doc}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--doc {doc}: cannot write in {doc.parent} ({exc.strerror})") from None


def main(argv: list[str] | None = None) -> int:
    """One error line and exit 2 for a bad row file or a command that fails; Ctrl-C while
    the commands run is one line and exit 130, as every entry point's."""
    return run_main("validate.py", lambda: validate(argv))


def validate(argv: list[str] | None) -> int:
    parser = QuietParser(prog="validate.py", description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the rows marked fast")
    parser.add_argument("--device", help="only docs/validation/<DEVICE>.yaml")
    parser.add_argument("--doc", type=Path, help="write the document here")
    args = parser.parse_args(argv)
    doc = args.doc or (DOC if not args.fast and args.device is None else None)
    if doc is not None:
        check_doc(doc)
    try:
        rows = select([row for path in files(args.device) for row in load_rows(path)], args.fast)
        verdicts = measure(rows)
    except (RowError, RuntimeError, KeyError, IndexError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if doc is not None:
        with replacing_files(doc) as (temp,):
            temp.write_text(document(verdicts))
    print(table(verdicts), end="")
    out = [v.row.id for v in verdicts if not v.in_band]
    print(f"{len(verdicts) - len(out)} of {len(verdicts)} rows in band", end="")
    print(f"; out of band: {', '.join(out)}" if out else "")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
