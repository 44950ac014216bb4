"""Checkpoint stores a software policy can write to (``--store NAME``): parameter sets
of the SSD model (components/memory/ssd.py), each from a published figure. A
checkpoint moves gigabytes in order, so its time is the store's streaming bandwidth;
the latency counts once per checkpoint."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StorePreset:
    """Overrides of the SSD model's parameters, and where each figure comes from."""

    description: str
    params: dict[str, str]
    source: str


STORES: dict[str, StorePreset] = {
    "table2-ssd": StorePreset(
        "TrainingCXL Table 2's SSD (the default)",
        {},
        "TrainingCXL Table 2: 0.02x a DDR4 channel, 0.384 GB/s each way, 16.5 us",
    ),
    "nvme-gen4": StorePreset(
        "a current datacenter NVMe drive: Samsung PM9A3 U.2, PCIe 4.0 x4",
        {"ctrl_read_bandwidth": "6.5GB/s", "ctrl_write_bandwidth": "3.5GB/s"},
        "Samsung PM9A3 datasheet (U.2 3.84-7.68 TB): 6,500 MB/s sequential read, 3,500 "
        "MB/s sequential write; latency left at Table 2's 16.5 us (once per checkpoint)",
    ),
    "object-store": StorePreset(
        "a remote object store (Amazon S3) from a GPU training instance",
        {
            "ctrl_read_bandwidth": "6.269GB/s",
            "ctrl_write_bandwidth": "6.269GB/s",
            "read_latency": "50ms",
            "write_latency": "50ms",
        },
        "s3-benchmark (D. Vassallo, 2019): 6,269 MB/s peak S3 throughput from a "
        "p3dn.24xlarge (uploads assumed at that rate); AWS 'Best Practices Design "
        "Patterns: Optimizing Amazon S3 Performance': small requests' median latency "
        "'often in the tens of milliseconds' (50 ms taken)",
    ),
}
DEFAULT_STORE = "table2-ssd"


def apply_store(store, name: str) -> None:
    """Set the SSD model ``store`` to the preset ``name`` (a key of STORES)."""
    for key, value in STORES[name].params.items():
        setattr(store, key, value)
