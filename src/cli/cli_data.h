/* The training data of autohet train and autohet run: one loader, one set of
 * messages, so that `run` refuses before launching anything what `train`
 * refuses. */
#ifndef AUTOHET_CLI_DATA_H
#define AUTOHET_CLI_DATA_H
#include <stddef.h>

#include "autohet/engine.h"
#include "autohet/model.h"

/* --data (and --val-data when not NULL; raw token files of raw_type, from
 * --data-dtype) for sequences of seq tokens; sets
 * cfg->vocab to the vocabulary trained on that data (the model's for token
 * data, 256 for text) and checks every token id is below it. 0, or -1 with
 * one line in msg (nothing to free). */
int cli_load_data(const char *data_path, const char *val_path, ah_token_type raw_type, ah_model_config *cfg,
                  int seq, ah_dataset *data, char *msg, size_t n);

#endif
