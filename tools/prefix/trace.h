/*
 * trace.h — prefix-cache request traces (Mooncake's JSONL format), read once
 * and shared by `kvtier sim` and `kvtier replay`.
 *
 * One JSON object per line:
 *
 *   {"timestamp": 27482, "input_length": 6955, "output_length": 52,
 *    "hash_ids": [46, 47, ...]}
 *
 * timestamp: arrival in milliseconds (non-decreasing is not required);
 * hash_ids: the request's chain of prefix block hashes, one per block of
 * block_tokens input tokens, shallowest first (required, may be empty),
 * each below 2^63 (jansson's integers are signed 64-bit); input_length /
 * output_length: tokens (optional; input defaults to blocks x
 * block_tokens). Other keys are skipped, whatever their value, but the line
 * must be valid JSON (UTF-8, numbers jansson holds, no key twice in one
 * object). Blank lines are skipped.
 */
#ifndef KVT_PREFIX_TRACE_H
#define KVT_PREFIX_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PFX_BLOCK_TOKENS 512          /* Mooncake's block: 512 tokens */
#define PFX_MAX_REFS (256ull << 20)   /* block references in one trace, at most */
#define PFX_MAX_LINE (64u << 20)      /* bytes in one line, at most */

struct pfx_req {
    uint64_t t_ms;                    /* arrival, ms */
    uint32_t in_tokens, out_tokens;
    uint32_t n;                       /* blocks in its chain */
    size_t first;                     /* its first block in hash[] / block[] */
    uint32_t line;                    /* line in the file (1-based) */
};

struct pfx_trace {
    struct pfx_req *req;
    size_t n_req;
    uint64_t *hash;                   /* every block reference, request by request */
    uint32_t *block;                  /* the same, as dense ids 0 .. distinct-1 in
                                         order of first appearance */
    size_t n_hash;
    uint32_t distinct;                /* distinct hash ids */
    uint32_t block_tokens;            /* PFX_BLOCK_TOKENS */
};

/* Reads a trace from f into *t (initialised here). Returns 0; -EINVAL for a
 * malformed trace (err says "line N: what is wrong"), -E2BIG past
 * PFX_MAX_REFS references, PFX_MAX_LINE bytes in a line or 2^32 - 1 lines
 * (err names the line), -ENOMEM, -EIO. A line is never held past
 * PFX_MAX_LINE bytes. On error *t is empty. The caller frees t with
 * pfx_trace_free. */
int pfx_trace_read(FILE *f, struct pfx_trace *t, char *err, size_t errlen);
/* The same from a buffer (no NUL needed), line by line exactly as
 * pfx_trace_read: the fuzzers' entry. */
int pfx_trace_parse(const char *buf, size_t len, struct pfx_trace *t, char *err, size_t errlen);
void pfx_trace_free(struct pfx_trace *t);

#endif /* KVT_PREFIX_TRACE_H */
