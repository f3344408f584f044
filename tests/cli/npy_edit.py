#!/usr/bin/env python3
# npy_edit.py — derived .npy inputs for test_run_inputs.sh: other dtypes, edited cells, columns.
"""Standard library only (ref_lib.py reads; this writes any descr the tests need). Commands:

  retype SRC DST DESCR [NUDGE]  SRC's values as DESCR: '<f4', '<f8', '<f2' (IEEE half,
                                rounded to nearest even by struct), '<i4', '<i8', or '<V2'
                                (bf16 bit patterns: what a bf16 array saved by NumPy holds).
                                NUDGE (f8 only) multiplies every value by 1 + NUDGE, so the
                                f64 values are not f32 values
  round SRC DST DESCR           DST = SRC's values rounded to DESCR ('<f2' or '<f8' with the
                                NUDGE of retype, given as '<f8:NUDGE') and back to f32
                                (struct rounds to nearest even): the f32 a reader of a DESCR
                                file must see
  set SRC DST ROW COL VALUE     a copy with [ROW][COL] = VALUE (an int, a float or nan)
  repeat SRC DST ROW COL FROM   a copy with [ROW][COL] = [ROW][FROM]
  cols SRC DST N                the first N columns of a 2-D array
  batch CMD ARGS ; CMD ARGS     several of the above in one process
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_lib import main, npy_read  # noqa: E402

FMT = {"<f4": "f", "<f8": "d", "<f2": "e", "<i4": "i", "<i8": "q"}


def write(path, descr, shape, values):
    shape_txt = "(%d,)" % shape[0] if len(shape) == 1 else "(" + ", ".join(map(str, shape)) + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    if descr == "<V2":  # bf16: the high half of each f32
        data = b"".join(struct.pack("<f", v)[2:] for v in values)
    else:
        if descr[1] == "i":  # a float array as integers: truncated, for dtype tests
            values = [int(v) for v in values]
        data = struct.pack("<%d%s" % (len(values), FMT[descr]), *values)
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        f.write(data)


def nudged(values, nudge):
    return [v * (1 + nudge) for v in values]


def retype(argv):
    src, dst, descr = argv[:3]
    _, shape, data = npy_read(src)
    values = list(data)
    if len(argv) > 3:
        values = nudged(values, float(argv[3]))
    write(dst, descr, shape, values)


def round_(argv):
    src, dst, spec = argv
    descr, _, nudge = spec.partition(":")
    _, shape, data = npy_read(src)
    values = nudged(list(data), float(nudge)) if nudge else list(data)
    f = FMT[descr]
    out = [struct.unpack("<" + f, struct.pack("<" + f, v))[0] for v in values]
    write(dst, "<f4", shape, out)  # struct's "f" rounds the f64 to nearest even


def edit(src, dst, row, col, value_of):
    descr, shape, data = npy_read(src)
    values = list(data)
    values[row * shape[1] + col] = value_of(values, shape)
    write(dst, descr, shape, values)


def set_(argv):
    src, dst, row, col, text = argv
    value = float(text) if any(c in text for c in ".en") else int(text)
    edit(src, dst, int(row), int(col), lambda v, s: value)


def repeat(argv):
    src, dst, row, col, frm = argv
    edit(src, dst, int(row), int(col), lambda v, s: v[int(row) * s[1] + int(frm)])


def cols(argv):
    src, dst, n = argv
    descr, shape, data = npy_read(src)
    n = int(n)
    values = [data[r * shape[1] + c] for r in range(shape[0]) for c in range(n)]
    write(dst, descr, (shape[0], n), values)


if __name__ == "__main__":
    main({"retype": retype, "round": round_, "set": set_, "repeat": repeat, "cols": cols},
         __doc__)
