# ref_lib.py — what route_ref.py and run_ref.py share: .npy and safetensors I/O, the command line.
"""Standard library only, like the scripts that import it."""
import array
import ast
import glob
import json
import os
import struct
import sys

DESCR = {"f32": "<f4", "i32": "<i4", "i64": "<i8"}
CODES = {"<f4": "f", "<i4": "i", "<i8": "q"}


# ---- .npy ---------------------------------------------------------------------------------


def npy_write(path, descr, shape, values):
    if len(shape) == 1:
        shape_txt = "(%d,)" % shape[0]
    else:
        shape_txt = "(" + ", ".join("%d" % d for d in shape) + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    data = array.array(CODES[descr], values)
    assert data.itemsize * 8 in (32, 64) and sys.byteorder == "little"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1"))
        f.write(data.tobytes())


def npy_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        raise SystemExit("%s: not a .npy file" % path)
    major = raw[6]
    if major == 1:
        hlen, off = int.from_bytes(raw[8:10], "little"), 10
    else:
        hlen, off = int.from_bytes(raw[8:12], "little"), 12
    header = ast.literal_eval(raw[off:off + hlen].decode("latin1"))
    descr, shape = header["descr"], tuple(header["shape"])
    if header["fortran_order"] or descr not in CODES:
        raise SystemExit("%s: unexpected header %r" % (path, header))
    data = array.array(CODES[descr])
    data.frombytes(raw[off + hlen:])
    count = 1
    for d in shape:
        count *= d
    if len(data) != count:
        raise SystemExit("%s: %d elements for shape %r" % (path, len(data), shape))
    return descr, shape, data


# ---- safetensors --------------------------------------------------------------------------


def st_tensors(d):
    """name -> (dtype, shape, bytes) over every .safetensors file of folder D."""
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(f, "rb") as fh:
            raw = fh.read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        for name, t in hdr.items():
            if name != "__metadata__":
                b, e = t["data_offsets"]
                out[name] = (t["dtype"], t["shape"], raw[8 + n + b:8 + n + e])
    return out


# ---- The command line ---------------------------------------------------------------------


def main(cmds, doc):
    """Run the command sys.argv[1] of CMDS on the arguments after it, or "batch": several
    commands in one process, separated by ";" arguments. Anything else: DOC, exit 1."""

    def batch(argv):
        cmd = []
        for a in argv + [";"]:
            if a != ";":
                cmd.append(a)
            elif cmd:
                cmds[cmd[0]](cmd[1:])
                cmd = []

    cmds = dict(cmds, batch=batch)
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        raise SystemExit(doc)
    cmds[sys.argv[1]](sys.argv[2:])
