/* BLAS kernel selection by CPU features (see blas_select.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "engine/blas_select.h"

#include <cblas.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

void ah__cpu_features_detect(ah_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    int osxsave = (c >> 27) & 1;
    f->fma = (c >> 12) & 1;
    f->avx = (c >> 28) & 1;
    if (osxsave) {
        unsigned long long xcr0 = read_xcr0();
        f->os_ymm = (xcr0 & 0x6) == 0x6;
        f->os_zmm = f->os_ymm && (xcr0 & 0xe0) == 0xe0;
    }
    if (__get_cpuid_max(0, NULL) >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512cd = (b >> 28) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
            f->avx512bf16 = (a >> 5) & 1;
    }
}
#else
void ah__cpu_features_detect(ah_cpu_features *f) {
    memset(f, 0, sizeof *f); /* not x86: OpenBLAS's own choice stands */
}
#endif

const char *ah__openblas_core_for(const ah_cpu_features *f) {
    /* OpenBLAS's SkylakeX kernels use AVX-512 F, BW, VL, DQ and CD */
    if (f->os_zmm && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512cd)
        return "SkylakeX";
    if (f->os_ymm && f->avx2 && f->fma)
        return "Haswell";
    if (f->os_ymm && f->avx)
        return "Sandybridge";
    return NULL;
}

int ah__openblas_core_class(const char *core) {
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const avx2[] = {"haswell", "zen"};
    static const char *const avx[] = {"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"};
    if (core == NULL)
        return 0;
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i]))
            return 3;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i]))
            return 2;
    for (size_t i = 0; i < sizeof avx / sizeof *avx; i++)
        if (!strcasecmp(core, avx[i]))
            return 1;
    return 0;
}

#define CHOSEN_ENV "AUTOHET_BLAS_CORE_CHOSEN"

void ah_blas_select_kernels(int argc, char **cmd_argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv(CHOSEN_ENV))
        return; /* the user's choice, or this process image is the re-executed one */
    /* under valgrind an exec leaves the tool (the program would run natively, unchecked) */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload"))
        return;
    ah_cpu_features f;
    ah__cpu_features_detect(&f);
    const char *want = ah__openblas_core_for(&f);
    if (want == NULL || ah__openblas_core_class(openblas_get_corename()) >= ah__openblas_core_class(want))
        return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) != 0 || setenv(CHOSEN_ENV, want, 1) != 0)
        return;
    /* the same command line: "autohet" COMMAND ARGS... */
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (args == NULL)
        return;
    args[0] = "autohet";
    for (int i = 0; i < argc; i++)
        args[i + 1] = cmd_argv[i];
    fflush(NULL);
    execv("/proc/self/exe", args);
    free(args);
    /* exec failed: carry on with OpenBLAS's kernels, and say so in the kernel text */
    unsetenv("OPENBLAS_CORETYPE");
    setenv(CHOSEN_ENV, "exec-failed", 1);
}

static const char *feature_name(const char *core) {
    int c = ah__openblas_core_class(core);
    return c == 3 ? "AVX-512" : c == 2 ? "AVX2+FMA" : c == 1 ? "AVX" : "SSE";
}

void ah_blas_kernel_text(char *buf, size_t n) {
    const char *core = openblas_get_corename();
    const char *chosen = getenv(CHOSEN_ENV), *set = getenv("OPENBLAS_CORETYPE");
    if (core == NULL)
        core = "?";
    if (chosen && set && !strcmp(chosen, set))
        snprintf(buf, n, "OpenBLAS %s (chosen from CPU features: %s)", core, feature_name(core));
    else if (set)
        snprintf(buf, n, "OpenBLAS %s (OPENBLAS_CORETYPE as set)", core);
    else if (chosen && !strcmp(chosen, "exec-failed"))
        snprintf(buf, n, "OpenBLAS %s (OpenBLAS's own choice; the re-exec to pick kernels failed)", core);
    else
        snprintf(buf, n, "OpenBLAS %s (OpenBLAS's own choice)", core);
}

int ah_blas_share_cores(MPI_Comm comm, int *sharing) {
    *sharing = 1;
    /* every rank takes part in the collectives, whether or not its environment has the variables (plain mpirun
     * forwards them to no other host: ranks that skipped would leave the others waiting) */
    MPI_Comm host;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    int n;
    MPI_Comm_size(host, &n);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        for (long c = 0, online = sysconf(_SC_NPROCESSORS_ONLN); c < online && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &mine);
    cpu_set_t *all = malloc(sizeof mine * (size_t)n);
    if (!all)
        abort();
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, host);
    int same = 0;
    for (int i = 0; i < n; i++)
        same += CPU_EQUAL(&all[i], &mine);
    free(all);
    MPI_Comm_free(&host);
    if (getenv("OMP_NUM_THREADS") || getenv("OPENBLAS_NUM_THREADS"))
        return 0; /* the user's choice */
    int threads = CPU_COUNT(&mine) / (same > 0 ? same : 1);
    threads = threads < 1 ? 1 : threads;
    *sharing = same;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    return threads;
}
