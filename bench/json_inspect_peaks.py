#!/usr/bin/env python3
# json_inspect_peaks.py — the worst-shaped JSON inputs of docs/errors.md written to a folder, and `moe inspect`'s time and peak RSS on each.
"""Usage: python3 bench/json_inspect_peaks.py [--moe build/moe] [--dir DIR]

Writes the four inputs of docs/errors.md's table (the shapes tests/model/test_json_memory.c
builds in memory) and runs `/usr/bin/time -f "%e s %M KB" MOE inspect PATH` on each, printing
seconds, the peak resident set size and moe's exit status. Pass an older build as --moe for a
"before" column. Standard library only; about 300 MB of disk while it runs."""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile

MAX_HEADER = 100_000_000  # MOE_ST_MAX_HEADER


def empty_objects(n):
    """'{},{},...' of at most n bytes."""
    return "{}" + ",{}" * ((n - 2) // 3)


def write_safetensors(path, header, data=0):
    raw = header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.write(b"\0" * data)


def cases(root):
    """(label, path given to moe inspect) for each input, written under root."""
    d = os.path.join(root, "header")
    os.makedirs(d)
    write_safetensors(os.path.join(d, "objects.safetensors"),
                      '{"a":[' + empty_objects(MAX_HEADER - 16) + "]}")
    yield "100 MB safetensors header of {}", os.path.join(d, "objects.safetensors")

    d = os.path.join(root, "index")
    os.makedirs(d)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write('{"metadata":{"ignored":[' + empty_objects(MAX_HEADER - 128) +
                ']},"weight_map":{"w":"model-00001-of-00001.safetensors"}}')
    yield "100 MB index, {} under an ignored key", d

    d = os.path.join(root, "config")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"model_type":"deepseek_v3","pad":[' + empty_objects((16 << 20) - 64) + "]}")
    write_safetensors(os.path.join(d, "model.safetensors"), "{}")  # inspect reads a folder's config
    yield "16 MiB config.json of {} (beside an empty model)", d

    d = os.path.join(root, "tensors")
    os.makedirs(d)
    n = 1_000_000
    header = "{" + ",".join('"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'
                            % (i, i, i + 1) for i in range(n)) + "}"
    write_safetensors(os.path.join(d, "tensors.safetensors"), header, n)
    yield "valid header of 1,000,000 one-byte tensors", os.path.join(d, "tensors.safetensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moe", default="build/moe")
    ap.add_argument("--dir", help="write the inputs here (kept); default a temporary folder")
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="moe-json-peaks-")
    try:
        print("%-50s %8s %12s %s" % ("input", "seconds", "peak RSS", "moe exit"))
        for label, path in cases(root):
            r = subprocess.run(["/usr/bin/time", "-f", "%e %M", a.moe, "inspect", path],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            secs, kb = r.stderr.strip().splitlines()[-1].split()
            print("%-50s %8s %9.1f MB %d" % (label, secs, int(kb) / 1024, r.returncode))
    finally:
        if not a.dir:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
