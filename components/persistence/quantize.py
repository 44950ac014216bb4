"""Check-N-Run's checkpoint quantization: uniform asymmetric, one range per row.

Each row is stored as ``bits``-bit codes of (x - min) / step with step =
(max - min) / (2^bits - 1), plus the row's min and step as FP32 (Eisenman et al.,
"Check-N-Run: a Checkpointing System for Training Deep Learning Recommendation Models",
NSDI 2022, section 4.2: uniform quantization with per-row range). Rounding to the
nearest code bounds the error of every element by step / 2.
"""

from __future__ import annotations

import numpy as np

RANGE_BYTES = 8  # the row's min and step, FP32 each
BITS = (4, 8)


def quantized_row_bytes(dim: int, bits: int) -> int:
    """Bytes one row of ``dim`` FP32 elements takes in a ``bits``-bit checkpoint."""
    if bits not in BITS:
        raise ValueError(f"quantization to {bits} bits: one of {BITS}")
    return -(-dim * bits // 8) + RANGE_BYTES


def quantize(rows: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (uint8, one per element), each row's min and step (float32)."""
    rows = np.asarray(rows, dtype=np.float32)
    low = rows.min(axis=1)
    step = (rows.max(axis=1) - low) / np.float32(2**bits - 1)
    safe = np.where(step > 0, step, np.float32(1))
    codes = np.rint((rows - low[:, None]) / safe[:, None])
    return np.clip(codes, 0, 2**bits - 1).astype(np.uint8), low, step.astype(np.float32)


def dequantize(codes: np.ndarray, low: np.ndarray, step: np.ndarray) -> np.ndarray:
    return (low[:, None] + codes.astype(np.float32) * step[:, None]).astype(np.float32)


def error_bound(step: np.ndarray) -> np.ndarray:
    """Largest error of any element of each row: half a step (plus FP32 rounding of the
    reconstruction, a few ulps of the row's magnitude)."""
    return step / 2
