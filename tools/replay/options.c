/*
 * options.c — `kvtier replay`'s options, --help, and the command itself
 * (replay_main: parse, replay_exec, report).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/replay/replay.h"

void replay_opts_default(struct replay_opts *o)
{
    *o = (struct replay_opts){ 0 };
    o->model = kvt_preset_find("llama3-8b");
    o->block_bytes = REPLAY_DEFAULT_BLOCK;
    o->capacity = (struct replay_cap){ CAP_FRACTION, REPLAY_DEFAULT_CAPACITY, 0 };
    o->prefill_tps = REPLAY_DEFAULT_PREFILL;
    o->progress = -1;
    o->concurrency = 1;
}

static void replay_usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier replay TRACE [options]\n"
            "\n"
            "Drives a real engine with a prefix-cache request trace, as an inference engine's\n"
            "prefix cache drives its KV store: for each request, kvt_exists on its chain of\n"
            "blocks (the hit prefix: the leading blocks present), kvt_get of the hit blocks\n"
            "and kvt_put of the others. A block's key is (hash id, all layers, position in\n"
            "the chain); its bytes are a function of that key, so every byte read back is\n"
            "checked. Reports the prefix-hit fraction (blocks and tokens), which tier served\n"
            "the hits, bytes moved per tier, SSD bytes written, load GB/s beside raw io_uring\n"
            "O_DIRECT reads at the same block size measured in the same run, CPU time per GB,\n"
            "and a modeled time to first token: loading the hit prefix vs recomputing it.\n"
            "\n"
            "TRACE is Mooncake's JSONL, one request a line:\n"
            "  {\"timestamp\": MS, \"input_length\": TOKENS, \"output_length\": TOKENS,\n"
            "   \"hash_ids\": [ID, ...]}     one id per 512-token block of the input\n"
            "\n"
            "blocks:\n"
            "  --model NAME        what a block stands for: 512 tokens of this preset's KV\n"
            "                      (default llama3-8b: 64 MiB); list below\n"
            "  --block-bytes N     bytes per block in the engine, a multiple of 4096 (default\n"
            "                      128K: the model's blocks scaled down, which the report\n"
            "                      says; load times are scaled back up for the TTFT model)\n"
            "capacity (FRACTION of the trace's distinct blocks in (0, 1], or bytes: 512M):\n"
            "  --capacity X        DRAM + SSD together (default 0.1)\n"
            "  --dram X            the DRAM tier (default: a quarter of --capacity)\n"
            "  --ssd X             the SSD tier (default: the rest; 0 = no SSD tier)\n"
            "  --ssd-dir DIR       spill directory (default: a temporary one, removed at exit)\n"
            "  --overwrite-ssd-dir let the replay wipe the pages a persisted kvtier store in\n"
            "                      --ssd-dir holds (without it such a directory is refused)\n"
            "  --policy NAME       the engine's policy (default: the engine's own default)\n"
            "pace:\n"
            "  --speed S           max (default: as fast as possible), or S from 0.001 to\n"
            "                      1e9: a request starts at its time after the first one's\n"
            "                      divided by S (one stamped before the first: at once)\n"
            "  --requests N        replay the first N requests only (default: all)\n"
            "  --concurrency N     requests served at once, 1..%u (default 1), each by a\n"
            "                      thread taking the next request in trace order, as an\n"
            "                      engine serves a batch; a request then does not see the\n"
            "                      blocks of one still being served, so hits differ a little\n"
            "                      from kvtier sim's, which serves one at a time\n"
            "  --prefill-tokens-per-s X\n"
            "                      the recompute rate of the TTFT model, 1 to 1e12 (default\n"
            "                      %.0f, an assumed single-GPU prefill rate of an 8B model:\n"
            "                      set yours)\n"
"fleet (N engines sharing a cluster; docs/remote.md):\n"
            "  --instances N       deal the requests in turn to N engines (1..%u), each with\n"
            "                      its own DRAM of --capacity (no SSD tier): N separate\n"
            "                      caches, then with --remote the same N sharing a cluster;\n"
            "                      hit fractions of both, bytes published and loaded\n"
            "  --remote URL        redis://host:port[,host:port...] of a Redis Cluster (or one\n"
            "                      Redis); with no --instances, one engine. Keys are under\n"
            "                      --remote-prefix (default kvtreplay) and a fingerprint of\n"
            "                      this run, with a TTL of an hour\n"
            "  --remote-auth-file F  a file holding \"password\" or \"user password\" (a\n"
            "                      password in the URL is refused: it would be on the\n"
            "                      command line)\n"
            "  --remote-prefix P   key prefix (A-Z a-z 0-9 _ . -)\n"
            "  --remote-timeout-ms N  the most one call to the cluster may take (default 200)\n"
            "  --publish WHEN      put (default: every block stored), evict (when a cache\n"
            "                      drops it), reuse (once it is hit again on its engine)\n"
            "output:\n"
            "  --trace FILE        Chrome trace-event JSON of each request's calls and the\n"
            "                      engine's transfers (Perfetto, chrome://tracing)\n"
            "  --progress          a progress line on stderr even when it is not a terminal\n"
            "  --no-progress       none (default: a progress bar when stderr is a terminal)\n"
            "  --json              one JSON object on stdout; the text goes to stderr\n"
            "  -h, --help          this text\n"
            "\n"
            "presets:\n",
            REPLAY_MAX_CONCURRENCY, REPLAY_DEFAULT_PREFILL, REPLAY_MAX_INSTANCES);
    kvt_preset_list(f, "  ");
}

static const struct option replay_lo[] = {
    { "model", 1, 0, 'm' },    { "block-bytes", 1, 0, 'B' }, { "capacity", 1, 0, 'c' },
    { "dram", 1, 0, 'D' },     { "ssd", 1, 0, 'S' },         { "ssd-dir", 1, 0, 'd' },
    { "policy", 1, 0, 'P' },   { "speed", 1, 0, 's' },       { "requests", 1, 0, 'n' },
    { "concurrency", 1, 0, 'C' },
    { "prefill-tokens-per-s", 1, 0, 'f' },                   { "trace", 1, 0, 't' },
    { "progress", 0, 0, 'p' }, { "no-progress", 0, 0, 'q' }, { "json", 0, 0, 'j' },
    { "help", 0, 0, 'h' },     { "overwrite-ssd-dir", 0, 0, 'O' },
    { "instances", 1, 0, 'I' }, { "remote", 1, 0, 'R' },     { "remote-prefix", 1, 0, 'X' },
    { "remote-auth-file", 1, 0, 'A' },                       { "remote-timeout-ms", 1, 0, 'T' },
    { "publish", 1, 0, 'U' },
    { 0, 0, 0, 0 },
};

static const char *opt_name(int c)
{
    for (const struct option *l = replay_lo; l->name; l++)
        if (l->val == c)
            return l->name;
    return "?";
}

/* A capacity: a fraction in (0, 1] of the distinct blocks, or bytes (a
 * number above 1, or with a unit). 0 is "none", allowed for --ssd only. */
static int parse_cap(int c, const char *v, struct replay_cap *out)
{
    double d;
    uint64_t b;
    if (cli_parse_real(v, &d) == 0 && d <= 1) {
        if (d > 0) {
            *out = (struct replay_cap){ CAP_FRACTION, d, 0 };
            return 0;
        }
        if (c == 'S') {
            *out = (struct replay_cap){ CAP_BYTES, 0, 0 };
            return 0;
        }
    } else if (cli_parse_size(v, &b) == 0 && b > 0) {
        *out = (struct replay_cap){ CAP_BYTES, 0, b };
        return 0;
    }
    return cli_bad_value("replay", opt_name(c), v,
                         c == 'S' ? "a fraction of the distinct blocks in (0, 1], bytes such as "
                                    "512M, or 0 for no SSD tier"
                                  : "a fraction of the distinct blocks in (0, 1] or bytes such "
                                    "as 512M");
}

static int opt_value(int c, const char *v, struct replay_opts *o)
{
    switch (c) {
    case 'm':
        if (!(o->model = kvt_preset_find(v)))
            return cli_bad_value("replay", "model", v, "a preset name (see kvtier replay --help)");
        return 0;
    case 'B':
        if (cli_opt_size("replay", "block-bytes", v, 4096, 1ull << 30, &o->block_bytes))
            return -EINVAL;
        if (o->block_bytes % 4096)
            return cli_bad_value("replay", "block-bytes", v, "a multiple of 4096");
        o->block_given = true;
        return 0;
    case 'c': return parse_cap(c, v, &o->capacity);
    case 'D': return parse_cap(c, v, &o->dram);
    case 'S': return parse_cap(c, v, &o->ssd);
    case 'd':
    case 't':
    case 'P':
        if (cli_opt_path("replay", opt_name(c), v))
            return -EINVAL;
        *(c == 'd' ? &o->ssd_dir : c == 't' ? &o->trace_out : &o->policy) = v;
        return 0;
    case 's':
        if (!strcmp(v, "max")) {
            o->speed = 0;
            return 0;
        }
        if (cli_parse_real(v, &o->speed) || !(o->speed >= REPLAY_MIN_SPEED) ||
            o->speed > REPLAY_MAX_SPEED)
            return cli_bad_value("replay", "speed", v,
                                 "max, or a number from 0.001 (1000 times slower than the "
                                 "trace) to 1e9");
        return 0;
    case 'n': return cli_opt_count("replay", "requests", v, 1, UINT64_MAX, &o->requests);
    case 'C': {
        uint64_t n = 1;
        int rc = cli_opt_count("replay", "concurrency", v, 1, REPLAY_MAX_CONCURRENCY, &n);
        o->concurrency = (unsigned)n;
        return rc;
    }
    case 'f':
        return cli_opt_real("replay", opt_name(c), v, REPLAY_MIN_PREFILL, false, 1e12,
                            &o->prefill_tps);
    case 'p': o->progress = 1; return 0;
    case 'q': o->progress = 0; return 0;
    case 'j': o->json = true; return 0;
    case 'O': o->overwrite_ssd_dir = true; return 0;
    case 'I': {
        uint64_t n = 1;
        int rc = cli_opt_count("replay", "instances", v, 1, REPLAY_MAX_INSTANCES, &n);
        o->instances = (unsigned)n;
        return rc;
    }
    case 'R':
        if (strncmp(v, "redis://", 8) != 0)
            return cli_bad_value("replay", "remote", v, "redis://host:port[,host:port...]");
        if (strchr(v, '@'))
            return cli_bad_value("replay", "remote", "(not shown: it holds credentials)",
                                 "a URL without user or password: give them in "
                                 "--remote-auth-file");
        o->remote_url = v;
        return 0;
    case 'X':
    case 'A':
        if (cli_opt_path("replay", opt_name(c), v))
            return -EINVAL;
        *(c == 'X' ? &o->remote_prefix : &o->remote_auth_file) = v;
        return 0;
    case 'T': {
        uint64_t n = 0;
        int rc = cli_opt_count("replay", "remote-timeout-ms", v, 1, 600000, &n);
        o->remote_timeout_ms = (unsigned)n;
        return rc;
    }
    case 'U':
        if (!strcmp(v, "put"))
            o->publish = REPLAY_PUBLISH_PUT;
        else if (!strcmp(v, "evict"))
            o->publish = REPLAY_PUBLISH_EVICT;
        else if (!strcmp(v, "reuse"))
            o->publish = REPLAY_PUBLISH_REUSE;
        else
            return cli_bad_value("replay", "publish", v, "put, evict or reuse");
        return 0;
    default: return -EINVAL;
    }
}

#define SEEN(c) (seen & (1ull << ((c) - 'A')))

/* The fleet's options together: -EINVAL after a message. */
static int fleet_check(struct replay_opts *o, uint64_t seen)
{
    static const char single_only[] = "dtSCsO";
    bool fleet_only = SEEN('X') || SEEN('A') || SEEN('T') || SEEN('U');
    if (fleet_only && !o->remote_url) {
        cli_error("replay", 2, "--remote-prefix, --remote-auth-file, --remote-timeout-ms and "
                               "--publish need --remote");
        return -EINVAL;
    }
    if (o->remote_url && !o->instances)
        o->instances = 1;
    if (!o->instances)
        return 0;
    for (const char *p = single_only; *p; p++)
        if (SEEN(*p)) {
            cli_error("replay", 2, "--%s is not for --instances/--remote (their engines have "
                                   "DRAM only, one request at a time)", opt_name(*p));
            return -EINVAL;
        }
    if (o->dram.kind) {
        cli_error("replay", 2, "--dram is not for --instances: --capacity is each engine's DRAM");
        return -EINVAL;
    }
    if (!o->block_given)
        o->block_bytes = REPLAY_FLEET_BLOCK;
    return 0;
}

/* 0 to run, 1 after --help, -EINVAL after a message. */
static int replay_parse(int argc, char **argv, struct replay_opts *o)
{
    replay_opts_default(o);
    bool cap_given = false;
    uint64_t seen = 0; /* options given, by letter */
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", replay_lo, NULL)) != -1) {
        if (c == 'h') {
            replay_usage(stdout);
            return 1;
        }
        if (c == '?' || c == ':')
            return cli_getopt_error("replay", c, argv, replay_lo);
        if (opt_value(c, optarg, o))
            return -EINVAL;
        cap_given |= c == 'c';
        if (c >= 'A' && c <= 'z')
            seen |= 1ull << (c - 'A');
    }
    if (!cap_given && o->dram.kind && o->ssd.kind)
        o->capacity.kind = CAP_UNSET; /* --dram + --ssd is the capacity */
    if (cap_given && o->dram.kind && o->ssd.kind) {
        cli_error("replay", 2, "--capacity, --dram and --ssd: give two of them at most (the "
                               "capacity is DRAM + SSD)");
        return -EINVAL;
    }
    if (optind == argc) {
        cli_error("replay", 2, "no TRACE given (see kvtier replay --help)");
        return -EINVAL;
    }
    if (argc - optind > 1) {
        cli_error("replay", 2, "unexpected argument '%s'", argv[optind + 1]);
        return -EINVAL;
    }
    o->trace_path = argv[optind];
    if (cli_opt_path("replay", "TRACE", o->trace_path))
        return -EINVAL;
    return fleet_check(o, seen);
}

int replay_main(int argc, char **argv)
{
    struct replay_opts o;
    int rc = replay_parse(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    struct replay_result r;
    cli_stop_catch();
    if (o.instances) {
        rc = replay_fleet(&o);
        int stopped = cli_stop_end("replay");
        return stopped ? stopped : rc;
    }
    rc = replay_exec(&o, &r);
    int stopped = cli_stop_end("replay");
    if (stopped)
        return stopped;
    if (rc < 0)
        return rc == -EINVAL ? 2 : 1;
    replay_report_text(o.json ? stderr : stdout, &o, &r);
    if (o.json)
        replay_report_json(&o, &r);
    return rc ? 1 : 0;
}
