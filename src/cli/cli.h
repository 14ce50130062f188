/* Subcommands of the `autohet` command. Each returns the process exit code:
 * 0 success, 2 bad input (AH_EXIT_BAD_INPUT), 1 internal failure. */
#ifndef AUTOHET_CLI_H
#define AUTOHET_CLI_H
#include <getopt.h>
#include <stddef.h>

int cmd_plan(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_replan(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_commbench(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_preempt(int argc, char **argv);
int cmd_spot_sim(int argc, char **argv);
int cmd_hosts(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* Print "autohet <cmd>: <msg>" on stderr and return 2. */
int cli_bad_input(const char *cmd, const char *msg);
/* The one line saying a calibration's bandwidth fractions were dropped (ah_calibration_link_scope). */
void cli_calibration_link_note(const char *cmd, const char *path, int fitted_measured);
/* One line on stderr: calibration `path`'s device scales (fitted with a profile of `fitted`) were dropped for a
 * profile of `used` ("" = the analytic model; ah_calibration_scope). */
void cli_calibration_scope_note(const char *cmd, const char *path, const char *fitted, const char *used);
/* getopt_long options from one line, "model=m data=d quiet!q": NAME=C takes a
 * value, NAME!C none; C is what getopt_long returns. */
#define CLI_MAX_OPTIONS 40
typedef struct {
    struct option opts[CLI_MAX_OPTIONS + 1];
    char names[1024];
} cli_options;
/* the option count, or -1 for a malformed spec */
int cli_long_options(const char *spec, cli_options *o);
/* Whether --help or -h is among the arguments. */
int cli_wants_help(int argc, char **argv);
/* msg = "unknown or incomplete option 'ARG' (see autohet CMD --help)"; returns -1. */
int cli_unknown_option(const char *cmd, const char *arg, char *msg, size_t n);
/* An integer option value >= min into *out: 0, or -1 with msg "FLAG 'VALUE': expected an integer >= MIN". */
int cli_int_value(const char *flag, const char *value, int min, int *out, char *msg, size_t n);
/* Under MPI: rank 0 prints "autohet <cmd>: <msg>", every rank finalizes; returns 2. */
int cli_mpi_fail_all(const char *cmd, int rank, const char *msg);
/* Strict integer / number parsing of option values. */
int cli_parse_int(const char *s, int *out);
int cli_parse_double(const char *s, double *out);
/* "4" or "1,2,4": up to max integers; returns the count, or -1 (empty item, junk, too many). */
int cli_parse_int_list(const char *s, int *out, int max);
/* A comma-separated list value (NULL: none given) has no empty item: not "",
 * ",a", "a," or "a,,b". 0, or -1 with msg "FLAG 'VALUE': expected ...". */
int cli_check_list(const char *flag, const char *value, char *msg, size_t n);
/* Output paths are checked before any work, so that an unwritable one is bad
 * input (exit 2) and not a failure after the run: the file's directory must
 * exist and be writable, the path must not be a directory (NULL: nothing to
 * check). 0, or -1 with one line "FLAG 'PATH': why" in msg. */
int cli_check_output(const char *flag, const char *path, char *msg, size_t n);
/* An output directory: an existing one must be a writable directory; a
 * missing one must have a writable parent (nothing above it is created) and
 * is created when `create`. 0, or -1 with msg. */
int cli_check_output_dir(const char *flag, const char *path, int create, char *msg, size_t n);

#endif
