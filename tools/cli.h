/*
 * cli.h — helpers shared by the kvtier subcommands.
 */
#ifndef KVT_CLI_H
#define KVT_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses "4096", "256K", "512M", "4G", "1T" (also lower case, "KiB"/"MiB"
 * forms; K = 1024). Returns 0 or -EINVAL. */
int cli_parse_size(const char *s, uint64_t *out);
/* Parses a count with k/m suffixes meaning 1024 (context lengths: 32k, 1m). */
int cli_parse_count(const char *s, uint64_t *out);
/* "auto", "host" or an ordinal -> KVT_DEVICE_*; -EINVAL otherwise. */
int cli_parse_device(const char *s, int *out);
/* Seconds of a monotonic clock. */
double cli_now(void);
/* Formats bytes as "256 KiB", "1.5 GiB". Returns buf. */
const char *cli_bytes(char *buf, size_t n, double bytes);
/* Formats seconds as "1.5 s", "250 ms", "12 us" (3 significant digits). Returns buf. */
const char *cli_secs(char *buf, size_t n, double s);
/* Prints s to stdout as a JSON string (quotes, escapes): names come from
 * argv, paths from the environment. */
void cli_json_str(const char *s);
/* getopt_long's own complaint (c is ':' or '?') as a clear error naming the
 * option; returns -EINVAL. */
int cli_getopt_error(const char *cmd, int c, char **argv);
/* Prints "kvtier <cmd>: <msg>" to stderr and returns 2 (usage) or 1. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
