/* Fast scanner for the traceEvents array of a Kineto Chrome trace (tracekit's optional C decoder).
 *
 * scan(buffer, start, stop, bare) walks one JSON array of events ('[' ... ']', or the text between the
 * brackets) and fills columns directly, without a
 * Python object per event. It keeps exactly the keys that tracekit/parse/decode.py's _Event/_Args structs
 * keep and skips everything else with a strict JSON validator. It reads these shapes itself:
 *
 *   - ph, cat, name, args.{cuda_sync_kind, Collective name, Process Group Ranks, name}: a JSON string or
 *     null → dictionary code (int32, -1 for null/missing) into a per-column list of unique strings;
 *   - args.Input Dims: a JSON array → its text exactly as written (bytes of the value) into a string
 *     column's dictionary the same way; null → -1; anything else declines the event (msgspec keeps the
 *     value's text as msgspec.Raw: the same bytes);
 *   - pid, tid, id and the integer args: a JSON integer in int64 range (else its text, below), a string,
 *     null, or true/false/an array/an object (null: msgspec's path makes those null too);
 *   - ts, dur: a JSON number without exponent, with any number of decimals (up to MAX_DECIMALS) → the
 *     value × 1000 rounded half to even to an integer, as an int64 ("milli" units; µs × 1000 = ns);
 *     an integer too large for that (beyond 2**63 / 1000: a trace in ns) → the integer itself;
 *     any other number, or a string → its text (below); true/false/an array/an object → "not a number";
 *   - args: an object or null.
 *
 * Per value: a number it does not read itself (an exponent, too many digits, beyond int64) or a string
 * in a numeric column is handed over as text (valid = 2), and `fast.py` converts it with the msgspec
 * path's own functions. Per event: anything else inside an event (a value of another type in a string
 * column, args that are not an object, a key with an escape, a duplicated kept key, nesting deeper than
 * MAX_DEPTH, an item that is not an object) makes the scanner validate the event's text, leave its row
 * empty and list it as declined; `fast.py` decodes those few events with msgspec and fills their rows.
 * Only text that is not valid JSON (as msgspec sees it: a lone surrogate and invalid UTF-8 are not)
 * makes scan() return None, and the caller decodes the whole range with msgspec, which gives the
 * precise error. So this file only has to be right about what it accepts, never complete.
 *
 * Returns None, or a tuple (n, cap, block, uniques, declined):
 *   n        number of events (JSON null items are skipped, as the msgspec path does; declined items
 *            count, their rows are empty)
 *   cap      the rows each column of `block` has room for (n <= cap <= 4n/3; rows n.. are not events)
 *   block    bytes, the columns the scanner wrote its rows into (no copy: fast.py views them in place):
 *            ints   N_INT columns of cap int64, one after the other (order: INT_FIELDS below); a value
 *                   whose valid is 0 is undefined (never read: the presence mask says null)
 *            codes  then N_STR columns of cap int32 (-1 = null)
 *            valid  then N_INT columns of cap uint8 (0 = null, 1 = integer value, 2 = text: the value is
 *                   its code in uniques[N_STR], a JSON string or the text of a number, which the caller
 *                   converts as msgspec's path does; 3 = true/false/an array/an object where a time is
 *                   kept; 4 = a time that is an integer too large for value × 1000: the value itself)
 *   uniques  list of N_STR + 1 lists of str (the dictionary of each string column, in first-seen order,
 *            then the texts found in integer and time columns)
 *   declined bytes: int64 triples (row, start, end): the events left to msgspec, buffer[start:end]
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The source's hash (setup.py; tracekit.native compares it with this file before running the build). */
#ifndef SOURCE_SHA
#define SOURCE_SHA ""
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The rare shapes go out of line (COLD); the readers the hot path calls stay inlined into it even
 * though the cold paths call them too (INLINE): measured, read_int out of line slowed the scan. */
#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))
#define INLINE inline __attribute__((always_inline))
#else
#define COLD
#define INLINE inline
#endif

#define MAX_DEPTH 256    /* deeper nesting: the event is declined (msgspec's path decides about it) */
#define MAX_DECIMALS 40  /* more: the time is kept as text (Decimal's 60 digits then round it once) */

/* Integer columns. Keep in sync with _fast.py INT_FIELDS. */
enum {
    I_PID, I_TID, I_TS, I_DUR, I_ID,
    I_DEVICE, I_STREAM, I_CORRELATION, I_EXTERNAL_ID, I_EXTERNAL_ID_OLD, I_SEQ, I_FWD_TID, I_BYTES,
    I_WAIT_STREAM, I_PY_ID, I_PY_PARENT, I_MSG_NELEMS, I_GROUP_SIZE, I_MEM_BYTES, I_TOTAL_ALLOCATED,
    I_TOTAL_RESERVED, I_DEVICE_ID, I_ADDR,
    N_INT
};
/* String columns. Keep in sync with _fast.py STR_FIELDS. */
enum { S_PH, S_CAT, S_NAME, S_SYNC_KIND, S_COLLECTIVE, S_PG_RANKS, S_LABEL, S_INPUT_DIMS, N_STR };

enum { K_SKIP = 0, K_INT, K_TIME, K_STR, K_ARGS, K_RAW };

typedef struct {
    const char *key;
    int kind;
    int col;
    size_t len; /* strlen(key), filled in at import */
} Field;

static Field TOP_FIELDS[] = {
    {"ph", K_STR, S_PH},     {"cat", K_STR, S_CAT},  {"name", K_STR, S_NAME}, {"pid", K_INT, I_PID},
    {"tid", K_INT, I_TID},   {"ts", K_TIME, I_TS},   {"dur", K_TIME, I_DUR},  {"id", K_INT, I_ID},
    {"args", K_ARGS, 0},
};
#define N_TOP ((int)(sizeof(TOP_FIELDS) / sizeof(TOP_FIELDS[0])))

static Field ARG_FIELDS[] = {
    {"device", K_INT, I_DEVICE},
    {"stream", K_INT, I_STREAM},
    {"correlation", K_INT, I_CORRELATION},
    {"External id", K_INT, I_EXTERNAL_ID},
    {"external id", K_INT, I_EXTERNAL_ID_OLD},
    {"Sequence number", K_INT, I_SEQ},
    {"Fwd thread id", K_INT, I_FWD_TID},
    {"bytes", K_INT, I_BYTES},
    {"cuda_sync_kind", K_STR, S_SYNC_KIND},
    {"wait_on_stream", K_INT, I_WAIT_STREAM},
    {"Python id", K_INT, I_PY_ID},
    {"Python parent id", K_INT, I_PY_PARENT},
    {"Collective name", K_STR, S_COLLECTIVE},
    {"In msg nelems", K_INT, I_MSG_NELEMS},
    {"Group size", K_INT, I_GROUP_SIZE},
    {"Process Group Ranks", K_STR, S_PG_RANKS},
    {"name", K_STR, S_LABEL},
    {"Bytes", K_INT, I_MEM_BYTES},
    {"Total Allocated", K_INT, I_TOTAL_ALLOCATED},
    {"Total Reserved", K_INT, I_TOTAL_RESERVED},
    {"Device Id", K_INT, I_DEVICE_ID},
    {"Addr", K_INT, I_ADDR},
    {"Input Dims", K_RAW, S_INPUT_DIMS},
};
#define N_ARGS ((int)(sizeof(ARG_FIELDS) / sizeof(ARG_FIELDS[0])))

/* Key lookup: the key's bytes as four 64-bit words, zero-padded (keys are shorter than MAX_KEY), and a
 * table of KEY_SLOTS entries per object kind, indexed by a multiplicative hash of (first word, length)
 * that is collision-free over the kept keys (the multiplier is chosen at import). A key is kept iff its
 * slot holds a field of the same length and the same four words: one load, one multiply, four compares. */
#define MAX_KEY 32
#define KEY_BITS 6
#define KEY_SLOTS (1 << KEY_BITS)

typedef struct {
    uint64_t w[4];
    size_t len;
    int field; /* -1: empty (then len is MAX_KEY, which no key that is looked up has) */
} KeySlot;

static KeySlot key_slots[2][KEY_SLOTS];
static uint64_t key_mult[2];

static inline unsigned key_hash(uint64_t w0, size_t n, uint64_t mult) {
    return (unsigned)(((w0 ^ (uint64_t)n) * mult) >> (64 - KEY_BITS));
}

/* The key k[0:n] (n < MAX_KEY) as zero-padded words; reads 32 bytes when that many are there. */
static inline void key_words(const unsigned char *k, size_t n, const unsigned char *end, uint64_t w[4]) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end - k >= 32) {
        memcpy(w, k, 32);
        for (size_t j = 0; j < 4; j++) {
            size_t have = n > 8 * j ? n - 8 * j : 0;
            if (have < 8) w[j] &= have ? (~(uint64_t)0 >> (64 - 8 * have)) : 0;
        }
        return;
    }
#endif
    (void)end;
    unsigned char b[32] = {0};
    memcpy(b, k, n);
    memcpy(w, b, 32);
}

static int index_fields(void) {
    for (int a = 0; a < 2; a++) {
        Field *fields = a ? ARG_FIELDS : TOP_FIELDS;
        int n = a ? N_ARGS : N_TOP;
        if (n > 32) return -1; /* read_object's seen mask */
        uint64_t mult = 0x9E3779B97F4A7C15ULL;
        int ok = 0;
        for (int attempt = 0; attempt < 1000 && !ok; attempt++) {
            mult = mult * 6364136223846793005ULL + 1442695040888963407ULL;
            mult |= 1;
            for (int j = 0; j < KEY_SLOTS; j++) { /* empty: a length no key read has */
                memset(&key_slots[a][j], 0, sizeof(KeySlot));
                key_slots[a][j].len = MAX_KEY;
                key_slots[a][j].field = -1;
            }
            ok = 1;
            for (int i = 0; i < n && ok; i++) {
                size_t len = strlen(fields[i].key);
                fields[i].len = len;
                if (len == 0 || len >= MAX_KEY) return -1;
                uint64_t w[4];
                key_words((const unsigned char *)fields[i].key, len, (const unsigned char *)fields[i].key, w);
                KeySlot *sl = &key_slots[a][key_hash(w[0], len, mult)];
                if (sl->field >= 0) {
                    ok = 0;
                    break;
                }
                memcpy(sl->w, w, sizeof(w));
                sl->len = len;
                sl->field = i;
            }
        }
        if (!ok) return -1;
        key_mult[a] = mult;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* A string dictionary: open addressing over (hash, offset, length) into a byte arena. */

#define DICT_RECENT 64

typedef struct {
    uint64_t hash;
    size_t off;
    size_t len;
    int32_t code; /* -1: empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t cap; /* power of two */
    size_t count;
    char *arena;
    size_t arena_len, arena_cap;
    size_t *offs; /* offs[code], lens[code] */
    size_t *lens;
    /* A direct-mapped cache of recent codes, indexed by (length, first and last 8 bytes): a string seen
       recently (names repeat: "cudaLaunchKernel", the same long kernel name) is found by one comparison
       of its bytes, without hashing all of them. A hit is always checked against the stored text. */
    int32_t recent[DICT_RECENT];
    /* The last four codes read by read_string_code's plain path (ASCII without '"', '\\' or controls):
       an input string whose bytes equal one of them, followed by '"', is that string. */
    int32_t last[4];
} Dict;

static int dict_init(Dict *d) {
    memset(d, 0, sizeof(*d));
    d->cap = 256;
    d->slots = malloc(d->cap * sizeof(Slot));
    d->arena_cap = 4096;
    d->arena = malloc(d->arena_cap);
    d->offs = malloc(d->cap / 2 * sizeof(size_t));
    d->lens = malloc(d->cap / 2 * sizeof(size_t));
    if (!d->slots || !d->arena || !d->offs || !d->lens) return -1;
    for (size_t i = 0; i < d->cap; i++) d->slots[i].code = -1;
    for (size_t i = 0; i < DICT_RECENT; i++) d->recent[i] = -1;
    d->last[0] = d->last[1] = d->last[2] = d->last[3] = -1;
    return 0;
}

static void dict_free(Dict *d) {
    free(d->slots);
    free(d->arena);
    free(d->offs);
    free(d->lens);
}

static inline uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int dict_grow(Dict *d) {
    size_t ncap = d->cap * 2;
    Slot *ns = malloc(ncap * sizeof(Slot));
    size_t *noffs = realloc(d->offs, ncap / 2 * sizeof(size_t));
    if (noffs) d->offs = noffs;
    size_t *nlens = realloc(d->lens, ncap / 2 * sizeof(size_t));
    if (nlens) d->lens = nlens;
    if (!ns || !noffs || !nlens) {
        free(ns);
        return -1;
    }
    for (size_t i = 0; i < ncap; i++) ns[i].code = -1;
    for (size_t i = 0; i < d->cap; i++) {
        if (d->slots[i].code < 0) continue;
        size_t j = d->slots[i].hash & (ncap - 1);
        while (ns[j].code >= 0) j = (j + 1) & (ncap - 1);
        ns[j] = d->slots[i];
    }
    free(d->slots);
    d->slots = ns;
    d->cap = ncap;
    return 0;
}

static inline unsigned recent_index(const char *s, size_t n) {
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
    } else {
        memcpy(&a, s, n);
    }
    return (unsigned)((((a * 0x9E3779B97F4A7C15ULL) ^ b ^ n) * 0xFF51AFD7ED558CCDULL) >> 58); /* 6 bits */
}

static int32_t dict_insert(Dict *d, const char *s, size_t n);

/* The code of the string s[0:n]; adds it when new. -1 on memory error. */
static inline int32_t dict_code(Dict *d, const char *s, size_t n) {
    unsigned r = recent_index(s, n);
    int32_t c = d->recent[r];
    if (c >= 0 && d->lens[c] == n && memcmp(d->arena + d->offs[c], s, n) == 0) return c;
    c = dict_insert(d, s, n);
    d->recent[r] = c;
    return c;
}

/* dict_code without the cache: the hash table lookup, adding the string when new. */
static int32_t dict_insert(Dict *d, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (d->cap - 1);
    while (d->slots[j].code >= 0) {
        Slot *sl = &d->slots[j];
        if (sl->hash == h && sl->len == n && memcmp(d->arena + sl->off, s, n) == 0) return sl->code;
        j = (j + 1) & (d->cap - 1);
    }
    if (d->count >= (size_t)INT32_MAX - 1) return -1;
    if (d->arena_len + n > d->arena_cap) {
        size_t nc = d->arena_cap;
        while (d->arena_len + n > nc) nc *= 2;
        char *na = realloc(d->arena, nc);
        if (!na) return -1;
        d->arena = na;
        d->arena_cap = nc;
    }
    memcpy(d->arena + d->arena_len, s, n);
    int32_t code = (int32_t)d->count;
    d->slots[j].hash = h;
    d->slots[j].off = d->arena_len;
    d->slots[j].len = n;
    d->slots[j].code = code;
    d->offs[code] = d->arena_len;
    d->lens[code] = n;
    d->arena_len += n;
    d->count++;
    if (d->count * 2 >= d->cap && dict_grow(d) < 0) return -1;
    return code;
}

/* ------------------------------------------------------------------------------------------------ */
/* The scanner state */

/* A key expected after a given key (the common layout: events of one kind repeat their keys in one
 * order; two kinds of events interleave, so the last two keys seen after it are tried): the bytes from the
 * end of the previous value (or the '{') to its value (`, "cat": `, at most TPL_BYTES), as words and masks. */
#define TPL_WORDS 6
#define TPL_BYTES (8 * TPL_WORDS)

typedef struct {
    uint64_t t[TPL_WORDS], m[TPL_WORDS]; /* an empty entry never matches: t[0] = 1, m = 0 */
    size_t tlen;
    int field; /* the kept field, or -1 */
    unsigned slot; /* the key's own index for the next prediction */
} Pred;
#define PRED_START KEY_SLOTS      /* before the first key of an object */
#define PRED_LONG (KEY_SLOTS + 1) /* after a key of MAX_KEY bytes or more */

typedef struct {
    const unsigned char *p, *end;
    size_t n, cap;
    Pred pred[2][KEY_SLOTS + 2][2]; /* [args?][previous key's slot][the two last seen] */
    /* The output columns, cap cells each, written in place. Rows [0, cleared) hold null (valid 0 / code
       -1) or a value: the scanner clears ZERO_ROWS rows ahead of the one it reads (a block that stays in
       cache until its events are written), so an event writes only its own fields. The int64 cells of a
       null are not cleared (3/4 of the bytes: the presence is in `valid`). */
    PyObject *first; /* the first block: a bytes object made before the scan, returned as it is */
    char *block;     /* a larger block malloc'd when the first one filled up (NULL until then) */
    int64_t *ints[N_INT];
    uint8_t *valid[N_INT];
    int32_t *codes[N_STR];
    size_t cleared;
    Dict dicts[N_STR];
    Dict intstr; /* strings found where an integer is kept (pid "Spans"): valid = 2, value = code */
    char *scratch; /* decoded text of a kept string with escapes */
    size_t scratch_cap;
    int depth;
    const unsigned char *base; /* the buffer's start: declined offsets are relative to it */
    int64_t *declined;         /* (row, start, end) per declined event */
    size_t n_declined, declined_cap;
    unsigned char *stack; /* skip_any's open containers */
    size_t stack_cap;
} Scan;

#define FAIL (-1)

static inline void skip_ws(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    if (p < end && *p > ' ') return; /* the common case: no whitespace (all of it is <= ' ') */
    if (end - p >= 2 && *p == ' ' && p[1] > ' ') { /* the next: one space (", " and ": ") */
        s->p = p + 1;
        return;
    }
#ifdef __SSE2__
    /* indentation of pretty-printed traces: runs of spaces after a newline */
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'),
                  tab = _mm_set1_epi8('\t');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(m) & 0xFFFFu;
        if (other) {
            s->p = p + __builtin_ctz(other);
            return;
        }
        p += 16;
    }
#endif
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    s->p = p;
}

static inline int expect_lit(Scan *s, const char *lit, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) return FAIL;
    s->p += n;
    return 0;
}

/* Length of a valid UTF-8 sequence starting at p (first byte >= 0x80), or 0 if invalid. */
static inline size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    size_t need;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < need + 1) return 0;
    for (size_t i = 1; i <= need; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
    if (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
    return need + 1;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static inline int read_u4(const unsigned char *p, const unsigned char *end, uint32_t *out) {
    if (end - p < 4) return FAIL;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return FAIL;
        v = (v << 4) | (uint32_t)h;
    }
    *out = v;
    return 0;
}

/* A \\uXXXX escape at p (p[0] is the backslash): its code point in *cp and its length (6, or 12 for a
 * surrogate pair written as two escapes), or FAIL (a lone surrogate: msgspec rejects it too). */
static inline int read_escape(const unsigned char *p, const unsigned char *end, uint32_t *cp) {
    uint32_t u, lo;
    if (read_u4(p + 2, end, &u) < 0) return FAIL;
    if (u < 0xD800 || u > 0xDFFF) {
        *cp = u;
        return 6;
    }
    if (u > 0xDBFF || end - p < 12 || p[6] != '\\' || p[7] != 'u' || read_u4(p + 8, end, &lo) < 0 || lo < 0xDC00 ||
        lo > 0xDFFF)
        return FAIL;
    *cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    return 12;
}

/* The first byte at or after p that is '"', '\\', a control character or non-ASCII (or end). */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        /* signed compare: bytes >= 0x80 are negative, so "< 0x20" catches them and the controls */
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                 _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(m);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
    return p;
}

/* Skip a string (s->p just past the opening quote), validating it strictly. */
static int skip_string(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    while (p < end) {
        p = plain_run(p, end);
        if (p >= end) break;
        unsigned char c = *p;
        if (c == '"') {
            s->p = p + 1;
            return 0;
        }
        if (c < 0x20) return FAIL;
        if (c == '\\') {
            if (end - p < 2) return FAIL;
            unsigned char e = p[1];
            if (e == 'u') {
                uint32_t u;
                int n = read_escape(p, end, &u);
                if (n < 0) return FAIL;
                p += n;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' && e != 't')
                return FAIL;
            p += 2;
            continue;
        }
        if (c >= 0x80) {
            size_t k = utf8_seq(p, end);
            if (!k) return FAIL;
            p += k;
            continue;
        }
        p++;
    }
    return FAIL;
}

static int ensure_scratch(Scan *s, size_t n) {
    if (n <= s->scratch_cap) return 0;
    size_t nc = s->scratch_cap ? s->scratch_cap : 256;
    while (nc < n) nc *= 2;
    char *ns = realloc(s->scratch, nc);
    if (!ns) return FAIL;
    s->scratch = ns;
    s->scratch_cap = nc;
    return 0;
}

/* A kept string value (s->p just past the opening quote) → its dictionary code in d. */
static int read_string_code(Scan *s, Dict *d, int32_t *code) {
    const unsigned char *start = s->p, *end = s->end;
    for (int i = 0; i < 4; i++) { /* the same string as one of the last four: no scan, no hash */
        int32_t c = d->last[i];
        if (c < 0) break;
        size_t n = d->lens[c];
        if ((size_t)(end - start) > n && start[n] == '"' && memcmp(start, d->arena + d->offs[c], n) == 0) {
            *code = c;
            s->p = start + n + 1;
            return 0;
        }
    }
    const unsigned char *p = plain_run(start, end);
    if (p < end && *p == '"') {
        int32_t c = dict_code(d, (const char *)start, (size_t)(p - start));
        if (c < 0) return FAIL;
        *code = c;
        s->p = p + 1;
        d->last[3] = d->last[2];
        d->last[2] = d->last[1];
        d->last[1] = d->last[0];
        d->last[0] = c;
        return 0;
    }
    /* Escapes or non-ASCII: decode into the scratch buffer. The decoded text is never longer than the
       escaped text. */
    const unsigned char *q = start;
    /* find the closing quote first to size the scratch buffer */
    s->p = start;
    if (skip_string(s) < 0) return FAIL;
    const unsigned char *close = s->p - 1;
    if (ensure_scratch(s, (size_t)(close - start) + 4) < 0) return FAIL;
    char *o = s->scratch;
    while (q < close) {
        unsigned char c = *q;
        if (c == '\\') {
            unsigned char e = q[1];
            switch (e) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '/': *o++ = '/'; break;
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                uint32_t u;
                int n = read_escape(q, close, &u);
                if (n < 0) return FAIL;
                if (u < 0x80) {
                    *o++ = (char)u;
                } else if (u < 0x800) {
                    *o++ = (char)(0xC0 | (u >> 6));
                    *o++ = (char)(0x80 | (u & 0x3F));
                } else if (u < 0x10000) {
                    *o++ = (char)(0xE0 | (u >> 12));
                    *o++ = (char)(0x80 | ((u >> 6) & 0x3F));
                    *o++ = (char)(0x80 | (u & 0x3F));
                } else {
                    *o++ = (char)(0xF0 | (u >> 18));
                    *o++ = (char)(0x80 | ((u >> 12) & 0x3F));
                    *o++ = (char)(0x80 | ((u >> 6) & 0x3F));
                    *o++ = (char)(0x80 | (u & 0x3F));
                }
                q += n;
                continue;
            }
            default: return FAIL;
            }
            q += 2;
            continue;
        }
        *o++ = (char)c; /* UTF-8 already validated by skip_string */
        q++;
    }
    int32_t cd = dict_code(d, s->scratch, (size_t)(o - s->scratch));
    if (cd < 0) return FAIL;
    *code = cd;
    return 0;
}

/* Skip a JSON number, strictly (RFC 8259 grammar). */
static INLINE int skip_number(Scan *s) {
    const unsigned char *p = s->p, *end = s->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return FAIL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return FAIL;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return FAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return FAIL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    return 0;
}

static int skip_value(Scan *s);

static int skip_container(Scan *s, unsigned char close, int object) {
    if (++s->depth > MAX_DEPTH) return FAIL;
    s->p++; /* the opening bracket */
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        if (object) {
            if (s->p >= s->end || *s->p != '"') return FAIL;
            s->p++;
            if (skip_string(s) < 0) return FAIL;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return FAIL;
            s->p++;
            skip_ws(s);
        }
        if (skip_value(s) < 0) return FAIL;
        skip_ws(s);
        if (s->p >= s->end) return FAIL;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == close) {
            s->p++;
            s->depth--;
            return 0;
        }
        return FAIL;
    }
}

static int skip_value(Scan *s) {
    if (s->p >= s->end) return FAIL;
    switch (*s->p) {
    case '"': s->p++; return skip_string(s);
    case '{': return skip_container(s, '}', 1);
    case '[': return skip_container(s, ']', 0);
    case 't': return expect_lit(s, "true", 4);
    case 'f': return expect_lit(s, "false", 5);
    case 'n': return expect_lit(s, "null", 4);
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) return skip_number(s);
        return FAIL;
    }
}

/* After a number: the next byte must end it (whitespace, ',', '}', ']'). */
static inline int number_ends(Scan *s) {
    if (s->p >= s->end) return 0;
    unsigned char c = *s->p;
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR_DIGITS 1
/* How many of the 8 bytes of w (little-endian: the first byte is the lowest) are ASCII digits before
 * the first non-digit. A byte's high bit in (b - '0') | (b + 0x46) is set iff b is not a digit; borrows and
 * carries only move to later bytes, so the first non-digit's flag is exact. */
static inline unsigned leading_digits(uint64_t w) {
    uint64_t nd = ((w - 0x3030303030303030ULL) | (w + 0x4646464646464646ULL)) & 0x8080808080808080ULL;
    return nd ? (unsigned)__builtin_ctzll(nd) >> 3 : 8;
}
static const uint64_t POW10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
/* The value of 8 ASCII digits (the first byte is the most significant digit). */
static inline uint64_t parse_eight(uint64_t w) {
    w = (w & 0x0F0F0F0F0F0F0F0FULL) * 2561 >> 8;
    w = (w & 0x00FF00FF00FF00FFULL) * 6553601 >> 16;
    return (w & 0x0000FFFF0000FFFFULL) * 42949672960001ULL >> 32;
}
#endif

/* The integer part of a JSON number ("0" or [1-9][0-9]*) at p, at most `limit`: its value in *v and the
 * position after it, or NULL (not a number, over the limit). Up to 19 digits fit in uint64 without
 * overflow; more are always over the limit (limit <= INT64_MAX < 10^19). */
static inline const unsigned char *int_part(const unsigned char *p, const unsigned char *end, uint64_t limit,
                                            uint64_t *v) {
    *v = 0;
    if (p >= end) return NULL;
    if (*p == '0') return p + 1;
    if ((unsigned)(*p - '1') > 8) return NULL;
    const unsigned char *start = p;
    uint64_t x = 0;
#ifdef SWAR_DIGITS
    while (end - p >= 8) { /* 8 bytes at a time: the digits among them, up to the first non-digit */
        uint64_t w;
        memcpy(&w, p, 8);
        unsigned nd = leading_digits(w);
        if (nd == 0) goto done;
        /* shifted up, the digits are preceded by zero bytes: leading zeros for parse_eight */
        x = x * POW10[nd] + parse_eight(w << (8 * (8 - nd))); /* wraps only past 19 digits: rejected */
        p += nd;
        if (nd < 8) goto done;
        if (p - start > 19) return NULL;
    }
#endif
    while (p < end && (unsigned)(*p - '0') <= 9) {
        x = x * 10 + (uint64_t)(*p - '0');
        p++;
    }
#ifdef SWAR_DIGITS
done:
#endif
    if (p - start > 19 || x > limit) return NULL;
    *v = x;
    return p;
}

/* A JSON integer in int64 range (magnitude <= INT64_MAX). */
static INLINE int read_int(Scan *s, int64_t *out) {
    const unsigned char *p = s->p, *end = s->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t v;
    p = int_part(p, end, (uint64_t)INT64_MAX, &v);
    if (!p) return FAIL;
    s->p = p;
    if (!number_ends(s)) return FAIL; /* a fraction, an exponent or garbage */
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* A JSON number with at most three decimals and no exponent → value × 1000, exactly. Anything else
 * (more decimals, an exponent, beyond int64, not a number) is FAIL here and read by read_time_other. */
static INLINE int read_milli(Scan *s, int64_t *out) {
    const unsigned char *p = s->p, *end = s->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t v;
    p = int_part(p, end, (uint64_t)INT64_MAX / 1000, &v);
    if (!p) return FAIL;
    uint64_t frac = 0;
    int nd = 0;
    if (p < end && *p == '.') {
        p++;
#ifdef SWAR_DIGITS
        if (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            unsigned k = leading_digits(w);
            if (k == 0 || k > 3) return FAIL;
            frac = parse_eight(w << (8 * (8 - k))) * POW10[3 - k];
            p += k;
            goto fraction_done;
        }
#endif
        while (p < end && *p >= '0' && *p <= '9') {
            if (nd == 3) return FAIL;
            frac = frac * 10 + (uint64_t)(*p - '0');
            nd++;
            p++;
        }
        if (nd == 0) return FAIL;
    }
    while (nd < 3) {
        frac *= 10;
        nd++;
    }
#ifdef SWAR_DIGITS
fraction_done:
#endif
    s->p = p;
    if (!number_ends(s)) return FAIL;
    uint64_t m = v * 1000 + frac; /* v <= INT64_MAX / 1000, so m <= INT64_MAX */
    if (m > (uint64_t)INT64_MAX) return FAIL;
    *out = neg ? -(int64_t)m : (int64_t)m;
    return 0;
}

/* A JSON number without exponent and with up to MAX_DECIMALS decimals → value × 1000 rounded half to
 * even to an integer (what Decimal.quantize(Decimal("0.001"), ROUND_HALF_EVEN) gives: the msgspec path's
 * rule, _decode.time_value); FAIL for anything else. The float noise of rewritten traces
 * (5128440295499.2295) comes here: ~1 % of the values of such a trace, off the hot path. */
static int read_milli_rounded(Scan *s, int64_t *out) {
    const unsigned char *p = s->p, *end = s->end;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t v;
    p = int_part(p, end, (uint64_t)INT64_MAX / 1000, &v);
    if (!p) return FAIL;
    uint64_t frac = 0;
    int round_up = 0;
    if (p < end && *p == '.') {
        p++;
        /* the first three decimals are kept, the rest decide the rounding */
        int nd = 0, tail = 0, sticky = 0; /* tail: the fourth decimal; sticky: a nonzero digit after it */
        while (p < end && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (nd < 3)
                frac = frac * 10 + d;
            else if (nd == 3)
                tail = (int)d;
            else
                sticky |= d != 0;
            nd++;
            p++;
        }
        if (nd == 0 || nd > MAX_DECIMALS) return FAIL;
        for (int i = nd; i < 3; i++) frac *= 10;
        /* half to even on the magnitude: the parity of -m is that of m */
        round_up = nd > 3 && (tail > 5 || (tail == 5 && (sticky || ((v * 1000 + frac) & 1))));
    }
    s->p = p;
    if (!number_ends(s)) return FAIL;
    uint64_t m = v * 1000 + frac + (uint64_t)round_up; /* v <= INT64_MAX / 1000: no uint64 overflow */
    if (m > (uint64_t)INT64_MAX) return FAIL;
    *out = neg ? -(int64_t)m : (int64_t)m;
    return 0;
}

/* Read a key (s->p at the opening quote); no escapes allowed (FAIL → msgspec decodes the chunk). */
static int read_key(Scan *s, const unsigned char **k, size_t *n) {
    if (s->p >= s->end || *s->p != '"') return FAIL;
    const unsigned char *start = ++s->p, *p = s->p, *end = s->end;
    while (p < end && *p != '"') {
        p = plain_run(p, end);
        if (p >= end || *p == '"') break;
        if (*p == '\\' || *p < 0x20) return FAIL;
        if (*p >= 0x80) {
            size_t l = utf8_seq(p, end);
            if (!l) return FAIL;
            p += l;
            continue;
        }
        p++;
    }
    if (p >= end) return FAIL;
    *k = start;
    *n = (size_t)(p - start);
    s->p = p + 1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return FAIL;
    s->p++;
    skip_ws(s);
    return 0;
}

static inline int is_null(Scan *s) {
    if (s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0) {
        s->p += 4;
        return 1;
    }
    return 0;
}

static inline void put_int(Scan *s, int col, size_t row, int64_t v, uint8_t valid) {
    s->ints[col][row] = v;
    s->valid[col][row] = valid;
}

static inline void put_code(Scan *s, int col, size_t row, int32_t code) { s->codes[col][row] = code; }

/* A JSON number the fast readers declined (a fraction or exponent where an integer is kept, too many
 * digits, beyond int64): validated, and kept as its text for the caller to convert. */
static COLD int read_number_text(Scan *s, int col, size_t row) {
    const unsigned char *start = s->p;
    if (skip_number(s) < 0 || !number_ends(s)) return FAIL;
    int32_t code = dict_code(&s->intstr, (const char *)start, (size_t)(s->p - start));
    if (code < 0) return FAIL;
    put_int(s, col, row, code, 2);
    return 0;
}

/* The rare shapes of a kept integer (s->p at the value; read_int declined it): a string (valid 2, its
 * code), a number read_int does not take (its text, valid 2), true/false/an array/an object (null, as
 * msgspec's path makes them). Out of line: read_field's hot path stays small. */
static COLD int read_int_other(Scan *s, int col, size_t row) {
    unsigned char c = *s->p;
    if (c == '"') {
        int32_t code;
        s->p++;
        if (read_string_code(s, &s->intstr, &code) < 0) return FAIL;
        put_int(s, col, row, code, 2);
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return read_number_text(s, col, row);
    return skip_value(s);
}

/* The rare shapes of a time (s->p at the value; read_milli declined it): more than three decimals
 * (rounded, valid 1), an integer too large for value × 1000 (an ns trace's 1.7e18: valid 4, the value
 * itself), a string or another number (its text, valid 2), true/false/an array/an object (valid 3). */
static COLD int read_time_other(Scan *s, int col, size_t row) {
    const unsigned char *start = s->p;
    unsigned char c = *s->p;
    int64_t v;
    if (c == '"') {
        int32_t code;
        s->p++;
        if (read_string_code(s, &s->intstr, &code) < 0) return FAIL;
        put_int(s, col, row, code, 2);
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (read_milli_rounded(s, &v) == 0) {
            put_int(s, col, row, v, 1);
            return 0;
        }
        s->p = start;
        if (read_int(s, &v) == 0) {
            put_int(s, col, row, v, 4);
            return 0;
        }
        s->p = start;
        return read_number_text(s, col, row);
    }
    if (skip_value(s) < 0) return FAIL;
    put_int(s, col, row, 0, 3); /* present, but not a number */
    return 0;
}

static int read_field(Scan *s, const Field *f, size_t row);

static int read_object(Scan *s, const Field *fields, size_t row) {
    int a = fields == ARG_FIELDS;
    Pred(*preds)[2] = s->pred[a];
    unsigned prev = PRED_START;
    uint32_t seen = 0;
    s->p++; /* '{' */
    for (;;) {
        /* p: after the '{' (prev is PRED_START) or after a value. A template holds the bytes from here to
           the next value: whitespace, ',' unless first, the key, ':', whitespace. */
        const unsigned char *p = s->p;
        Pred *pr = NULL;
        int fi;
        if (s->end - p >= TPL_BYTES) {
#ifdef __SSE2__
            __m128i i0 = _mm_loadu_si128((const __m128i *)p), i1 = _mm_loadu_si128((const __m128i *)(p + 16)),
                    i2 = _mm_loadu_si128((const __m128i *)(p + 32));
            for (int way = 0; way < 2; way++) {
                Pred *q = &preds[prev][way];
                __m128i d = _mm_or_si128(
                    _mm_or_si128(_mm_xor_si128(_mm_and_si128(i0, _mm_loadu_si128((const __m128i *)&q->m[0])),
                                               _mm_loadu_si128((const __m128i *)&q->t[0])),
                                 _mm_xor_si128(_mm_and_si128(i1, _mm_loadu_si128((const __m128i *)&q->m[2])),
                                               _mm_loadu_si128((const __m128i *)&q->t[2]))),
                    _mm_xor_si128(_mm_and_si128(i2, _mm_loadu_si128((const __m128i *)&q->m[4])),
                                  _mm_loadu_si128((const __m128i *)&q->t[4])));
                if (_mm_movemask_epi8(_mm_cmpeq_epi8(d, _mm_setzero_si128())) == 0xFFFF) {
                    pr = q;
                    break;
                }
            }
#else
            uint64_t in[TPL_WORDS];
            memcpy(in, p, TPL_BYTES);
            for (int way = 0; way < 2; way++) {
                Pred *q = &preds[prev][way];
                uint64_t diff = 0;
                for (int j = 0; j < TPL_WORDS; j++) diff |= (in[j] & q->m[j]) ^ q->t[j];
                if (diff == 0) {
                    pr = q;
                    break;
                }
            }
#endif
        }
        if (pr) {
            /* an expected key: the same bytes as a key read (and validated) before */
            s->p = p + pr->tlen;
            skip_ws(s);
            fi = pr->field;
            prev = pr->slot;
        } else {
            skip_ws(s);
            if (s->p >= s->end) return FAIL;
            if (*s->p == '}') {
                s->p++;
                return 0;
            }
            if (prev != PRED_START) {
                if (*s->p != ',') return FAIL;
                s->p++;
                skip_ws(s);
            }
            const unsigned char *k;
            size_t kn;
            if (read_key(s, &k, &kn) < 0) return FAIL;
            fi = -1;
            unsigned slot = PRED_LONG;
            if (kn < MAX_KEY) {
                uint64_t w[4];
                key_words(k, kn, s->end, w);
                slot = key_hash(w[0], kn, key_mult[a]);
                const KeySlot *sl = &key_slots[a][slot];
                if (sl->len == kn && ((sl->w[0] ^ w[0]) | (sl->w[1] ^ w[1]) | (sl->w[2] ^ w[2]) | (sl->w[3] ^ w[3])) == 0)
                    fi = sl->field;
            }
            size_t tl = (size_t)(s->p - p);
            if (tl <= TPL_BYTES) { /* expect this key after the previous one from now on (and the last one too) */
                pr = &preds[prev][0];
                preds[prev][1] = *pr;
                unsigned char t[TPL_BYTES] = {0}, m[TPL_BYTES] = {0};
                memcpy(t, p, tl);
                memset(m, 0xFF, tl);
                memcpy(pr->t, t, TPL_BYTES);
                memcpy(pr->m, m, TPL_BYTES);
                pr->tlen = tl;
                pr->field = fi;
                pr->slot = slot;
            }
            prev = slot;
        }
        if (fi < 0) {
            if (skip_value(s) < 0) return FAIL;
        } else {
            if (seen & (1u << fi)) return FAIL; /* duplicated key */
            seen |= 1u << fi;
            if (read_field(s, &fields[fi], row) < 0) return FAIL;
        }
    }
}

static int read_field(Scan *s, const Field *f, size_t row) {
    if (s->p >= s->end) return FAIL;
    if (is_null(s)) return 0; /* null is the same as missing */
    unsigned char c = *s->p;
    switch (f->kind) {
    case K_STR:
        if (c != '"') return FAIL;
        s->p++;
    {
        int32_t code;
        if (read_string_code(s, &s->dicts[f->col], &code) < 0) return FAIL;
        put_code(s, f->col, row, code);
        return 0;
    }
    case K_INT: {
        int64_t v;
        const unsigned char *start = s->p;
        if (read_int(s, &v) == 0) {
            put_int(s, f->col, row, v, 1);
            return 0;
        }
        s->p = start;
        return read_int_other(s, f->col, row);
    }
    case K_TIME: {
        int64_t v;
        const unsigned char *start = s->p;
        if (read_milli(s, &v) == 0) {
            put_int(s, f->col, row, v, 1);
            return 0;
        }
        s->p = start;
        return read_time_other(s, f->col, row);
    }
    case K_RAW: { /* a JSON array kept as its text, exactly as written (msgspec.Raw on the other path) */
        if (c != '[') return FAIL;
        const unsigned char *start = s->p;
        if (skip_value(s) < 0) return FAIL;
        for (const unsigned char *q = start; q < s->p; q++)
            if (*q >= 0x80) return FAIL; /* non-ASCII text inside: msgspec validates its UTF-8 */
        int32_t code = dict_code(&s->dicts[f->col], (const char *)start, (size_t)(s->p - start));
        if (code < 0) return FAIL;
        put_code(s, f->col, row, code);
        return 0;
    }
    case K_ARGS:
        if (c != '{') return FAIL;
        if (++s->depth > MAX_DEPTH) return FAIL;
        if (read_object(s, ARG_FIELDS, row) < 0) return FAIL;
        s->depth--;
        return 0;
    }
    return FAIL;
}

#define ROW_BYTES (N_INT * (sizeof(int64_t) + 1) + N_STR * sizeof(int32_t))

/* The rows of the first block: guessed from the input size (most events are longer than 256 bytes). */
static size_t first_rows(Py_ssize_t bytes) { return (size_t)bytes / 256 + 1024; }

/* Point the columns into block b of nc rows, copying the n rows read so far. */
static void place_columns(Scan *s, char *b, size_t nc) {
    char *at = b; /* int64 columns first, then int32, then bytes: each stays aligned */
    size_t n = s->n;
    for (int i = 0; i < N_INT; i++, at += nc * sizeof(int64_t)) {
        if (n) memcpy(at, s->ints[i], n * sizeof(int64_t));
        s->ints[i] = (int64_t *)at;
    }
    for (int i = 0; i < N_STR; i++, at += nc * sizeof(int32_t)) {
        if (n) memcpy(at, s->codes[i], n * sizeof(int32_t));
        s->codes[i] = (int32_t *)at;
    }
    for (int i = 0; i < N_INT; i++, at += nc) {
        if (n) memcpy(at, s->valid[i], n);
        s->valid[i] = (uint8_t *)at;
    }
    s->cap = nc;
    s->cleared = n;
}

/* Twice the rows, in a malloc'd block (the scan runs without the GIL: no Python object is made here). */
static int grow_columns(Scan *s) {
    size_t nc = s->cap * 2;
    if (nc > ((size_t)-1 / 2) / ROW_BYTES) return FAIL;
    char *b = malloc(nc * ROW_BYTES);
    if (!b) return FAIL;
    place_columns(s, b, nc);
    free(s->block);
    s->block = b;
    return 0;
}

#define ZERO_ROWS 512

/* Clear the next ZERO_ROWS rows (or up to cap) of every column to null (the int64 cells of a null are
 * left as they are: see Scan). */
static void clear_rows(Scan *s) {
    size_t a = s->cleared, b = a + ZERO_ROWS < s->cap ? a + ZERO_ROWS : s->cap;
    for (int i = 0; i < N_INT; i++) memset(s->valid[i] + a, 0, b - a);
    for (int i = 0; i < N_STR; i++) memset(s->codes[i] + a, 0xFF, (b - a) * sizeof(int32_t)); /* -1 */
    s->cleared = b;
}

/* Skip one JSON value of any depth (s->p at its first byte), as strictly as skip_value, with the open
 * containers on a heap stack instead of the C stack. */
static int skip_any(Scan *s) {
    size_t top = 0;
    for (;;) {
        /* a value */
        skip_ws(s);
        if (s->p >= s->end) return FAIL;
        unsigned char c = *s->p;
        if (c == '{' || c == '[') {
            if (top == s->stack_cap) {
                size_t nc = s->stack_cap ? 2 * s->stack_cap : 256;
                unsigned char *ns = realloc(s->stack, nc);
                if (!ns) return FAIL;
                s->stack = ns;
                s->stack_cap = nc;
            }
            s->stack[top++] = c;
            s->p++;
            skip_ws(s);
            if (s->p < s->end && *s->p == (c == '{' ? '}' : ']')) {
                s->p++;
                top--;
            } else {
                if (c == '{') {
                    if (s->p >= s->end || *s->p != '"') return FAIL;
                    s->p++;
                    if (skip_string(s) < 0) return FAIL;
                    skip_ws(s);
                    if (s->p >= s->end || *s->p != ':') return FAIL;
                    s->p++;
                }
                continue; /* the container's first value */
            }
        } else if (skip_value(s) < 0) { /* a scalar */
            return FAIL;
        }
        /* after a value: close containers, or go on to the next value of the innermost one */
        for (;;) {
            if (top == 0) return 0;
            skip_ws(s);
            if (s->p >= s->end) return FAIL;
            unsigned char open = s->stack[top - 1];
            if (*s->p == (open == '{' ? '}' : ']')) {
                s->p++;
                top--;
                continue;
            }
            if (*s->p != ',') return FAIL;
            s->p++;
            if (open == '{') {
                skip_ws(s);
                if (s->p >= s->end || *s->p != '"') return FAIL;
                s->p++;
                if (skip_string(s) < 0) return FAIL;
                skip_ws(s);
                if (s->p >= s->end || *s->p != ':') return FAIL;
                s->p++;
            }
            break;
        }
    }
}

static void clear_row(Scan *s, size_t row) {
    for (int i = 0; i < N_INT; i++) {
        s->ints[i][row] = 0;
        s->valid[i][row] = 0;
    }
    for (int i = 0; i < N_STR; i++) s->codes[i][row] = -1;
}

static int add_declined(Scan *s, size_t row, const unsigned char *start, const unsigned char *stop) {
    if (s->n_declined == s->declined_cap) {
        size_t nc = s->declined_cap ? 2 * s->declined_cap : 64;
        int64_t *nd = realloc(s->declined, nc * 3 * sizeof(int64_t));
        if (!nd) return FAIL;
        s->declined = nd;
        s->declined_cap = nc;
    }
    int64_t *t = s->declined + 3 * s->n_declined++;
    t[0] = (int64_t)row;
    t[1] = (int64_t)(start - s->base);
    t[2] = (int64_t)(stop - s->base);
    return 0;
}

/* One item of the array: an event read into row n, a null (skipped), or an item the scanner declines
 * (validated as JSON, its row left empty, listed for msgspec). FAIL: not valid JSON here. */
static int scan_item(Scan *s) {
    if (s->p >= s->end) return FAIL;
    if (*s->p == 'n') return is_null(s) ? 0 : FAIL;
    if (s->n == s->cap && grow_columns(s) < 0) return FAIL;
    if (s->n == s->cleared) clear_rows(s);
    size_t row = s->n;
    const unsigned char *start = s->p;
    if (*s->p == '{') {
        s->depth = 1;
        if (read_object(s, TOP_FIELDS, row) == 0) {
            s->n++;
            return 0;
        }
        clear_row(s, row); /* the fields read before the surprise */
        s->p = start;
    }
    if (skip_any(s) < 0 || add_declined(s, row, start, s->p) < 0) return FAIL;
    s->n++;
    return 0;
}

/* A JSON array of events ('[' ... ']'), or with `bare` the text between the brackets. */
static int scan_array(Scan *s, int bare) {
    skip_ws(s);
    if (!bare) {
        if (s->p >= s->end || *s->p != '[') return FAIL;
        s->p++;
        skip_ws(s);
    }
    unsigned char close = bare ? 0 : ']';
    int at_end = bare ? s->p >= s->end : (s->p < s->end && *s->p == ']');
    if (at_end) {
        if (!bare) s->p++;
    } else {
        for (;;) {
            if (scan_item(s) < 0) return FAIL;
            skip_ws(s);
            if (bare && s->p >= s->end) break;
            if (s->p >= s->end) return FAIL;
            if (*s->p == ',') {
                s->p++;
                skip_ws(s);
                continue;
            }
            if (!bare && *s->p == close) {
                s->p++;
                break;
            }
            return FAIL;
        }
    }
    skip_ws(s);
    return s->p == s->end ? 0 : FAIL;
}

static void scan_free(Scan *s) {
    Py_XDECREF(s->first);
    free(s->block);
    for (int i = 0; i < N_STR; i++) dict_free(&s->dicts[i]);
    dict_free(&s->intstr);
    free(s->scratch);
    free(s->declined);
    free(s->stack);
}

static PyObject *build_result(Scan *s) {
    size_t n = s->n, cap = s->cap;
    PyObject *block = NULL;
    if (s->block == NULL && 4 * n >= 3 * cap) { /* the rows fill 3/4 of the first block or more: it is the
                                                   result, as it is (its columns outlive the scan) */
        block = s->first;
        Py_INCREF(block);
    } else { /* a grown block, or a first one mostly empty (long events): copied into n rows per column */
        cap = n;
        block = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * ROW_BYTES));
        if (block) place_columns(s, PyBytes_AS_STRING(block), n); /* (s->block is freed by scan_free) */
    }
    PyObject *uniques = PyList_New(N_STR + 1);
    PyObject *declined =
        PyBytes_FromStringAndSize((const char *)s->declined, (Py_ssize_t)(s->n_declined * 3 * sizeof(int64_t)));
    if (!block || !uniques || !declined) goto error;
    for (int i = 0; i <= N_STR; i++) {
        Dict *d = i < N_STR ? &s->dicts[i] : &s->intstr;
        PyObject *lst = PyList_New((Py_ssize_t)d->count);
        if (!lst) goto error;
        PyList_SET_ITEM(uniques, i, lst);
        for (size_t c = 0; c < d->count; c++) {
            PyObject *str = PyUnicode_DecodeUTF8(d->arena + d->offs[c], (Py_ssize_t)d->lens[c], "strict");
            if (!str) goto error;
            PyList_SET_ITEM(lst, (Py_ssize_t)c, str);
        }
    }
    return Py_BuildValue("(nnNNN)", (Py_ssize_t)n, (Py_ssize_t)cap, block, uniques, declined);
error:
    Py_XDECREF(declined);
    Py_XDECREF(block);
    Py_XDECREF(uniques);
    return NULL;
}

static PyObject *fastscan_scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arg;
    Py_ssize_t start = 0, stop = -1;
    int bare = 0;
    if (!PyArg_ParseTuple(args, "O|nnp", &arg, &start, &stop, &bare)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (stop < 0 || stop > view.len) stop = view.len;
    if (start < 0 || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: bad start/stop");
        return NULL;
    }
    Scan s;
    memset(&s, 0, sizeof(s));
    int ok = 1;
    for (int i = 0; i < N_STR; i++)
        if (dict_init(&s.dicts[i]) < 0) ok = 0;
    if (dict_init(&s.intstr) < 0) ok = 0;
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < KEY_SLOTS + 2; i++) s.pred[a][i][0].t[0] = s.pred[a][i][1].t[0] = 1; /* no match */
    PyObject *result = NULL;
    if (ok) {
        size_t nc = first_rows(stop - start);
        if (nc <= (size_t)PY_SSIZE_T_MAX / ROW_BYTES)
            s.first = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nc * ROW_BYTES));
        if (s.first == NULL) ok = 0;
        else place_columns(&s, PyBytes_AS_STRING(s.first), nc);
    }
    if (ok) {
        s.base = (const unsigned char *)view.buf;
        s.p = s.base + start;
        s.end = (const unsigned char *)view.buf + stop;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = scan_array(&s, bare);
        Py_END_ALLOW_THREADS
        if (rc == 0) {
            result = build_result(&s);
            if (result == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear(); /* cannot happen (validated), but never raise for input: say "no" */
                Py_INCREF(Py_None);
                result = Py_None;
            }
        } else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    } else {
        PyErr_NoMemory();
    }
    scan_free(&s);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", fastscan_scan, METH_VARARGS,
     "scan(buffer, start=0, stop=len, bare=False) -> (n, ints, valid, codes, uniques, declined), or None\n"
     "when the msgspec decoder must be used. buffer[start:stop] is a JSON array of events, or with\n"
     "bare=True the text between its brackets."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastscan", "Fast Kineto traceEvents scanner.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastscan(void) {
    if (index_fields() < 0) {
        PyErr_SetString(PyExc_ImportError, "_fastscan: field table too small");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA", SOURCE_SHA) < 0) Py_CLEAR(m);
    return m;
}
