/*
 * cli.h — helpers shared by the kvtier subcommands.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/util/util.h" /* util_now, util_median, the page pattern */

struct kvt_config;
struct option;

/* The number parsers take the whole string or nothing: it starts with a
 * digit (no space, sign, "inf", "nan" or hex) and has nothing after the
 * number and its suffix. Each returns 0 or -EINVAL, and leaves *out alone
 * on error. */

/* Bytes: "4096", "256K", "1.5M", "512MiB", "4G", "1TB" (K = 1024, any case).
 * A fraction must come out a whole number of bytes; above 2^64-1 fails. */
int cli_parse_size(const char *s, uint64_t *out);
/* A count with k, m, g suffixes meaning 1024 (context lengths: 32k, 1m). */
int cli_parse_count(const char *s, uint64_t *out);
/* A finite decimal number, "2", "0.5", "1e3"; no sign. */
int cli_parse_real(const char *s, double *out);
/* A list "a,b,c": val copied to buf[n] and cut at its commas, items[] then
 * pointing into buf. Returns 0 with *count items (1 to max); -EINVAL for an
 * empty item ("a,,b", ",a", "a,", "") or a val of n bytes or more; -E2BIG
 * for more than max items. */
int cli_split_list(const char *val, char *buf, size_t n, char **items, int max, int *count);
/* "auto", "host" or an ordinal 0..1023 (digits only) -> KVT_DEVICE_* or the
 * ordinal; -EINVAL otherwise. */
int cli_parse_device(const char *s, int *out);
/* Formats bytes as "256 KiB", "1.5 GiB". Returns buf. */
const char *cli_bytes(char *buf, size_t n, double bytes);
/* Formats seconds as "1.5 s", "250 ms", "12 us" (3 significant digits). Returns buf. */
const char *cli_secs(char *buf, size_t n, double s);
/* Prints s to stdout as a JSON string, encoded by jansson (quotes, escapes;
 * bytes that are not UTF-8 as '?'): names come from argv, paths from the
 * environment. A whole object is better built with jansson and printed
 * with util_json_print (tools/util/json.h). */
void cli_json_str(const char *s);
/* Prints v to stdout as a JSON number with fmt ("%.6g"): null when it is not
 * finite, which JSON cannot say. */
void cli_json_num(const char *fmt, double v);
/* getopt_long's own complaint (c is ':' or '?', with argv and lo as it was
 * given them) as a clear error naming the option: unknown, ambiguous, one
 * that needs a value, or a flag given one ("--json=1"). Returns -EINVAL. */
int cli_getopt_error(const char *cmd, int c, char **argv, const struct option *lo);
/* Option checks: each parses val, checks it against [lo, hi], and on failure
 * prints "bad value 'VAL' for --OPT: expected ..." and returns -EINVAL
 * (the command then exits 2). *out is written only on success. */
int cli_opt_count(const char *cmd, const char *opt, const char *val, uint64_t lo, uint64_t hi,
                  uint64_t *out);
int cli_opt_size(const char *cmd, const char *opt, const char *val, uint64_t lo, uint64_t hi,
                 uint64_t *out);
/* A real number in [lo, hi], or (lo, hi] when lo_open. */
int cli_opt_real(const char *cmd, const char *opt, const char *val, double lo, bool lo_open,
                 double hi, double *out);
/* A path: anything but the empty string, which names no file (and a
 * directory "" with "/name" appended is a name in the root directory). */
int cli_opt_path(const char *cmd, const char *opt, const char *val);
/* "bad value 'VAL' for --OPT: expected WANT" on stderr; returns -EINVAL. */
int cli_bad_value(const char *cmd, const char *opt, const char *val, const char *want);

/* Why a kvtier call that returned rc failed, for a person: kvt_last_error()
 * when it says (it names the field, file or directory), else
 * kvt_strerror(rc), whose "see kvt_last_error" is for programs. */
const char *cli_kvt_why(int rc);

/* A kvt_config field and the option that sets it. */
struct cli_field {
    const char *field, *option;
};
/* Runs the library's own kvt_config_check() on c before anything is opened,
 * so that a configuration the engine would refuse is an argument error
 * naming the option: map (ended by a { NULL, NULL } entry) pairs the fields
 * its message may start with to options. Returns 0, or -EINVAL after the
 * message. */
int cli_config_check(const char *cmd, const struct kvt_config *c, const struct cli_field *map);

/* Memory for the disk to read into as an engine's host buffers are: in
 * 2 MiB pages (kvt_tool_huge_map; docs/performance.md#huge-pages: a virtual
 * disk fills 4 KiB pages several times slower). cli_huge_alloc returns len
 * bytes, or NULL; cli_huge_free unmaps them (h zeroed: NULL is fine). */
struct cli_huge {
    void *map;
    size_t map_len;
};
unsigned char *cli_huge_alloc(size_t len, struct cli_huge *h);
void cli_huge_free(struct cli_huge *h);

/* Prints "kvtier <cmd>: <msg>" to stderr and returns 2 (usage) or 1. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* SIGINT and SIGTERM during a long command (run, replay). cli_stop_catch()
 * makes each set a flag and nothing else (async-signal-safe); the command's
 * loops poll it with cli_stopped() (the signal, or 0) or cli_stop_check()
 * (-EINTR, or 0) and leave through the normal close path, which removes
 * what the command made: its temporary spill directory, which a signal's
 * default action left behind. A signal the caller ignores stays ignored;
 * a second one has its default effect. cli_stop_end(cmd) puts the previous
 * actions back; when a signal was caught it says "kvtier <cmd>: stopped by
 * SIGINT" and raises it again, so that the caller (a shell) sees the
 * command ended by it: a shell running a script stops after a child killed
 * by SIGINT, not after one that exited 130. It returns 0 when none was
 * caught, or 128 + the signal if the restored action did not end the
 * process. */
void cli_stop_catch(void);
int cli_stopped(void);
int cli_stop_check(void);
int cli_stop_end(const char *cmd);
/* Sleeps s seconds, less when cli_stopped(): in slices of 50 ms at most, so
 * that a signal caught after the caller's last check, just before the sleep
 * began, still ends it soon (a nanosleep it did not interrupt runs on). */
void cli_sleep(double s);
/* The kvtier command's --json errors (docs/commands.md): with --json among
 * argv (argv[1] the command), an error is also one JSON object on stdout,
 * {"error": <the first cli_error message>, "command": ..., "exit": rc},
 * unless the command printed its report. main calls _begin before the
 * command (it puts a counting stream in stdout's place) and returns
 * _end(rc) after it. */
void cli_json_errors_begin(int argc, char **argv);
int cli_json_errors_end(int rc);

#endif
