/* autohet tokenize: scripts/tokenize.py (Hugging Face tokenizers) under the
 * autohet command (docs/data.md, "From text to token files"). */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

/* The script: $AUTOHET_TOKENIZE_SCRIPT, else scripts/tokenize.py above the
 * directory of this executable (build/autohet of a source tree) or beside it. */
static int find_script(char *path, size_t n) {
    const char *env = getenv("AUTOHET_TOKENIZE_SCRIPT");
    if (env && env[0]) {
        snprintf(path, n, "%s", env);
        return access(path, R_OK) == 0 ? 0 : -1;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = '\0';
    const char *dir = dirname(exe);
    const char *const rel[] = {"../scripts/tokenize.py", "scripts/tokenize.py",
                               "../share/autohet/tokenize.py"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(path, n, "%s/%s", dir, rel[i]);
        if (access(path, R_OK) == 0)
            return 0;
    }
    return -1;
}

int cmd_tokenize(int argc, char **argv) {
    char script[PATH_MAX + 64];
    if (find_script(script, sizeof script) != 0)
        return cli_bad_input("tokenize", "scripts/tokenize.py not found beside this autohet (set "
                                         "AUTOHET_TOKENIZE_SCRIPT to its path)");
    const char *py = getenv("AUTOHET_PYTHON") ? getenv("AUTOHET_PYTHON") : "python3";
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (args == NULL)
        return cli_bad_input("tokenize", "out of memory");
    args[0] = (char *)py;
    args[1] = script;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    execvp(py, args);
    char msg[512];
    snprintf(msg, sizeof msg, "cannot run %s: %s", py, strerror(errno));
    free(args);
    return cli_bad_input("tokenize", msg);
}
