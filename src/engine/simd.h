/* Function multi-versioning for the engine's elementwise loops. The build
 * targets baseline x86-64 (SSE2) so that one binary runs everywhere; a
 * function marked AH_VEC_CLONES is compiled three times (AVX-512F, AVX2,
 * baseline) and the dynamic loader picks the widest one the CPU runs, by
 * cpuid features (GCC/clang target_clones, an ifunc). The clones are built
 * without FMA contraction so that every clone rounds as the baseline one:
 * results do not depend on the CPU the program runs on. Only for plain loops
 * the compiler vectorises; the BLAS calls choose their own kernels
 * (blas_select.h). clang (the fuzz build) gets the baseline only: clang 14
 * emits the clones without the resolver that binds the plain name. */
#ifndef AUTOHET_ENGINE_SIMD_H
#define AUTOHET_ENGINE_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(AH_NO_VEC_CLONES)
#define AH_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AH_VEC_CLONES
#endif

#endif
