/* The training loop over an executor (docs/engine.md): steps, the evaluation
 * cadence, the learning-rate schedule, the checkpoint cadence (synchronous
 * saves, the memory-tier snapshot and its background persist, polled at step
 * boundaries), resume and recovery before the first step, progress lines and
 * the end-of-run summary. `autohet train` parses flags, fills an
 * ah_trainer_config and prints what ah_trainer_run returns. */
#ifndef AUTOHET_ENGINE_TRAINER_H
#define AUTOHET_ENGINE_TRAINER_H
/* the trainer (ah_trainer_config, ah_trainer_run, ...) is public: autohet/engine.h */
#include "autohet/engine.h"
#include "engine/executor.h"

#endif
