/*
 * fuzz.h — what the libFuzzer targets of tests/fuzz share: a scratch
 * directory of their own, a byte reader over the input, a reference CRC32C,
 * and the check that stops the fuzzer on a broken rule.
 *
 * A target calls fuzz_check(cond, what) for every rule it checks: a false
 * one prints what and aborts, which libFuzzer reports as a crash and saves
 * the input (artifact_prefix). Crashes, hangs (-timeout) and memory past
 * -rss_limit_mb are found by libFuzzer and the sanitizers themselves.
 */
#ifndef KVT_FUZZ_H
#define KVT_FUZZ_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

#define fuzz_check(cond, what)                                                                    \
    do {                                                                                          \
        if (!(cond))                                                                              \
            fuzz_broken(__FILE__, __LINE__, what, #cond);                                         \
    } while (0)

/* The rule goes to stderr and, as the report's SUMMARY line, to wherever
 * the sanitizers report: with -close_fd_mask=2 the target's stderr is
 * closed and only that one is seen. */
__attribute__((noreturn)) static inline void fuzz_broken(const char *file, int line,
                                                         const char *what, const char *cond)
{
    char msg[512];
    snprintf(msg, sizeof msg, "fuzz: rule broken at %s:%d: %s (%s)", file, line, what, cond);
    fprintf(stderr, "%s\n", msg);
    __sanitizer_report_error_summary(msg);
    abort();
}

/* A scratch directory made once per process under $TMPDIR, else /dev/shm
 * (memory: the index target makes an LMDB file per input, which a disk
 * makes ~100 times slower), else /tmp; removed at exit; the caller owns its
 * contents. Aborts when none can be made: a target without it tests nothing. */
static char fuzz_dir_path[256];

static void fuzz_dir_remove(void);

static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0])
        return fuzz_dir_path;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/kvt-fuzz-XXXXXX", tmp);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_dir_remove);
    return fuzz_dir_path;
}

/* Removes dir/name for each name given (a file, or an empty directory);
 * a missing one is fine. */
static inline void fuzz_unlink(const char *dir, const char *const *names, size_t n)
{
    char p[512];
    for (size_t i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (unlink(p) != 0 && errno == EISDIR)
            rmdir(p);
    }
}

/* Writes exactly n bytes to dir/name (created or truncated). */
static inline void fuzz_write_file(const char *dir, const char *name, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    fuzz_check(fd >= 0, "cannot create a scratch file");
    const uint8_t *b = data;
    while (n) {
        ssize_t w = write(fd, b, n);
        fuzz_check(w > 0, "cannot write a scratch file");
        b += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* The input, read front to back; past its end every read gives zeros. */
struct fuzz_in {
    const uint8_t *p;
    size_t n;
};

static inline void fuzz_take(struct fuzz_in *in, void *out, size_t n)
{
    size_t k = n < in->n ? n : in->n;
    memcpy(out, in->p, k);
    memset((uint8_t *)out + k, 0, n - k);
    in->p += k;
    in->n -= k;
}

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
    uint8_t v;
    fuzz_take(in, &v, 1);
    return v;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
    uint8_t b[4];
    fuzz_take(in, b, 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t fuzz_u64(struct fuzz_in *in)
{
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

/* CRC32C one bit at a time, straight from the polynomial (0x82F63B78,
 * reflected): slow, and nothing in common with io/crc32c.c's instruction,
 * table and three-chain paths, which it checks. */
static inline uint32_t fuzz_crc32c_ref(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

/* Removes what the targets leave in the scratch directory (at most two
 * levels: the index fuzzer's <dir>/spill/index/data.mdb), then it. */
static void fuzz_dir_remove(void)
{
    static const char *const names[] = { "spill/index/data.mdb", "spill/index/lock.mdb",
                                         "spill/index", "spill/KVTIER", "spill/LOCK", "spill",
                                         "KVTIER", "trace" };
    if (!fuzz_dir_path[0])
        return;
    fuzz_unlink(fuzz_dir_path, names, sizeof names / sizeof names[0]);
    rmdir(fuzz_dir_path);
}

#endif /* KVT_FUZZ_H */
