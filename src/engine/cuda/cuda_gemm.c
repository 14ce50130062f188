/* Row-major to column-major GEMM arguments and launch sizes (cuda_gemm.h). */
#include "engine/cuda/cuda_gemm.h"

ah_cu_colmajor_gemm ah__cu_gemm_to_colmajor(ah_cu_rowmajor_gemm g) {
    /* A row-major X[r,c] with leading dimension ld is the column-major X^T
     * with the same ld: C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M], where op(B)^T
     * is B's column-major view transposed exactly when B was. */
    return (ah_cu_colmajor_gemm){.op_first = g.tb,
                                 .op_second = g.ta,
                                 .m = g.N,
                                 .n = g.M,
                                 .k = g.K,
                                 .ld_first = g.ldb,
                                 .ld_second = g.lda,
                                 .ldc = g.ldc,
                                 .first_is_b = 1};
}

unsigned ah__cu_grid(size_t n, unsigned block) {
    if (block == 0)
        block = AH_CU_BLOCK;
    size_t g = (n + block - 1) / block;
    if (g < 1)
        g = 1;
    if (g > 2147483647u)
        g = 2147483647u;
    return (unsigned)g;
}

size_t ah__cu_attention_scratch(int T, int Hkv) {
    if (T <= 0 || Hkv <= 0)
        return 1;
    return (size_t)Hkv * (size_t)T * (size_t)T;
}
