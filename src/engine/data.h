/* Training data: byte-level text (vocabulary 256) or token files (llm.c's
 * versions 1 and 2, Megatron's .bin/.idx, raw uint16/uint32 .bin, or a
 * directory of shards), split into train and validation, served
 * deterministically: the batch of step s is a function of (seed, s) only, so
 * every plan and every rank sees the same samples in the same order.
 * docs/data.md. */
#ifndef AUTOHET_ENGINE_DATA_H
#define AUTOHET_ENGINE_DATA_H
/* the dataset (ah_dataset, ah_dataset_load, ah_dataset_batch, ...) is public: autohet/engine.h */
#include "autohet/engine.h"

#endif
