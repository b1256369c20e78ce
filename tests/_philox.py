"""An independent NumPy implementation of Philox4x32-10 and of the documented dropout
mapping, to check the library's masks bit for bit."""
import numpy as np

_MASK = np.uint64(0xFFFFFFFF)
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
DROPOUT_STREAM = 0x44524F50  # "DROP"


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorised over arrays of counters; returns the four output words (uint64 arrays)."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _MASK for c in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0) & _MASK, np.uint64(k1) & _MASK
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK)
        k0 = (k0 + _W0) & _MASK
        k1 = (k1 + _W1) & _MASK
    return c0, c1, c2, c3


def dropout_keep_mask(seed, rows, cols, p):
    """Keep mask (rows × cols) of the documented mapping: counter (col/4, row lo, row hi,
    "DROP"), key (seed lo, seed hi), word col%4, dropped when word < round(p·2^32)."""
    row = np.arange(rows, dtype=np.uint64)[:, None]
    group = (np.arange(cols, dtype=np.uint64) // np.uint64(4))[None, :]
    lane = np.arange(cols) % 4
    words = philox4x32_10(group + 0 * row, row & _MASK, row >> np.uint64(32), np.full((rows, cols), DROPOUT_STREAM),
                          seed & 0xFFFFFFFF, seed >> 32)
    word = np.choose(np.broadcast_to(lane, (rows, cols)), words)
    threshold = round(p * 2**32)
    return word >= threshold
