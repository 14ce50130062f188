/* The one table of Hugging Face names and layouts of the engine's tensors
 * (docs/weights.md, "Names"): which HF tensor(s) hold an engine tensor of the
 * full (TP=1) layout, and how its values are arranged there. */
#ifndef AUTOHET_ENGINE_HF_MAP_H
#define AUTOHET_ENGINE_HF_MAP_H
#include <stddef.h>
#include <stdint.h>

#include "autohet/model.h"
#include "engine/model.h"
#include "engine/safetensors.h"

typedef enum {
    AH_HF_COPY,      /* the same values in the same order */
    AH_HF_TRANSPOSE, /* GPT-2 Conv1D: HF [in, out] holds the engine's [out, in] */
    AH_HF_ROPE       /* LLaMA q/k: per head, HF unit i / i + D/2 is the engine's 2i / 2i + 1 */
} ah_hf_op;

typedef struct {
    char name[AH_ST_MAX_NAME];
    ah_hf_op op;
    size_t first, count; /* the engine tensor's elements this HF tensor holds */
    int ndim;
    int64_t shape[2]; /* the HF tensor's shape */
    int heads, head_dim; /* AH_HF_ROPE */
} ah_hf_part;

typedef struct {
    int n; /* 0: the tensor is empty (not stored) */
    ah_hf_part p[2];
} ah_hf_map;

/* The HF tensors of engine tensor ti (full layout) of layer l. A tied head's
 * lm_head maps to the embedding when tied_from_embedding (reading); on export
 * it is left out (n = 0). cfg must pass ah__hf_supported. */
void ah__hf_map_tensor(const ah_model_config *cfg, int l, const ah_tensor_info *ti, int tied_from_embedding,
                      ah_hf_map *m);
/* One HF tensor's values (p->count) into the engine tensor's elements
 * [p->first, p->first + p->count) of eng (the tensor's full values), and back. */
void ah__hf_part_to_engine(const ah_hf_part *p, int gcols, const float *hf, float *eng);
void ah__hf_part_from_engine(const ah_hf_part *p, int gcols, const float *eng, float *hf);
/* GPT-2 files are written with this prefix on every tensor but lm_head;
 * readers accept names with or without it (the hub's gpt2 has none). */
#define AH_HF_GPT2_PREFIX "transformer."

#endif
