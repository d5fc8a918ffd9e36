/*
 * bench_remote.c — `kvtier bench remote URL`: the shared tier's stores and
 * loads beside a raw pipelined hiredis client of the same cluster, value
 * size, clients and batch, measured in the same run, alternated, medians
 * (lab/remote_bench.h does the measuring).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/remote_bench.h"
#include "tools/cli.h"
#include "tools/util/json.h"

#define MAX_SIZES 8
#define MAX_REPS 15

struct rb_opts {
    struct kvt_rbench_opts r;
    uint64_t sizes[MAX_SIZES];
    int nsizes;
    unsigned reps;
    bool json;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier bench remote URL [options]\n"
            "\n"
            "Stores and loads values on a Redis Cluster (or one Redis) through kvtier's shared\n"
            "tier (each value framed with its key, the fingerprint and a CRC32C, checked on\n"
            "load) beside a raw pipelined hiredis client (the slot map from CLUSTER SLOTS,\n"
            "a connection per master per client, no framing, no checks): the same value size,\n"
            "clients and batch, alternated in one run; medians; this process's CPU seconds\n"
            "per GB. Keys are kvtbench:* with a TTL of 10 minutes.\n"
            "\n"
            "URL is redis://host:port[,host:port...] (no credentials: --auth-file).\n"
            "\n"
            "options:\n"
            "  --value LIST        value sizes (default 256K,1M)\n"
            "  --clients N         threads, each with its own connections (default 8)\n"
            "  --batch N           keys per call / pipelined round (default 8)\n"
            "  --seconds S         per measurement (default 2)\n"
            "  --reps N            measurements of each, alternated (default 3, at most %d)\n"
            "  --auth-file F       a file holding \"password\" or \"user password\"\n"
            "  --timeout-ms N      kvtier's bound on one call (default 2000)\n"
            "  --json              one JSON object on stdout\n"
            "  -h, --help          this text\n",
            MAX_REPS);
}

static const struct option lo[] = {
    { "value", 1, 0, 'v' },   { "clients", 1, 0, 'c' }, { "batch", 1, 0, 'b' },
    { "seconds", 1, 0, 's' }, { "reps", 1, 0, 'r' },    { "auth-file", 1, 0, 'a' },
    { "timeout-ms", 1, 0, 't' },                        { "json", 0, 0, 'j' },
    { "help", 0, 0, 'h' },    { 0, 0, 0, 0 },
};

static int parse(int argc, char **argv, struct rb_opts *o)
{
    *o = (struct rb_opts){ .reps = 3 };
    o->r = (struct kvt_rbench_opts){ .clients = 8, .batch = 8, .seconds = 2, .timeout_ms = 2000 };
    o->sizes[0] = 256 << 10;
    o->sizes[1] = 1 << 20;
    o->nsizes = 2;
    optind = 1;
    opterr = 0;
    int c;
    uint64_t n;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 1;
        case 'v': {
            char buf[256], *items[MAX_SIZES];
            if (cli_split_list(optarg, buf, sizeof buf, items, MAX_SIZES, &o->nsizes))
                return cli_bad_value("bench remote", "value", optarg, "sizes such as 256K,1M");
            for (int i = 0; i < o->nsizes; i++)
                if (cli_parse_size(items[i], &o->sizes[i]) || o->sizes[i] < 4096 ||
                    o->sizes[i] > (256u << 20))
                    return cli_bad_value("bench remote", "value", items[i], "4K to 256M");
            break;
        }
        case 'c':
            if (cli_opt_count("bench remote", "clients", optarg, 1, 256, &n))
                return -EINVAL;
            o->r.clients = (unsigned)n;
            break;
        case 'b':
            if (cli_opt_count("bench remote", "batch", optarg, 1, 256, &n))
                return -EINVAL;
            o->r.batch = (unsigned)n;
            break;
        case 's':
            if (cli_opt_real("bench remote", "seconds", optarg, 0.1, false, 3600, &o->r.seconds))
                return -EINVAL;
            break;
        case 'r':
            if (cli_opt_count("bench remote", "reps", optarg, 1, MAX_REPS, &n))
                return -EINVAL;
            o->reps = (unsigned)n;
            break;
        case 'a':
            if (cli_opt_path("bench remote", "auth-file", optarg))
                return -EINVAL;
            o->r.auth_file = optarg;
            break;
        case 't':
            if (cli_opt_count("bench remote", "timeout-ms", optarg, 1, 600000, &n))
                return -EINVAL;
            o->r.timeout_ms = (unsigned)n;
            break;
        case 'j': o->json = true; break;
        default: return cli_getopt_error("bench remote", c, argv, lo);
        }
    }
    if (optind != argc - 1) {
        cli_error("bench remote", 2, optind == argc ? "no URL given (see --help)"
                                                    : "one URL only (see --help)");
        return -EINVAL;
    }
    o->r.url = argv[optind];
    if (strncmp(o->r.url, "redis://", 8) != 0)
        return cli_bad_value("bench remote", "URL", o->r.url, "redis://host:port[,host:port...]");
    if (strchr(o->r.url, '@'))
        return cli_bad_value("bench remote", "URL", "(not shown: it holds credentials)",
                             "a URL without user or password: give them in --auth-file");
    return 0;
}

/* One direction at one size: raw and kvtier alternated reps times. */
struct row {
    uint64_t size;
    int write;
    double raw_gbps, kvt_gbps, raw_cpu, kvt_cpu;
    uint64_t raw_failed, kvt_failed, bad;
};

static int measure(struct rb_opts *o, uint64_t size, int write, struct row *row)
{
    double g[2][MAX_REPS], cpu[2][MAX_REPS];
    *row = (struct row){ .size = size, .write = write };
    o->r.value_bytes = size;
    if (!write) /* every key the loads read, stored once, untimed */
        for (int raw = 1; raw >= 0; raw--) {
            struct kvt_rbench_result r;
            char err[256] = "";
            o->r.fill = 1;
            int rc = kvt_rbench_run(&o->r, raw, 1, &r, err, sizeof err);
            o->r.fill = 0;
            if (rc)
                return cli_error("bench remote", 1, "filling the keys of %llu bytes: %s",
                                 (unsigned long long)size, err[0] ? err : strerror(-rc)),
                       rc;
        }
    for (unsigned k = 0; k < o->reps; k++)
        for (int raw = 1; raw >= 0; raw--) {
            struct kvt_rbench_result r;
            char err[256] = "";
            int rc = kvt_rbench_run(&o->r, raw, write, &r, err, sizeof err);
            if (rc)
                return cli_error("bench remote", 1, "%s %s of %llu bytes: %s",
                                 raw ? "raw" : "kvtier", write ? "stores" : "loads",
                                 (unsigned long long)size, err[0] ? err : strerror(-rc)),
                       rc;
            g[raw][k] = r.gbps;
            cpu[raw][k] = r.cpu_s_per_gb;
            *(raw ? &row->raw_failed : &row->kvt_failed) += r.failed;
            row->bad += r.bad;
        }
    row->raw_gbps = util_median(g[1], o->reps, NULL, NULL);
    row->kvt_gbps = util_median(g[0], o->reps, NULL, NULL);
    row->raw_cpu = util_median(cpu[1], o->reps, NULL, NULL);
    row->kvt_cpu = util_median(cpu[0], o->reps, NULL, NULL);
    return 0;
}

static void print_rows(FILE *f, const struct rb_opts *o, const struct row *rows, int n)
{
    fprintf(f, "kvtier bench remote %s: %u clients, batch %u, %.3g s x %u alternated, medians\n",
            o->r.url, o->r.clients, o->r.batch, o->r.seconds, o->reps);
    fprintf(f, "  %-8s %-6s %10s %10s %7s %12s %12s %8s %4s\n", "value", "op", "raw GB/s",
            "kvtier", "ratio", "raw CPU s/GB", "kvtier s/GB", "failed", "bad");
    for (int i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        fprintf(f, "  %-8llu %-6s %10.3f %10.3f %7.3f %12.3f %12.3f %8llu %4llu\n",
                (unsigned long long)r->size, r->write ? "store" : "load", r->raw_gbps, r->kvt_gbps,
                r->raw_gbps > 0 ? r->kvt_gbps / r->raw_gbps : 0, r->raw_cpu, r->kvt_cpu,
                (unsigned long long)(r->raw_failed + r->kvt_failed), (unsigned long long)r->bad);
    }
}

static void print_json(const struct rb_opts *o, const struct row *rows, int n)
{
    json_t *j = json_object(), *a = json_array();
    util_json_set_u64(j, "clients", o->r.clients);
    util_json_set_u64(j, "batch", o->r.batch);
    util_json_set_real(j, "seconds", o->r.seconds);
    util_json_set_u64(j, "reps", o->reps);
    for (int i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        json_t *x = json_object();
        util_json_set_u64(x, "value_bytes", r->size);
        util_json_set_str(x, "op", r->write ? "store" : "load");
        util_json_set_real(x, "raw_gbps", r->raw_gbps);
        util_json_set_real(x, "kvtier_gbps", r->kvt_gbps);
        util_json_set_real(x, "ratio", r->raw_gbps > 0 ? r->kvt_gbps / r->raw_gbps : 0);
        util_json_set_real(x, "raw_cpu_s_per_gb", r->raw_cpu);
        util_json_set_real(x, "kvtier_cpu_s_per_gb", r->kvt_cpu);
        util_json_set_u64(x, "raw_failed", r->raw_failed);
        util_json_set_u64(x, "kvtier_failed", r->kvt_failed);
        util_json_set_u64(x, "bad", r->bad);
        json_array_append_new(a, x);
    }
    json_object_set_new(j, "rows", a);
    util_json_print(stdout, j);
}

int bench_remote_main(int argc, char **argv)
{
    struct rb_opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    o.r.nonce = util_now_ns() ^ ((uint64_t)getpid() << 40);
    struct row rows[2 * MAX_SIZES];
    int n = 0;
    for (int i = 0; i < o.nsizes; i++)
        for (int w = 1; w >= 0; w--) /* stores first: the loads read what they left */
            if ((rc = measure(&o, o.sizes[i], w, &rows[n++])))
                return 1;
    print_rows(o.json ? stderr : stdout, &o, rows, n);
    if (o.json)
        print_json(&o, rows, n);
    for (int i = 0; i < n; i++)
        if (rows[i].bad)
            return cli_error("bench remote", 1, "%llu values read back wrong",
                             (unsigned long long)rows[i].bad);
    return 0;
}
