/* The training data of autohet train and autohet run (cli_data.h). */
#include "cli/cli_data.h"

#include <stdio.h>
#include <string.h>

int cli_load_data(const char *data_path, const char *val_path, ah_model_config *cfg, int seq,
                  ah_dataset *data, char *msg, size_t n) {
    if (ah_dataset_load(data, data_path, val_path ? 0.0 : 0.1, seq, msg, n) != 0)
        return -1;
    if (val_path && ah_dataset_set_validation(data, val_path, seq, msg, n) != 0) {
        ah_dataset_free(data);
        return -1;
    }
    cfg->vocab = ah_dataset_vocab(data->kind, cfg->vocab);
    if (ah_dataset_check_vocab(data, cfg->vocab, msg, n) != 0) {
        size_t len = strlen(msg);
        snprintf(msg + len, n - len, " of model %s", cfg->name);
        ah_dataset_free(data);
        return -1;
    }
    return 0;
}
