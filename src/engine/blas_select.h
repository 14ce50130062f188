/* BLAS kernel selection by CPU features. Debian's OpenBLAS 0.3.21 picks its
 * kernels from a list of CPU models it knows; on a newer CPU (e.g. an Intel
 * Xeon family 6 model 207, or an AMD Zen 5) it falls back to SSE3 "Prescott"
 * kernels, 3-5x slower than the AVX-512 ones the CPU runs. OpenBLAS reads
 * OPENBLAS_CORETYPE once, in a library constructor that runs before main, so
 * the only documented way to change its choice is the environment of a new
 * process image: ah_blas_select_kernels sets the variable and re-executes the
 * program once (see docs/engine.md, "BLAS kernels"). */
#ifndef AUTOHET_ENGINE_BLAS_SELECT_H
#define AUTOHET_ENGINE_BLAS_SELECT_H

#include <stddef.h>

#include "autohet/engine.h"

/* What cpuid and xgetbv say: instruction sets, and whether the OS saves the
 * wide registers (an instruction set without the OS's support cannot run). */
typedef struct {
    int avx, avx2, fma;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512cd;
    int avx512bf16; /* AVX512_BF16 (vdpbf16ps): bf16 products at twice the fp32 rate */
    int os_ymm; /* XCR0 has SSE and AVX state */
    int os_zmm; /* XCR0 has AVX-512 opmask and upper-ZMM state too */
} ah_cpu_features;

void ah__cpu_features_detect(ah_cpu_features *f);

/* The OpenBLAS core whose sgemm kernels the feature set runs: "SkylakeX"
 * (AVX-512 F/BW/VL/DQ/CD with OS support), "Haswell" (AVX2 + FMA), "Sandybridge"
 * (AVX), or NULL (SSE only: whatever OpenBLAS picks). */
const char *ah__openblas_core_for(const ah_cpu_features *f);

/* The vector width class of an OpenBLAS core name, case-insensitive:
 * 3 AVX-512 (SkylakeX, Cooperlake, SapphireRapids), 2 AVX2 + FMA (Haswell,
 * Zen), 1 AVX (Sandybridge, Bulldozer family), 0 anything else (SSE cores,
 * unknown names). */
int ah__openblas_core_class(const char *core);

/* ah_blas_select_kernels and ah_blas_kernel_text: autohet/engine.h */

#endif
