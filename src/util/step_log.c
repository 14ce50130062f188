/* Cutting a metrics log back to a resumed run's step (step_log.h). */
#include "util/step_log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ah_step_log_line_step(const char *line) {
    const char *p = strstr(line, "\"step\": ");
    return p ? atoi(p + 8) : -1;
}

int ah_step_log_keep_through(FILE *f, int step) {
    if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0)
        return -1;
    char line[4096];
    long keep = 0;
    int kept = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') /* torn (or longer than any line the trainer writes) */
            break;
        if (ah_step_log_line_step(line) > step)
            break;
        keep = ftell(f);
        kept++;
    }
    if (ftruncate(fileno(f), keep) != 0 || fseek(f, 0, SEEK_END) != 0)
        return -1;
    return kept;
}
