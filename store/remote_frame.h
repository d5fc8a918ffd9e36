/*
 * remote_frame.h — how a page is named and framed in the shared tier
 * (internal; store/remote_store.c and its fuzz target use it).
 *
 * A value is a 48-byte header followed by the page:
 *
 *   off size  field
 *     0    4  magic "KVR1"
 *     4    2  frame version (1)
 *     6    2  codec of the payload (KVT_CODEC_NONE today)
 *     8    8  model fingerprint
 *    16    8  key.id
 *    24    4  key.layer
 *    28    4  key.index
 *    32    4  raw length (the page's bytes)
 *    36    4  stored length (the payload's bytes)
 *    40    4  CRC32C of the header with this field 0, then the payload
 *    44    4  0 (reserved)
 *
 * little-endian. The key and the fingerprint are inside the checksum, so a
 * value copied under another key, written for another model, truncated, or
 * damaged in any byte reads as a miss. The key name carries the prefix and
 * the fingerprint as well, so that two models or deployments never even
 * meet on a key.
 */
#ifndef KVT_REMOTE_FRAME_H
#define KVT_REMOTE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "include/kvtier.h"

#define KVT_RFRAME_HDR 48
#define KVT_RFRAME_KEY_MAX 192  /* a key name's bytes at most (prefix included) */
#define KVT_RFRAME_PREFIX_MAX 64

/* Writes the key name "<prefix>:<fingerprint>:<id>:<layer>:<index>" (hex)
 * into buf and returns its length, or 0 if it does not fit in cap. */
size_t kvt_rframe_name(char *buf, size_t cap, const char *prefix, uint64_t fingerprint,
                       const kvt_key *k);

/* Fills hdr for the page of len bytes at page, stored as is. */
void kvt_rframe_header(uint8_t hdr[KVT_RFRAME_HDR], const kvt_key *k, uint64_t fingerprint,
                       const void *page, uint32_t len);

/* Checks the value of len bytes at val against key k, the fingerprint and
 * page_bytes. 0: the page is the page_bytes at val + KVT_RFRAME_HDR.
 * KVT_ECORRUPT for anything else (never reads past val + len). */
int kvt_rframe_check(const void *val, size_t len, const kvt_key *k, uint64_t fingerprint,
                     size_t page_bytes);

/* The same for a value read in two parts: its first KVT_RFRAME_HDR bytes at
 * hdr, the rest at page; len is the value's whole length. */
int kvt_rframe_check_parts(const void *hdr, const void *page, size_t len, const kvt_key *k,
                           uint64_t fingerprint, size_t page_bytes);

/* The same, given the CRC32C (seed 0) of the page's bytes instead of the
 * bytes (taken as they were copied in). */
int kvt_rframe_check_crc(const void *hdr, uint32_t page_crc, size_t len, const kvt_key *k,
                         uint64_t fingerprint, size_t page_bytes);

/* The prefix rule: 1..KVT_RFRAME_PREFIX_MAX bytes of [A-Za-z0-9_.-] (no
 * ':', no '{' or '}' that would pin every key to one cluster slot). */
int kvt_rframe_prefix_ok(const char *prefix);

#endif /* KVT_REMOTE_FRAME_H */
