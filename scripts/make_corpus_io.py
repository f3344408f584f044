#!/usr/bin/env python3
# make_corpus_io.py — writes the I/O test corpus (safetensors, index folders, .npy) and its manifest.
"""Generates tests/data/corpus/{safetensors,index,npy}/ and tests/data/corpus/io_manifest.tsv.

Each malformed file has exactly one defect; the manifest line says which status the reader must
return and a piece of text its message must contain. Valid edge cases are listed with MOE_OK and
their contents are checked by the C tests (tests/io/). Python 3 standard library only; the output
is deterministic, and the generated files are committed next to this script.

Usage: scripts/make_corpus_io.py [REPO_ROOT]
"""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "tests", "data")
CORPUS = os.path.join(DATA, "corpus")

manifest = []


class Raw(str):
    """JSON text inserted as it is (for values json.dumps cannot produce)."""


def js(v):
    """Compact JSON text of V, with Raw values (also nested) kept as they are."""
    if isinstance(v, Raw):
        return v
    if isinstance(v, dict):
        return "{" + ",".join(js(k) + ":" + js(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(js(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def obj(*items):
    """A JSON object from (key, value) pairs, duplicates allowed, as UTF-8 bytes."""
    return ("{" + ",".join(js(k) + ":" + js(v) for k, v in items) + "}").encode()


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def st(header, data=b"", length=None):
    """A safetensors image: the little-endian u64 length (the header's own unless given)."""
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def write(rel, content):
    path = os.path.join(CORPUS, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)


def case(rel, status, needle, content=None):
    if content is not None:
        write(rel, content)
    assert "\t" not in needle and "\n" not in needle
    manifest.append((os.path.join("corpus", rel), status, needle))


F32x4 = struct.pack("<4f", 1.0, -2.0, 0.5, 8.0)


def safetensors_cases():
    d = "safetensors/"
    one = lambda **kw: obj(("w", dict(tensor("F32", [4], 0, 16), **kw)))

    # The length prefix and the size of the file.
    case(d + "empty.safetensors", "MOE_ETRUNCATED", "file is 0 bytes", b"")
    case(d + "short.safetensors", "MOE_ETRUNCATED", "shorter than the 8-byte header length", b"\x05\x00\x00")
    case(d + "header_too_large.safetensors", "MOE_EHEADER", "header length 100000001 exceeds the limit",
         st(b"{}", length=100000001))
    case(d + "header_length_max.safetensors", "MOE_EHEADER", "header length 18446744073709551615",
         st(b"{}", length=2**64 - 1))
    case(d + "header_past_eof.safetensors", "MOE_ETRUNCATED", "header length 1000 runs past the end",
         st(b'{"a":1}', length=1000))

    # The JSON text itself.
    case(d + "not_json.safetensors", "MOE_EJSON", "is not valid JSON", st(b"hello, world"))
    case(d + "empty_header.safetensors", "MOE_EJSON", "is not valid JSON", st(b""))
    case(d + "json_array.safetensors", "MOE_EJSON", "header is an array, not a JSON object", st(b"[1, 2]"))
    case(d + "json_trailing_garbage.safetensors", "MOE_EJSON", "end of file expected",
         st(obj(("w", tensor("F32", [4], 0, 16))) + b" x", F32x4))
    case(d + "nul_padding.safetensors", "MOE_EJSON", "is not valid JSON",
         st(obj(("w", tensor("F32", [4], 0, 16))) + b"\0\0\0", F32x4))
    case(d + "not_utf8.safetensors", "MOE_EJSON", "not valid UTF-8",
         st(b'{"w\xff":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', F32x4))
    case(d + "duplicate_tensor.safetensors", "MOE_EDUPLICATE", 'duplicate key "w"',
         st(obj(("w", tensor("F32", [4], 0, 16)), ("w", tensor("F32", [4], 16, 32))), F32x4 + F32x4))
    case(d + "duplicate_field.safetensors", "MOE_EDUPLICATE", 'duplicate key "dtype"',
         st(obj(("w", Raw('{"dtype":"F32","dtype":"I32","shape":[4],"data_offsets":[0,16]}'))), F32x4))

    # Tensor entries.
    case(d + "entry_not_object.safetensors", "MOE_EJSON", "tensor 'w': entry is an array, not an object",
         st(obj(("w", [0, 16])), F32x4))
    case(d + "unknown_field.safetensors", "MOE_EHEADER", "tensor 'w': unknown field 'strides'",
         st(one(strides=[1]), F32x4))
    case(d + "empty_name.safetensors", "MOE_EHEADER", "a tensor has an empty name",
         st(obj(("", tensor("F32", [4], 0, 16))), F32x4))
    case(d + "unknown_dtype.safetensors", "MOE_EDTYPE", "tensor 'w': unknown dtype 'F7'",
         st(one(dtype="F7"), F32x4))
    case(d + "lowercase_dtype.safetensors", "MOE_EDTYPE", "unknown dtype 'f32'", st(one(dtype="f32"), F32x4))
    case(d + "dtype_not_string.safetensors", "MOE_EJSON", "tensor 'w': dtype is an integer, not a string",
         st(one(dtype=32), F32x4))
    for field in ("dtype", "shape", "data_offsets"):
        e = tensor("F32", [4], 0, 16)
        del e[field]
        case(d + "missing_%s.safetensors" % field, "MOE_EMISSING", "tensor 'w': missing field '%s'" % field,
             st(obj(("w", e)), F32x4))
    case(d + "shape_not_array.safetensors", "MOE_EJSON", "shape is an integer, not an array",
         st(one(shape=4), F32x4))
    case(d + "negative_shape.safetensors", "MOE_ESHAPE", "shape[0] = -1 is negative",
         st(one(shape=[-1, 4]), F32x4))
    case(d + "float_shape.safetensors", "MOE_EJSON", "shape[0] is a real number, not an integer",
         st(one(shape=Raw("[4.0]")), F32x4))
    case(d + "exponent_shape.safetensors", "MOE_EJSON", "shape[0] is a real number",
         st(one(shape=Raw("[4e0]")), F32x4))
    case(d + "shape_entry_too_large.safetensors", "MOE_EOVERFLOW",
         "shape[1] = 9223372036854775807 exceeds the format's limit 2^48-1",
         st(one(shape=[2, 2**63 - 1]), F32x4))
    case(d + "shape_entry_beyond_int64.safetensors", "MOE_EOVERFLOW", "integer out of range",
         st(one(shape=[2, 2**64]), F32x4))
    case(d + "shape_product_overflow.safetensors", "MOE_EOVERFLOW", "overflows 64 bits",
         st(one(shape=[2**40, 2**40, 2**40]), F32x4))
    # 2^62 elements fit in 64 bits; their 2^68 bits do not.
    case(d + "size_overflow.safetensors", "MOE_EOVERFLOW", "overflow 64 bits of size",
         st(one(dtype="F64", shape=[2**31, 2**31]), F32x4))
    case(d + "rank_too_large.safetensors", "MOE_EUNSUPPORTED", "rank 9 exceeds",
         st(one(shape=[1] * 8 + [4]), F32x4))
    case(d + "byte_length_mismatch.safetensors", "MOE_ESHAPE", "shape [3] of F32 needs 12 bytes",
         st(one(shape=[3]), F32x4))
    case(d + "f4_half_byte.safetensors", "MOE_ESHAPE", "3 elements of 4-bit F4 do not fill whole bytes",
         st(obj(("q", tensor("F4", [3], 0, 2))), b"\x12\x34"))

    # Offsets.
    case(d + "offsets_not_array.safetensors", "MOE_EJSON", "data_offsets is a string, not an array",
         st(one(data_offsets="0-16"), F32x4))
    case(d + "offsets_three.safetensors", "MOE_EOFFSET", "data_offsets has 3 entries, not 2",
         st(one(data_offsets=[0, 8, 16]), F32x4))
    case(d + "offsets_float.safetensors", "MOE_EJSON", "data_offsets[1] is a real number",
         st(one(data_offsets=Raw("[0,16.0]")), F32x4))
    case(d + "offsets_negative.safetensors", "MOE_EOFFSET", "data_offsets[0] = -16 is negative",
         st(one(data_offsets=[-16, 0]), F32x4))
    case(d + "offsets_over_2_48.safetensors", "MOE_EOVERFLOW", "data_offsets[1] = 281474976710656 exceeds",
         st(one(shape=[2**46], data_offsets=[0, 2**48]), F32x4))
    case(d + "end_before_begin.safetensors", "MOE_EOFFSET", "data_offsets [16, 0] end before they begin",
         st(one(data_offsets=[16, 0]), F32x4))
    case(d + "first_not_zero.safetensors", "MOE_EOFFSET", "starts at byte 4, not 0",
         st(obj(("w", tensor("F32", [3], 4, 16))), F32x4))
    case(d + "offsets_hole.safetensors", "MOE_EOFFSET", "hole of 4 bytes between 'a' (ends at 8) and 'b'",
         st(obj(("a", tensor("F32", [2], 0, 8)), ("b", tensor("F32", [1], 12, 16))), F32x4))
    case(d + "offsets_overlap.safetensors", "MOE_EOFFSET", "tensor 'b': [4, 12) overlaps 'a' [0, 8)",
         st(obj(("b", tensor("F32", [2], 4, 12)), ("a", tensor("F32", [2], 0, 8))), F32x4))
    # Several names over the same bytes: the memory-amplification attack.
    case(d + "offsets_aliased.safetensors", "MOE_EOFFSET", "overlaps",
         st(obj(*[("t%d" % i, tensor("F32", [4], 0, 16)) for i in range(4)]), F32x4))
    case(d + "trailing_bytes.safetensors", "MOE_EOFFSET", "5 trailing bytes after the last tensor 'w'",
         st(obj(("w", tensor("F32", [4], 0, 16))), F32x4 + b"extra"))
    case(d + "trailing_bytes_no_tensors.safetensors", "MOE_EOFFSET", "3 trailing bytes after a header that lists no tensors",
         st(b"{}", b"abc"))
    case(d + "truncated_data.safetensors", "MOE_ETRUNCATED",
         "tensor 'w' ends at byte 16 of the data area, but the file holds only 10 data bytes",
         st(obj(("w", tensor("F32", [4], 0, 16))), F32x4[:10]))

    # __metadata__.
    case(d + "metadata_not_object.safetensors", "MOE_EJSON", "'__metadata__' is a string, not an object",
         st(obj(("__metadata__", "pt"), ("w", tensor("F32", [4], 0, 16))), F32x4))
    case(d + "metadata_non_string.safetensors", "MOE_EJSON", "__metadata__ value of 'version' is an integer",
         st(obj(("__metadata__", {"format": "pt", "version": 2}), ("w", tensor("F32", [4], 0, 16))), F32x4))
    case(d + "tensor_named_metadata.safetensors", "MOE_EHEADER", "may not be named '__metadata__'",
         st(obj(("__metadata__", tensor("F32", [4], 0, 16))), F32x4))
    case(d + "metadata_duplicate.safetensors", "MOE_EDUPLICATE", 'duplicate key "__metadata__"',
         st(obj(("__metadata__", {}), ("w", tensor("F32", [4], 0, 16)), ("__metadata__", {})), F32x4))

    # Valid edge cases (their contents are checked in tests/io/test_safetensors.c).
    # Tensors out of offset order in the JSON, metadata, non-ASCII text.
    basic = obj(("z_bias", tensor("I32", [3], 24, 36)), ("__metadata__", {"format": "pt", "note": "ünïcode ✓"}),
                ("a_weight", tensor("F32", [2, 3], 0, 24)))
    case(d + "valid_basic.safetensors", "MOE_OK", "",
         st(basic, struct.pack("<6f", 1.5, -2.0, 0.25, 3.0, -0.5, 100.0) + struct.pack("<3i", 7, -8, 2**31 - 1)))
    case(d + "valid_zero_size.safetensors", "MOE_OK", "",
         st(obj(("x", tensor("U8", [3], 0, 3)), ("empty", tensor("F32", [0, 4], 0, 0)),
                ("empty2", tensor("F16", [5, 0], 3, 3))), b"\x01\x02\x03"))
    case(d + "valid_scalar.safetensors", "MOE_OK", "",
         st(obj(("s", tensor("F64", [], 0, 8)), ("t", tensor("I8", [], 8, 9))),
            struct.pack("<d", 3.25) + struct.pack("<b", -5)))
    padded = b"\n\t \r" + obj(("w", tensor("F32", [4], 0, 16))) + b" \t\r\n" + b" " * 9
    case(d + "valid_whitespace.safetensors", "MOE_OK", "", st(padded, F32x4))
    case(d + "valid_empty_metadata.safetensors", "MOE_OK", "",
         st(obj(("__metadata__", {}), ("w", tensor("F32", [4], 0, 16))), F32x4))
    case(d + "valid_no_tensors.safetensors", "MOE_OK", "", st(b"{}"))
    # One tensor of every dtype libmoe knows, in JSON order; F4 [2] is one byte.
    dtypes = [("BOOL", 1), ("U8", 1), ("I8", 1), ("I16", 2), ("U16", 2), ("I32", 4), ("U32", 4), ("I64", 8),
              ("U64", 8), ("F16", 2), ("BF16", 2), ("F32", 4), ("F64", 8), ("F8_E4M3", 1), ("F8_E5M2", 1),
              ("F8_E8M0", 1), ("F4", 0)]
    items, off = [], 0
    for name, size in dtypes:
        n = size * 2 if size else 1
        items.append(("t_" + name, tensor(name, [2], off, off + n)))
        off += n
    case(d + "valid_all_dtypes.safetensors", "MOE_OK", "", st(obj(*items), bytes(range(off))))


def index_cases():
    A = struct.pack("<2f", 1.0, 2.0)
    B = struct.pack("<3f", 3.0, 4.0, 5.0)

    def shard(*names):
        """A valid shard holding F32 tensors: NAME -> values."""
        items, data = [], b""
        for name in names:
            v = A if name < "c" else B
            items.append((name, tensor("F32", [len(v) // 4], len(data), len(data) + len(v))))
            data += v
        return st(obj(*items), data)

    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"

    def folder(name, index, shards, status, needle):
        base = "index/" + name + "/"
        if index is not None:
            write(base + "model.safetensors.index.json", index if isinstance(index, bytes) else
                  json.dumps(index, indent=2).encode())
        for fname, content in shards.items():
            write(base + fname, content)
        case("index/" + name, status, needle)

    good = {s1: shard("a", "b"), s2: shard("c")}
    wm = {"a": s1, "b": s1, "c": s2}
    meta = {"total_size": 20}

    folder("valid_two_shards", {"metadata": meta, "weight_map": wm}, good, "MOE_OK", "")
    folder("valid_single_file", None, {"model.safetensors": shard("a", "c")}, "MOE_OK", "")
    folder("valid_no_metadata", {"weight_map": {"a": s1, "b": s1}}, {s1: shard("a", "b")}, "MOE_OK", "")

    def bad_name(case_name, shard_name, needle):
        folder(case_name, {"metadata": meta, "weight_map": dict(wm, c=shard_name)}, good, "MOE_EPATH", needle)

    bad_name("shard_slash", "sub/" + s2, "shard name 'sub/%s' contains a path separator" % s2)
    bad_name("shard_dotdot", "../" + s2, "contains '..'")
    bad_name("shard_absolute", "/tmp/" + s2, "is an absolute path")
    bad_name("shard_backslash", "sub\\" + s2, "contains a path separator")
    bad_name("shard_drive_letter", "C:" + s2, "is an absolute path or has a drive letter")
    bad_name("shard_empty_name", "", "shard name '' is empty")
    bad_name("shard_hidden", "." + s2, "starts with '.'")
    bad_name("shard_not_safetensors", "model-00002-of-00002.bin", "does not end in '.safetensors'")
    bad_name("shard_control_char", "model\n.safetensors", "contains a control character")

    folder("shard_missing", {"metadata": meta, "weight_map": wm}, {s1: shard("a", "b")}, "MOE_EMISSING",
           "shard '%s': " % s2)
    folder("tensor_not_in_shard", {"weight_map": dict(wm, d=s2)}, good, "MOE_EMISSING",
           "tensor 'd' is mapped to shard '%s', which does not contain it" % s2)
    folder("tensor_in_other_shard", {"weight_map": dict(wm, b=s2)}, good, "MOE_EMISSING",
           "tensor 'b' is mapped to shard '%s', which does not contain it (it is in '%s')" % (s2, s1))
    folder("tensor_not_in_map", {"weight_map": wm}, {s1: shard("a", "b"), s2: shard("c", "d")}, "MOE_EMISSING",
           "tensor 'd' in shard '%s' is not listed in weight_map" % s2)
    folder("tensor_in_two_shards", {"weight_map": wm}, {s1: shard("a", "b"), s2: shard("b", "c")},
           "MOE_EDUPLICATE", "tensor 'b' is in both '%s' and '%s'" % (s1, s2))
    folder("weight_map_not_object", {"metadata": meta, "weight_map": [["a", s1]]}, good, "MOE_EJSON",
           "'weight_map' is an array, not an object")
    folder("weight_map_missing", {"metadata": meta}, good, "MOE_EMISSING", "missing field 'weight_map'")
    folder("weight_map_empty", {"metadata": meta, "weight_map": {}}, good, "MOE_EMISSING", "'weight_map' is empty")
    folder("shard_not_string", {"weight_map": dict(wm, c=2)}, good, "MOE_EJSON",
           "weight_map['c'] is an integer, not a shard file name")
    folder("metadata_not_object", {"metadata": 20, "weight_map": wm}, good, "MOE_EJSON",
           "'metadata' is an integer, not an object")
    folder("index_not_json", b'{"weight_map": {"a": "x.safetensors",}}', good, "MOE_EJSON", "is not valid JSON")
    folder("index_array", b'["a", "b"]', good, "MOE_EJSON", "the index is an array, not a JSON object")
    folder("index_duplicate_key",
           ('{"weight_map": {"a": "%s", "b": "%s", "a": "%s", "c": "%s"}}' % (s1, s1, s1, s2)).encode(), good,
           "MOE_EDUPLICATE", 'duplicate key "a"')
    truncated = shard("c")[:-3]
    folder("shard_truncated", {"weight_map": wm}, {s1: shard("a", "b"), s2: truncated}, "MOE_ETRUNCATED",
           "shard '%s': " % s2)
    folder("shard_invalid", {"weight_map": wm},
           {s1: shard("a", "b"), s2: st(obj(("c", tensor("F33", [3], 0, 12))), B)}, "MOE_EDTYPE",
           "unknown dtype 'F33'")
    folder("no_weights", None, {"config.json": b"{}\n"}, "MOE_EMISSING",
           "has neither model.safetensors.index.json nor model.safetensors")


def npy_bytes(header, data=b"", version=(1, 0), length=None, pad=True):
    """An .npy image around the dict text HEADER (padded like numpy unless pad is False)."""
    h = header.encode() if isinstance(header, str) else header
    pre = 10 if version[0] == 1 else 12
    if pad:
        total = -(-(pre + len(h) + 1) // 64) * 64
        h = h + b" " * (total - pre - len(h) - 1) + b"\n"
    n = len(h) if length is None else length
    lenfield = struct.pack("<H", n) if version[0] == 1 else struct.pack("<I", n)
    return b"\x93NUMPY" + bytes(version) + lenfield + h + data


def npy_dict(descr="<f4", fortran="False", shape="(3,)"):
    return "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


def npy_cases():
    d = "npy/"
    f3 = struct.pack("<3f", 1.0, 2.0, 3.0)
    case(d + "bad_magic.npy", "MOE_EHEADER", "not a .npy file (bad magic)", b"\x93NUMPX\x01\x00" + b"\0" * 64)
    case(d + "short.npy", "MOE_ETRUNCATED", "shorter than the .npy prefix", b"\x93NUMPY\x01")
    case(d + "version_4.npy", "MOE_EHEADER", "unsupported .npy version 4.0", npy_bytes(npy_dict(), f3, (4, 0)))
    case(d + "version_1_1.npy", "MOE_EHEADER", "unsupported .npy version 1.1", npy_bytes(npy_dict(), f3, (1, 1)))
    case(d + "header_past_eof.npy", "MOE_ETRUNCATED", "header length 4000 runs past the end",
         npy_bytes(npy_dict(), f3, length=4000))
    case(d + "header_too_large.npy", "MOE_EHEADER", "header length 4294967295 exceeds the limit",
         npy_bytes(npy_dict(), f3, (2, 0), length=2**32 - 1))
    case(d + "descr_big_endian.npy", "MOE_EDTYPE", "descr '>f4' is not supported", npy_bytes(npy_dict(">f4"), f3))
    case(d + "descr_u2.npy", "MOE_EDTYPE", "descr '<u2' is not supported", npy_bytes(npy_dict("<u2"), f3))
    case(d + "descr_structured.npy", "MOE_EDTYPE", "structured descr is not supported",
         npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", f3))
    case(d + "fortran_order.npy", "MOE_EUNSUPPORTED", "fortran_order is True",
         npy_bytes(npy_dict(fortran="True", shape="(3, 1)"), f3))
    case(d + "truncated_data.npy", "MOE_ETRUNCATED", "the array needs 12 data bytes, the file holds 8",
         npy_bytes(npy_dict(), f3[:8]))
    case(d + "trailing_bytes.npy", "MOE_EOFFSET", "4 trailing bytes after the array data",
         npy_bytes(npy_dict(), f3 + b"junk"))
    case(d + "shape_negative.npy", "MOE_ESHAPE", "shape[0] is negative", npy_bytes(npy_dict(shape="(-3,)"), f3))
    case(d + "shape_not_tuple.npy", "MOE_EHEADER", "a trailing ',' in the 1-element shape tuple",
         npy_bytes(npy_dict(shape="(3)"), f3))
    case(d + "shape_list.npy", "MOE_EHEADER", "'(' starting the shape tuple", npy_bytes(npy_dict(shape="[3]"), f3))
    case(d + "shape_too_many_dims.npy", "MOE_EUNSUPPORTED", "more than 8 dimensions",
         npy_bytes(npy_dict(shape="(" + "1, " * 8 + "3)"), f3))
    case(d + "shape_overflow.npy", "MOE_EOVERFLOW", "shape[1] = 4294967296 makes the element count overflow",
         npy_bytes(npy_dict(shape="(4294967296, 4294967296, 4294967296)"), f3))
    case(d + "bytes_overflow.npy", "MOE_EOVERFLOW", "the byte size of the array overflows",
         npy_bytes(npy_dict(shape="(4611686018427387904,)"), f3))
    case(d + "dim_too_large.npy", "MOE_EOVERFLOW", "shape[0] does not fit in 63 bits",
         npy_bytes(npy_dict(shape="(99999999999999999999,)"), f3))
    case(d + "missing_shape.npy", "MOE_EMISSING", "header has no 'shape'",
         npy_bytes("{'descr': '<f4', 'fortran_order': False, }", f3))
    case(d + "unknown_key.npy", "MOE_EHEADER", "unknown header key 'strides'",
         npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'strides': (4,), }", f3))
    case(d + "duplicate_key.npy", "MOE_EDUPLICATE", "header key 'descr' appears twice",
         npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f3))
    case(d + "not_a_dict.npy", "MOE_EHEADER", "expected '{'", npy_bytes("[1, 2, 3]", f3))
    case(d + "trailing_text.npy", "MOE_EHEADER", "expected the end of the header",
         npy_bytes(npy_dict() + " extra", f3))
    case(d + "unterminated_string.npy", "MOE_EHEADER", "expected a closing quote",
         npy_bytes("{'descr': '<f4", f3, pad=False))

    # Valid variants the C test reads back: [1, 2, 3] as f32 unless stated.
    case(d + "valid_v1.npy", "MOE_OK", "", npy_bytes(npy_dict(), f3))
    case(d + "valid_v2.npy", "MOE_OK", "", npy_bytes(npy_dict(), f3, (2, 0)))
    case(d + "valid_v3.npy", "MOE_OK", "", npy_bytes(npy_dict(), f3, (3, 0)))
    case(d + "valid_python2_long.npy", "MOE_OK", "", npy_bytes(npy_dict(shape="(3L,)"), f3))
    case(d + "valid_double_quotes.npy", "MOE_OK", "",
         npy_bytes('{"shape":(3,),"descr":"<f4","fortran_order":False}', f3, pad=False))
    case(d + "valid_i64_2d.npy", "MOE_OK", "",
         npy_bytes(npy_dict("<i8", shape="(2, 2)"), struct.pack("<4q", -1, 2**40, 0, 7)))
    case(d + "valid_scalar_i32.npy", "MOE_OK", "", npy_bytes(npy_dict("<i4", shape="()"), struct.pack("<i", -42)))
    case(d + "valid_empty.npy", "MOE_OK", "", npy_bytes(npy_dict(shape="(0, 5)")))


def main():
    for sub in ("safetensors", "index", "npy"):
        shutil.rmtree(os.path.join(CORPUS, sub), ignore_errors=True)
    safetensors_cases()
    index_cases()
    npy_cases()
    names = [m[0] for m in manifest]
    assert len(names) == len(set(names)), "duplicate case names"
    with open(os.path.join(CORPUS, "io_manifest.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write("# io_manifest.tsv — written by scripts/make_corpus_io.py; do not edit.\n")
        f.write("# path (relative to tests/data)\texpected status\ta substring of the message\n")
        for path, status, needle in manifest:
            f.write("%s\t%s\t%s\n" % (path, status, needle))
    print("%d cases written to %s" % (len(manifest), os.path.relpath(CORPUS, ROOT)))


if __name__ == "__main__":
    main()
