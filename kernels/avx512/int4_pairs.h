/* int4_pairs.h — internal: a pair line of INT4 nibbles widened to bf16 pairs of the integers u - 8
 * on AVX-512 (the tile recipe's AVX-512 and AMX-BF16 INT4 sets). */
#ifndef MOE_KERNELS_AVX512_INT4_PAIRS_H
#define MOE_KERNELS_AVX512_INT4_PAIRS_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/inline.h"
#include "kernels/ref/expert_int4_tile_layout.h"

/* Line r of a block (its 16 code bytes at line: row n's pair, low nibble the even element) to the
 * 16 bf16 pair dwords w[n][2r] | w[n][2r+1] << 16, w = u - 8 exactly (moe_i4t_widen): each byte
 * zero-extended to a dword, its nibbles moved to the two words, a 16-entry table lookup. 3
 * operations and a load. */
INLINE __m512i int4_bf16(const unsigned char *line)
{
    static const uint16_t table[32] __attribute__((aligned(64))) = MOE_I4T_BF16_TABLE;
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)line));
    /* (d | d << 12) & 0x000F000F: the low nibble in the low word, the high one in the high */
    const __m512i idx =
        _mm512_ternarylogic_epi32(d, _mm512_slli_epi32(d, 12), _mm512_set1_epi32(0x000F000F), 0xA8);
    return _mm512_permutexvar_epi16(idx, _mm512_load_si512(table));
}

#endif
