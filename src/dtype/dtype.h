/* dtype.h — internal: scalar conversions between f32 and every number format libmoe reads. */
#ifndef MOE_DTYPE_DTYPE_H
#define MOE_DTYPE_DTYPE_H

#include <stdint.h>

#include "moe.h"

/*
 * Every *_to_f32 decodes one code exactly (all these formats are subsets of f32, except
 * E8M0 code 0, 2^-127, which is an f32 subnormal and is still exact).
 *
 * Every f32_to_* rounds to nearest, ties to even (for every f32 input, subnormals included;
 * the result does not depend on the FPU rounding mode, FTZ or DAZ); a negative value that
 * rounds to zero gives -0 where the format has one; and:
 *  - bf16, f16, E5M2 (formats with Inf): overflow goes to ±Inf as IEEE rounding says (a
 *    value at or above the midpoint between max and the next power of two becomes Inf);
 *    NaN stays NaN (sign kept, quiet: the top payload bits are kept and the quiet bit set,
 *    which is what vcvtneps2bf16 does for bf16).
 *  - E4M3 "fn" (no Inf): overflow saturates to ±448; NaN -> 0x7F (0xFF if the sign is set).
 *  - E2M1 (no Inf, no NaN): overflow saturates to ±6; NaN -> +0 (an MX block encodes NaN
 *    through its E8M0 scale, not its elements).
 *  - E8M0 (power of two, no sign, no zero): rounds to the nearest power of two by value,
 *    like every other format: between 2^k and 2^(k+1) the midpoint is 1.5 * 2^k, and an
 *    exact midpoint goes to the even code. NaN or a negative value -> 0xFF (NaN); +0, -0
 *    and anything below 2^-127 -> 0x00 (2^-127); +Inf and anything from 2^127 up -> 0xFE
 *    (2^127). This is not an MX block-scale rule: a quantiser derives its scale from
 *    floor/ceil(log2 amax) itself.
 *  - int4 (signed, -8..7) and uint4 ("value + 8", code 0..15 meaning -8..7): round to the
 *    nearest integer, ties to even, saturate; NaN -> 0 (the value 0).
 */
float moe_bf16_to_f32(uint16_t code);
uint16_t moe_f32_to_bf16(float x);

float moe_f16_to_f32(uint16_t code);
uint16_t moe_f32_to_f16(float x);

float moe_e4m3_to_f32(uint8_t code);
uint8_t moe_f32_to_e4m3(float x);

float moe_e5m2_to_f32(uint8_t code);
uint8_t moe_f32_to_e5m2(float x);

float moe_e2m1_to_f32(uint8_t code); /* code in the low 4 bits; upper bits ignored */
uint8_t moe_f32_to_e2m1(float x);

float moe_e8m0_to_f32(uint8_t code);
uint8_t moe_f32_to_e8m0(float x);

int8_t moe_int4_to_i8(uint8_t code);  /* low 4 bits, two's complement */
uint8_t moe_f32_to_int4(float x);     /* returns the 4-bit code */
int8_t moe_uint4_to_i8(uint8_t code); /* low 4 bits, code - 8 */
uint8_t moe_f32_to_uint4(float x);    /* returns the 4-bit code (value + 8) */

/* Parses a safetensors dtype string ("BF16", "F8_E4M3", ...). Unknown -> MOE_DTYPE_INVALID.
 * safetensors has no INT4/UINT4/F4 names libmoe maps; "F4" maps to MOE_DTYPE_F4_E2M1. */
moe_dtype moe_dtype_from_safetensors(const char *name);

/* The safetensors name of a dtype, or NULL if safetensors has none. */
const char *moe_dtype_safetensors_name(moe_dtype dtype);

#endif
