"""NumPy arrays of numbers as Arrow arrays, without `pa.array`'s detour: given an ndarray, it looks
up `numpy.ma` (masked arrays), which NumPy imports on first use (0.01-0.02 s, in every archive
of an nsys capture, for arrays that are never masked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def arrow_array(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """A one-dimensional array of integers or floats as the Arrow array of its type, its buffer
    shared where it is contiguous; `null` (booleans), where given, marks the values that are
    NULL in Arrow."""
    import numpy as np
    import pyarrow as pa

    if values.dtype.kind not in "iuf":  # Arrow's booleans are bits, its texts offsets
        raise TypeError(f"arrow_array takes numbers, not {values.dtype}")
    values = np.ascontiguousarray(values)
    validity = None
    if null is not None and null.any():
        validity = pa.py_buffer(np.packbits(~null.astype(bool), bitorder="little"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [validity, pa.py_buffer(values)])
