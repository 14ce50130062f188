/* The planner benchmark scenarios, shared by plan_bench and verify_bench:
 * paper-like heterogeneous mixes, uneven mixes, real (Sailor) profiles and
 * scale points up to 1,024 GPUs of 6 types. */
#ifndef AUTOHET_BENCH_SCENARIOS_H
#define AUTOHET_BENCH_SCENARIOS_H
#include <stddef.h>

typedef struct {
    const char *group, *model, *cluster, *profile;
    int global_batch, seq;
} scenario;

static const scenario SCENARIOS[] = {
    {"paper-like", "gpt3-2.7b", "1x8xA100-40G,1x8xH800", NULL, 128, 2048},
    {"paper-like", "llama2-7b", "1x8xH800,1x8xH20", NULL, 128, 2048},
    {"paper-like", "bert-large", "1x8xA100-40G,1x8xH20", NULL, 512, 512},
    {"paper-like", "gpt3-6.7b", "2x8xA100-40G,1x8xH800,1x8xH20", NULL, 256, 2048},
    {"paper-like", "llama2-7b", "2x8xA100-40G,1x8xH800,1x8xH20", NULL, 256, 2048},
    {"paper-like", "bert-large", "2x8xA100-40G,1x8xH800,1x8xH20", NULL, 1024, 512},
    {"paper-like", "gpt3-13b", "4x8xA100-40G,2x8xH800,2x8xH20", NULL, 512, 2048},
    {"paper-like", "llama2-13b", "4x8xA100-40G,2x8xH800,2x8xH20", NULL, 512, 2048},
    {"paper-like", "gpt3-6.7b", "4x8xA100-40G,2x8xH800,2x8xH20", NULL, 512, 2048},
    {"uneven", "gpt3-13b", "6x8xH20,1x8xH800,1x8xA100-40G", NULL, 512, 2048},
    {"uneven", "llama2-7b", "6x8xV100-32G,1x8xH800,1x8xA100-80G", NULL, 512, 2048},
    {"real profile", "gpt-neo-2.7b", "2x8xA100-40G,1x8xA100-80G,1x8xV100-16G",
     "tests/fixtures/sailor/GPT-Neo-2.7", 256, 2048},
    {"real profile", "opt-350m", "1x8xA100-40G,1x8xRTX-3090,2x8xV100-16G", "tests/fixtures/sailor/OPT-350",
     512, 2048},
    {"scale", "llama2-13b", "4x8xA100-40G,2x8xA100-80G,2x8xH800,2x8xH20,4x8xV100-32G,2x8xH100-SXM", NULL, 256,
     2048},
    {"scale", "llama2-13b", "8x8xA100-40G,4x8xA100-80G,4x8xH800,4x8xH20,8x8xV100-32G,4x8xH100-SXM", NULL, 512,
     2048},
    {"scale", "llama2-13b", "16x8xA100-40G,8x8xA100-80G,8x8xH800,8x8xH20,16x8xV100-32G,8x8xH100-SXM", NULL,
     1024, 2048},
    {"scale", "llama2-13b", "32x8xA100-40G,16x8xA100-80G,16x8xH800,16x8xH20,32x8xV100-32G,16x8xH100-SXM",
     NULL, 2048, 2048},
    /* 1,024 GPUs of the 6 types Sailor measured, with their measured profiles */
    {"scale, real profile", "opt-350m",
     "32x8xA100-40G,16x8xA100-80G,32x8xV100-16G,16x8xRTX-3090,16x8xTitan-RTX,16x8xRTX-2080",
     "tests/fixtures/sailor/OPT-350", 2048, 2048},
};
#define N_SCEN (sizeof SCENARIOS / sizeof SCENARIOS[0])

#endif
