/*
 * kvtier.c — the kvtier command: dispatch to subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "include/kvtier.h"
#include "tools/cli.h"

int bench_main(int argc, char **argv);
int plan_main(int argc, char **argv);
int inspect_main(int argc, char **argv);
int fsck_main(int argc, char **argv);
int sim_main(int argc, char **argv);
int run_main(int argc, char **argv);
int replay_main(int argc, char **argv);
int crashtest_main(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvtier <command> [options]\n"
            "\n"
            "kvtier keeps the KV cache of LLM decoding in HBM, pinned DRAM and SSD tiers.\n"
            "\n"
            "commands:\n"
            "  run           decode over the tiers with real attention, verified bit-exactly\n"
            "  bench hbm     DRAM<->HBM throughput through kvtier beside a raw copy baseline,\n"
            "                and acquire+release operations per second\n"
            "  bench ssd     DRAM<->SSD throughput through kvtier beside raw io_uring O_DIRECT,\n"
            "                and the codecs' ratio and speed on a bf16 page\n"
            "  bench remote URL  stores and loads on a Redis Cluster through kvtier's shared\n"
            "                tier beside raw pipelined hiredis\n"
            "  plan          KV sizing for a model shape over the tiers\n"
            "  inspect DIR   what an SSD spill directory holds: layout, index, disk usage\n"
            "  fsck DIR      check every stored page (CRC32C, decode); --repair drops bad ones\n"
            "  sim           replay an access trace per policy: bytes moved, hit ratio, stall\n"
            "  replay TRACE  drive the engine with a prefix-cache request trace (Mooncake's\n"
            "                JSONL): prefix hits per tier, load GB/s beside raw, every byte checked\n"
            "  crashtest     the crash loop: a persist=1 writer killed -9 at random, every key\n"
            "                checked after each reopen (flushed exact, flushed drops not undone)\n"
            "  version       print the library version\n"
            "\n"
            "Run 'kvtier <command> --help' for a command's options.\n");
}

static int run_command(int argc, char **argv)
{
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("kvtier %s\n", kvt_version_string());
        return 0;
    }
    if (!strcmp(cmd, "bench"))
        return bench_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan"))
        return plan_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect"))
        return inspect_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "fsck"))
        return fsck_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "run"))
        return run_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim"))
        return sim_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "replay"))
        return replay_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "crashtest"))
        return crashtest_main(argc - 1, argv + 1);
    cli_error(cmd, 2, "unknown command (see kvtier --help)");
    fputc('\n', stderr);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    cli_json_errors_begin(argc, argv);
    return cli_json_errors_end(run_command(argc, argv));
}
