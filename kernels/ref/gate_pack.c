/* gate_pack.c — the router gate's packed layouts: bytes, pack (with the finiteness check), unpack.
 */
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "kernels/gate.h"

/*
 * kernels/gate.h draws the layouts; moe_gate_packed_index is their one definition, used here
 * and by the reference kernels (the SIMD kernels walk the same bytes with their own pointer
 * arithmetic, so a disagreement shows up in the kernel tests). Packing copies the checkpoint's
 * element bits unchanged (the source may be unaligned: memcpy per element) and zero-fills the
 * padding; it runs once, at creation.
 */

typedef struct layout {
    size_t size;       /* bytes per element */
    bool pairs;        /* the bf16 layout */
    uint32_t exp_mask; /* the exponent field: all ones = Inf or NaN */
    uint32_t man_mask; /* the mantissa field: nonzero under an all-ones exponent = NaN */
} layout;

static const layout f32_layout = {4, false, 0x7F800000u, 0x007FFFFFu};
static const layout bf16_layout = {2, true, 0x7F80u, 0x007Fu};
static const layout f16_layout = {2, false, 0x7C00u, 0x03FFu};

static moe_status bytes_any(const layout *l, int64_t rows, int64_t cols, size_t *out)
{
    if (rows < 1 || cols < 1)
        return moe_error(MOE_EINVAL, "router gate packing: shape [%lld, %lld] has an empty side",
                         (long long)rows, (long long)cols);
    uint64_t padded_rows = ((uint64_t)rows + MOE_GATE_NR - 1) / MOE_GATE_NR * MOE_GATE_NR;
    uint64_t padded_cols = l->pairs ? ((uint64_t)cols + 1) / 2 * 2 : (uint64_t)cols;
    uint64_t elems, bytes;
    if (moe_mul_overflow_u64(padded_rows, padded_cols, &elems) ||
        moe_mul_overflow_u64(elems, l->size, &bytes) || bytes > SIZE_MAX)
        return moe_error(MOE_EOVERFLOW, "router gate packing: shape [%lld, %lld] is too large",
                         (long long)rows, (long long)cols);
    *out = (size_t)bytes;
    return MOE_OK;
}

static uint32_t element_bits(const uint8_t *p, size_t size)
{
    if (size == 4) {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    uint16_t c;
    memcpy(&c, p, 2);
    return c;
}

static moe_status pack_any(const layout *l, const void *src, int64_t rows, int64_t cols, void *dst)
{
    size_t bytes = 0;
    moe_status st = bytes_any(l, rows, cols, &bytes);
    if (st != MOE_OK) return st;
    size_t n = (size_t)rows, k = (size_t)cols;
    const uint8_t *s = src;
    uint8_t *d = dst;
    memset(d, 0, bytes);
    for (size_t e = 0; e < n; e++) {
        for (size_t h = 0; h < k; h++) {
            const uint8_t *from = s + (e * k + h) * l->size;
            uint32_t bits = element_bits(from, l->size);
            if ((bits & l->exp_mask) == l->exp_mask)
                return moe_error(MOE_EVALUE,
                                 "router gate weight [%zu, %zu] is %s (bits 0x%0*x); every "
                                 "router weight must be finite",
                                 e, h, (bits & l->man_mask) ? "NaN" : "Inf", (int)(2 * l->size),
                                 bits);
            memcpy(d + moe_gate_packed_index(n, k, l->pairs, e, h) * l->size, from, l->size);
        }
    }
    return MOE_OK;
}

static void unpack_any(const layout *l, const void *packed, int64_t rows, int64_t cols, void *dst)
{
    size_t n = (size_t)rows, k = (size_t)cols;
    const uint8_t *p = packed;
    uint8_t *d = dst;
    for (size_t e = 0; e < n; e++)
        for (size_t h = 0; h < k; h++)
            memcpy(d + (e * k + h) * l->size,
                   p + moe_gate_packed_index(n, k, l->pairs, e, h) * l->size, l->size);
}

static moe_status bytes_f32(int64_t rows, int64_t cols, size_t *out)
{
    return bytes_any(&f32_layout, rows, cols, out);
}
static moe_status bytes_bf16(int64_t rows, int64_t cols, size_t *out)
{
    return bytes_any(&bf16_layout, rows, cols, out);
}
static moe_status bytes_f16(int64_t rows, int64_t cols, size_t *out)
{
    return bytes_any(&f16_layout, rows, cols, out);
}

static moe_status pack_f32(const void *src, int64_t rows, int64_t cols, void *dst)
{
    return pack_any(&f32_layout, src, rows, cols, dst);
}
static moe_status pack_bf16(const void *src, int64_t rows, int64_t cols, void *dst)
{
    return pack_any(&bf16_layout, src, rows, cols, dst);
}
static moe_status pack_f16(const void *src, int64_t rows, int64_t cols, void *dst)
{
    return pack_any(&f16_layout, src, rows, cols, dst);
}

static void unpack_f32(const void *packed, int64_t rows, int64_t cols, void *dst)
{
    unpack_any(&f32_layout, packed, rows, cols, dst);
}
static void unpack_bf16(const void *packed, int64_t rows, int64_t cols, void *dst)
{
    unpack_any(&bf16_layout, packed, rows, cols, dst);
}
static void unpack_f16(const void *packed, int64_t rows, int64_t cols, void *dst)
{
    unpack_any(&f16_layout, packed, rows, cols, dst);
}

const moe_packing moe_gate_packing_f32 = {"f32, 16-expert tiles x 256-h chunks", MOE_DTYPE_F32,
                                          bytes_f32, pack_f32, unpack_f32};
const moe_packing moe_gate_packing_bf16 = {"bf16, 16-expert tiles x 256-h chunks, h pairs",
                                           MOE_DTYPE_BF16, bytes_bf16, pack_bf16, unpack_bf16};
const moe_packing moe_gate_packing_f16 = {"f16, 16-expert tiles x 256-h chunks", MOE_DTYPE_F16,
                                          bytes_f16, pack_f16, unpack_f16};
