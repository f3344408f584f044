/* test_dtype_decode.c — every code of every 4-, 8- and 16-bit format vs ldexp of its fields. */
#include "test_dtype_formats.h"

/* Bit-exact equality of a decoded f32 and a double reference: NaN matches NaN (with its
 * sign), zeros must agree in sign. */
static int same_value(float got, double want)
{
    if (isnan(want)) return isnan(got) && (signbit(got) != 0) == (signbit(want) != 0);
    return (double)got == want && (signbit(got) != 0) == (signbit(want) != 0);
}

static void test_every_code(const fmt_desc *f)
{
    for (unsigned c = 0; c < f->ncodes; c++) {
        float got = f->decode(c);
        double want = f->ref(c);
        CHECKF(same_value(got, want), "%s code 0x%X: got %a, want %a", f->name, c, (double)got,
               want);
    }
}

/* The 4-bit decoders read the low nibble only, so a caller can pass a whole packed byte. */
static void test_nibble_decoders_ignore_high_bits(void)
{
    for (unsigned c = 0; c < 256; c++) {
        float e2m1 = moe_e2m1_to_f32((uint8_t)c), e2m1_low = moe_e2m1_to_f32((uint8_t)(c & 0xF));
        CHECKF(bits_of(e2m1) == bits_of(e2m1_low), "e2m1 byte 0x%02X", c);
        CHECKF(moe_int4_to_i8((uint8_t)c) == moe_int4_to_i8((uint8_t)(c & 0xF)), "int4 0x%02X", c);
        CHECKF(moe_uint4_to_i8((uint8_t)c) == moe_uint4_to_i8((uint8_t)(c & 0xF)), "uint4 0x%02X",
               c);
    }
}

/* A few values written out by hand from formats.md, so a wrong formula in the reference
 * itself would also be caught. */
static void test_known_values(void)
{
    static const float e2m1[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                   -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; c++)
        CHECKF(bits_of(moe_e2m1_to_f32((uint8_t)c)) == bits_of(e2m1[c]), "e2m1 0x%X", c);

    CHECK(moe_e4m3_to_f32(0x7E) == 448.0f);
    CHECK(moe_e4m3_to_f32(0xFE) == -448.0f);
    CHECK(moe_e4m3_to_f32(0x01) == 0x1p-9f);
    CHECK(moe_e4m3_to_f32(0x08) == 0x1p-6f);
    CHECK(moe_e4m3_to_f32(0x38) == 1.0f);
    CHECK(isnan(moe_e4m3_to_f32(0x7F)) && isnan(moe_e4m3_to_f32(0xFF)));
    CHECK(moe_e4m3_to_f32(0x78) == 256.0f); /* exponent 15 is a normal binade in "fn" */

    CHECK(moe_e5m2_to_f32(0x7B) == 57344.0f);
    CHECK(moe_e5m2_to_f32(0x01) == 0x1p-16f);
    CHECK(moe_e5m2_to_f32(0x7C) == INFINITY && moe_e5m2_to_f32(0xFC) == -INFINITY);
    CHECK(isnan(moe_e5m2_to_f32(0x7D)) && isnan(moe_e5m2_to_f32(0x7E)) &&
          isnan(moe_e5m2_to_f32(0xFF)));

    CHECK(moe_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(moe_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(moe_f16_to_f32(0x03FF) == 0x1.ff8p-15f);
    CHECK(moe_f16_to_f32(0x3C00) == 1.0f);
    CHECK(moe_f16_to_f32(0xFC00) == -INFINITY);

    CHECK(moe_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(moe_bf16_to_f32(0x7F7F) == 0x1.fep127f);
    CHECK(moe_bf16_to_f32(0x0001) == 0x1p-133f);

    CHECK(moe_e8m0_to_f32(127) == 1.0f);
    CHECK(moe_e8m0_to_f32(0) == 0x1p-127f);
    CHECK(bits_of(moe_e8m0_to_f32(0)) == 0x00400000u);
    CHECK(moe_e8m0_to_f32(0xFE) == 0x1p127f);
    CHECK(isnan(moe_e8m0_to_f32(0xFF)));

    CHECK(moe_int4_to_i8(0x8) == -8 && moe_int4_to_i8(0x7) == 7 && moe_int4_to_i8(0xF) == -1);
    CHECK(moe_uint4_to_i8(0x0) == -8 && moe_uint4_to_i8(0x8) == 0 && moe_uint4_to_i8(0xF) == 7);
}

/* NaN codes keep their sign and payload where the format has one, so a NaN survives a
 * decode-encode trip through the wider format. */
static void test_nan_payloads(void)
{
    CHECK(bits_of(moe_bf16_to_f32(0xFFC1)) == 0xFFC10000u);
    CHECK(bits_of(moe_bf16_to_f32(0x7F81)) == 0x7F810000u);
    CHECK(bits_of(moe_f16_to_f32(0x7E00)) == 0x7FC00000u);
    CHECK(bits_of(moe_f16_to_f32(0xFC01)) == 0xFF802000u);
    CHECK(bits_of(moe_e5m2_to_f32(0x7E)) == 0x7FC00000u);
    CHECK(bits_of(moe_e5m2_to_f32(0xFD)) == 0xFFA00000u);
}

int main(void)
{
    for (size_t i = 0; i < N_FORMATS; i++)
        test_every_code(ALL_FORMATS[i]);
    test_nibble_decoders_ignore_high_bits();
    test_known_values();
    test_nan_payloads();
    return TEST_END();
}
