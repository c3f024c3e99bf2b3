/* The replay's loops over the graph's nodes and edges in C (tracekit.whatif.loops: the same functions in
 * Python there, which are their definition, what the tests compare these with, and what runs when this
 * extension is missing).
 *
 * Every array is a C-contiguous buffer; index arrays may be int32 or int64 (the graph narrows them when
 * they fit), the others have one type each (checked: a mismatch is a TypeError, never a wrong read).
 * The loops run without the GIL. Integer sums wrap around as numpy's int64 do (DROPPED, int64's
 * minimum, plus a negative weight), computed in unsigned arithmetic: signed overflow is undefined in C.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The source's hash (setup.py; tracekit.native compares it with this file before running the build). */
#ifndef SOURCE_SHA
#define SOURCE_SHA ""
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    char *p;
    Py_ssize_t n;  /* elements */
    int isz;       /* bytes per element */
    char kind;     /* 'i' signed integer, 'f' float64, 'b' bool/uint8 */
    int held;
} Arr;

static void arr_release(Arr *a) {
    if (a->held) PyBuffer_Release(&a->view);
    a->held = 0;
}

/* `want`: "i" any int32/int64, "i8" int8, "f" float64, "b" bool (numpy '?') or uint8; writable on request. */
static int arr_get(PyObject *obj, Arr *a, const char *want, int writable, const char *name) {
    memset(a, 0, sizeof(*a));
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &a->view, flags) < 0) return -1;
    a->held = 1;
    const char *f = a->view.format ? a->view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    Py_ssize_t isz = a->view.itemsize;
    int ok = 0;
    if (strcmp(want, "i") == 0) {
        ok = (isz == 4 || isz == 8) && strchr("ilq", *f) != NULL && f[1] == 0;
        a->kind = 'i';
    } else if (strcmp(want, "i8") == 0) {
        ok = isz == 1 && *f == 'b' && f[1] == 0;
        a->kind = 'i';
    } else if (strcmp(want, "f") == 0) {
        ok = isz == 8 && *f == 'd' && f[1] == 0;
        a->kind = 'f';
    } else if (strcmp(want, "b") == 0) {
        ok = isz == 1 && (*f == '?' || *f == 'B') && f[1] == 0;
        a->kind = 'b';
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "_loops: %s has an unexpected type (format %s, itemsize %zd)", name, f, isz);
        arr_release(a);
        return -1;
    }
    a->p = (char *)a->view.buf;
    a->isz = (int)isz;
    a->n = a->view.len / isz;
    return 0;
}

static inline int64_t ix(const Arr *a, Py_ssize_t i) {
    return a->isz == 4 ? (int64_t)((const int32_t *)a->p)[i] : ((const int64_t *)a->p)[i];
}
static inline void ix_set(Arr *a, Py_ssize_t i, int64_t v) {
    if (a->isz == 4) ((int32_t *)a->p)[i] = (int32_t)v;
    else ((int64_t *)a->p)[i] = v;
}
static inline int64_t i64(const Arr *a, Py_ssize_t i) { return ((const int64_t *)a->p)[i]; }
static inline double f64(const Arr *a, Py_ssize_t i) { return ((const double *)a->p)[i]; }
static inline int8_t i8(const Arr *a, Py_ssize_t i) { return ((const int8_t *)a->p)[i]; }
static inline uint8_t u8(const Arr *a, Py_ssize_t i) { return ((const uint8_t *)a->p)[i]; }
/* Round half to even (np.rint) without a libm call: below 2**51 in magnitude, adding and removing
 * 1.5 * 2**52 rounds in the current (default: to nearest, ties to even) mode; beyond, nearbyint. */
static inline double rne(double x) {
    const double big = 6755399441055744.0; /* 1.5 * 2**52 */
    if (x > -2251799813685248.0 && x < 2251799813685248.0) return (x + big) - big;
    return nearbyint(x);
}
static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
/* numpy's negative index: from the end (host_f's last entry is the factor of a segment without state). */
static inline Py_ssize_t at(int64_t i, Py_ssize_t n) { return (Py_ssize_t)(i < 0 ? i + n : i); }

static int check_int64(const Arr *a, const char *name) {
    if (a->isz != 8) {
        PyErr_Format(PyExc_TypeError, "_loops: %s must be int64", name);
        return -1;
    }
    return 0;
}

static void release_arrays(Arr *a, int n) {
    for (int i = 0; i < n; i++) arr_release(&a[i]);
}

/* The n arrays of a call's arguments (a tuple of exactly n, plus `extra` more after them), each taken by
 * arr_get with its name, type and writability; 0, or -1 with an exception set and nothing held. */
static int get_arrays(PyObject *args, int n, int extra, Arr *a, const char *const names[], const char *const types[],
                      const int writable[]) {
    if (PyTuple_GET_SIZE(args) != n + extra) {
        PyErr_Format(PyExc_TypeError, "_loops: %d arguments expected, got %zd", n + extra, PyTuple_GET_SIZE(args));
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (arr_get(PyTuple_GET_ITEM(args, i), &a[i], types[i], writable[i], names[i]) < 0) {
            release_arrays(a, i);
            return -1;
        }
    return 0;
}

/* group(key, ptr, order): loops._group, a counting sort in place of bincount + cumsum + fill: no array
 * but the two it returns (ptr has n + 2 entries, zeroed by the caller). */
static PyObject *loops_group(PyObject *self, PyObject *args) {
    (void)self;
    Arr a[3];
    static const char *const names[3] = {"key", "ptr", "order"}, *const types[3] = {"i", "i", "i"};
    static const int wr[3] = {0, 1, 1};
    if (get_arrays(args, 3, 0, a, names, types, wr) < 0) return NULL;
    Arr *key = &a[0], *ptr = &a[1], *order = &a[2];
    if (check_int64(ptr, "ptr") < 0 || ptr->n < 2 || order->n != key->n) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_loops.group: ptr needs n + 2 entries, order len(key)");
        release_arrays(a, 3);
        return NULL;
    }
    int64_t *p = (int64_t *)ptr->p, bad = 0;
    Py_ssize_t n = ptr->n - 2, m = key->n, i;
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < m; i++) { /* counted at k + 2; a key out of range stops it before any is used */
        int64_t k = ix(key, i);
        if (k < 0 || k >= n) {
            bad = k;
            break;
        }
        p[k + 2]++;
    }
    if (i == m) {
        for (Py_ssize_t v = 2; v < n + 2; v++) p[v] += p[v - 1];
        for (Py_ssize_t j = 0; j < m; j++) { /* p[k + 1]: the next free place of key k, its start at first */
            int64_t k = ix(key, j);
            ix_set(order, (Py_ssize_t)p[k + 1]++, j);
        }
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 3);
    if (i < m) return PyErr_Format(PyExc_ValueError, "_loops.group: key %lld out of range [0, %zd)", (long long)bad, n);
    Py_RETURN_NONE;
}

/* cover(starts, ends, out): loops._cover, with one int32 running count (numpy's was two int64 bincounts,
 * their difference and its running sum: four arrays of the thread's length per call). */
static PyObject *loops_cover(PyObject *self, PyObject *args) {
    (void)self;
    Arr a[3];
    static const char *const names[3] = {"starts", "ends", "out"}, *const types[3] = {"i", "i", "b"};
    static const int wr[3] = {0, 0, 1};
    if (get_arrays(args, 3, 0, a, names, types, wr) < 0) return NULL;
    Arr *st = &a[0], *en = &a[1], *out = &a[2];
    Py_ssize_t n = out->n;
    int32_t *d = PyMem_RawCalloc((size_t)n + 1, sizeof(int32_t));
    if (!d) {
        release_arrays(a, 3);
        return PyErr_NoMemory();
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < st->n && !bad; i++) { /* beyond n: no segment of this thread (bincount's [:n + 1]) */
        int64_t k = ix(st, i);
        if (k < 0) bad = 1;
        else if (k <= n) d[k]++;
    }
    for (Py_ssize_t i = 0; i < en->n && !bad; i++) {
        int64_t k = ix(en, i);
        if (k < 0) bad = 1;
        else if (k <= n) d[k]--;
    }
    if (!bad) {
        int64_t c = 0;
        uint8_t *o = (uint8_t *)out->p;
        for (Py_ssize_t i = 0; i < n; i++) {
            c += d[i];
            o[i] = c > 0;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(d);
    release_arrays(a, 3);
    if (bad) return PyErr_Format(PyExc_ValueError, "_loops.cover: a negative boundary index");
    Py_RETURN_NONE;
}

/* kahn(out_ptr, out_dst, indeg, seeds, seed_ptr, order, queue) -> 0 (all placed) or 1 (a cycle): loops._kahn. */
static PyObject *loops_kahn(PyObject *self, PyObject *args) {
    (void)self;
    Arr a[7];
    static const char *const names[7] = {"out_ptr", "out_dst", "indeg", "seeds", "seed_ptr", "order", "queue"};
    static const char *const types[7] = {"i", "i", "i", "i", "i", "i", "i"};
    static const int wr[7] = {0, 0, 1, 0, 0, 1, 1};
    if (get_arrays(args, 7, 0, a, names, types, wr) < 0) return NULL;
    Arr *out_ptr = &a[0], *out_dst = &a[1], *indeg = &a[2], *seeds = &a[3], *seed_ptr = &a[4], *order = &a[5],
        *queue = &a[6];
    Py_ssize_t n = order->n, head = 0, tail = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g + 1 < seed_ptr->n; g++) {
        for (int64_t i = ix(seed_ptr, g); i < ix(seed_ptr, g + 1); i++) ix_set(queue, tail++, ix(seeds, (Py_ssize_t)i));
        while (head < tail) {
            int64_t v = ix(queue, head);
            ix_set(order, head, v);
            head++;
            for (int64_t k = ix(out_ptr, (Py_ssize_t)v); k < ix(out_ptr, (Py_ssize_t)v + 1); k++) {
                int64_t u = ix(out_dst, (Py_ssize_t)k);
                int64_t d = ix(indeg, (Py_ssize_t)u) - 1;
                ix_set(indeg, (Py_ssize_t)u, d);
                if (d == 0) ix_set(queue, tail++, u);
            }
        }
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 7);
    return PyLong_FromLong(head == n ? 0 : 1);
}

/* kahn_by_time(out_ptr, out_dst, indeg, by_time, order, queue, seen) -> forced: loops._kahn_by_time. */
static PyObject *loops_kahn_by_time(PyObject *self, PyObject *args) {
    (void)self;
    Arr a[7];
    static const char *const names[7] = {"out_ptr", "out_dst", "indeg", "by_time", "order", "queue", "seen"};
    static const char *const types[7] = {"i", "i", "i", "i", "i", "i", "b"};
    static const int wr[7] = {0, 0, 1, 0, 1, 1, 1};
    if (get_arrays(args, 7, 0, a, names, types, wr) < 0) return NULL;
    Arr *out_ptr = &a[0], *out_dst = &a[1], *indeg = &a[2], *by_time = &a[3], *order = &a[4], *queue = &a[5];
    uint8_t *seen = (uint8_t *)a[6].p;
    Py_ssize_t n = order->n, head = 0, tail = 0, done = 0, cursor = 0;
    int64_t forced = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < by_time->n; i++) {
        int64_t v = ix(by_time, i);
        if (ix(indeg, (Py_ssize_t)v) == 0) ix_set(queue, tail++, v);
    }
    while (done < n) {
        if (head == tail) { /* a cycle: take the earliest node not yet placed */
            while (seen[ix(by_time, cursor)]) cursor++;
            int64_t v = ix(by_time, cursor);
            ix_set(indeg, (Py_ssize_t)v, 0);
            ix_set(queue, tail++, v);
            forced++;
        }
        int64_t v = ix(queue, head++);
        if (seen[v]) continue;
        seen[v] = 1;
        ix_set(order, done++, v);
        for (int64_t k = ix(out_ptr, (Py_ssize_t)v); k < ix(out_ptr, (Py_ssize_t)v + 1); k++) {
            int64_t u = ix(out_dst, (Py_ssize_t)k);
            int64_t d = ix(indeg, (Py_ssize_t)u) - 1;
            ix_set(indeg, (Py_ssize_t)u, d);
            if (d == 0 && !seen[u]) ix_set(queue, tail++, u);
        }
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 7);
    return PyLong_FromLongLong((long long)forced);
}

/* binding_weights(indptr, in_edges, src, obs, floor, kind, waits, w, unexplained, unexplained_ns):
 * loops.binding_weights, into w (int64) and unexplained (bool). */
static PyObject *loops_binding_weights(PyObject *self, PyObject *args) {
    (void)self;
    long long unexplained_ns = PyTuple_GET_SIZE(args) == 10 ? PyLong_AsLongLong(PyTuple_GET_ITEM(args, 9)) : 0;
    if (PyErr_Occurred()) return NULL;
    Arr a[9];
    static const char *const names[9] = {"indptr", "in_edges", "src",  "obs",        "floor",
                                         "kind",   "waits",    "w",    "unexplained"};
    static const char *const types[9] = {"i", "i", "i", "i", "i", "i8", "b", "i", "b"};
    static const int wr[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
    if (get_arrays(args, 9, 1, a, names, types, wr) < 0) return NULL;
    if (check_int64(&a[3], "obs") < 0 || check_int64(&a[4], "floor") < 0 || check_int64(&a[7], "w") < 0) {
        release_arrays(a, 9);
        return NULL;
    }
    Arr *indptr = &a[0], *in_edges = &a[1], *src = &a[2], *obs = &a[3], *floor_ = &a[4], *kind = &a[5],
        *waits = &a[6];
    int64_t *w = (int64_t *)a[7].p;
    uint8_t *unexplained = (uint8_t *)a[8].p;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t v = 0; v + 1 < indptr->n; v++) {
        int64_t lo = ix(indptr, v), hi = ix(indptr, v + 1);
        if (lo == hi) continue;
        int64_t best = ix(in_edges, (Py_ssize_t)lo);
        int64_t top = wrap_add(i64(obs, (Py_ssize_t)ix(src, (Py_ssize_t)best)), i64(floor_, (Py_ssize_t)best));
        for (int64_t k = lo + 1; k < hi; k++) {
            int64_t e = ix(in_edges, (Py_ssize_t)k);
            int64_t c = wrap_add(i64(obs, (Py_ssize_t)ix(src, (Py_ssize_t)e)), i64(floor_, (Py_ssize_t)e));
            if (c >= top) {
                best = e;
                top = c;
            }
        }
        for (int64_t k = lo; k < hi; k++) {
            int64_t e = ix(in_edges, (Py_ssize_t)k);
            int64_t fl = i64(floor_, (Py_ssize_t)e);
            int64_t slack = (int64_t)((uint64_t)i64(obs, v) - (uint64_t)i64(obs, (Py_ssize_t)ix(src, (Py_ssize_t)e)));
            int is_wait = u8(waits, at(i8(kind, (Py_ssize_t)e), waits->n)) != 0;
            int64_t beyond = (int64_t)((uint64_t)slack - (uint64_t)fl);
            if (e == best && !(is_wait && beyond > (int64_t)unexplained_ns)) {
                w[e] = slack;
            } else {
                unexplained[e] = e == best;
                w[e] = fl < slack ? fl : slack;
            }
        }
    }
    Py_END_ALLOW_THREADS
    release_arrays(a, 9);
    Py_RETURN_NONE;
}

#define PLAIN 0
#define HOST_CLASS 1
#define DEVICE_CLASS 2

typedef struct {
    const Arr *order, *indptr, *in_edges, *src, *w, *lb, *ecls, *state, *rank, *act, *cost, *host_f, *rank_f,
        *cost_half, *act_f, *drop_wait, *edge_f, *edge_add;
    int64_t *rep, *best;
    Py_ssize_t k, ns;
    int per_edge, adds;
} LP;

/* An index of a 32-bit array when `typed` (a constant where this is inlined: each call is its own loop). */
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif
static ALWAYS_INLINE int64_t tix(const Arr *a, Py_ssize_t i, int typed) {
    return typed ? (int64_t)((const int32_t *)a->p)[i] : ix(a, i);
}
static ALWAYS_INLINE int64_t tptr(const Arr *a, Py_ssize_t i, int typed) {
    return typed ? ((const int64_t *)a->p)[i] : ix(a, i);
}

static ALWAYS_INLINE void lp_loop(const LP *L, int typed) {
    const Py_ssize_t k = L->k, ns = L->ns;
    int64_t *rep = L->rep, *best = L->best;
    for (Py_ssize_t oi = 0; oi < L->order->n; oi++) {
        int64_t v = tix(L->order, oi, typed);
        for (Py_ssize_t j = 0; j < k; j++) best[j] = i64(L->lb, (Py_ssize_t)v);
        int64_t hi = tptr(L->indptr, (Py_ssize_t)v + 1, typed);
        for (int64_t i = tptr(L->indptr, (Py_ssize_t)v, typed); i < hi; i++) {
            Py_ssize_t e = (Py_ssize_t)tix(L->in_edges, (Py_ssize_t)i, typed);
            int c = i8(L->ecls, e);
            Py_ssize_t u = (Py_ssize_t)tix(L->src, e, typed);
            if (c == HOST_CLASS) {
                Py_ssize_t s = at(i8(L->state, e), ns);
                double rf = f64(L->rank_f, at(tix(L->rank, e, typed), L->rank_f->n));
                for (Py_ssize_t j = 0; j < k; j++) {
                    double x = (double)i64(L->w, e) * (f64(L->host_f, j * ns + s) * rf);
                    if (L->per_edge) x = x * f64(L->edge_f, e);
                    double ch = f64(L->cost_half, j);
                    if (ch > 0.0) {
                        double y = x - (double)tix(L->cost, e, typed) * ch;
                        double m = x < 0.0 ? x : 0.0; /* min(x, 0.0) */
                        x = y < m ? m : y;            /* max(y, m): y unless m is larger */
                    }
                    if (L->adds) x = x + f64(L->edge_add, e);
                    int64_t t = wrap_add(rep[u * k + j], (int64_t)rne(x));
                    if (t > best[j]) best[j] = t;
                }
                continue;
            }
            int64_t we;
            if (c == PLAIN) {
                we = i64(L->w, e);
            } else if (c == DEVICE_CLASS) {
                if (L->per_edge && f64(L->edge_f, e) == 0.0) continue;
                we = (int64_t)rne((double)i64(L->w, e) * f64(L->act_f, at(tix(L->act, e, typed), L->act_f->n)));
            } else {
                if (L->per_edge && f64(L->edge_f, e) == 0.0) continue;
                we = i64(L->w, e);
            }
            int wait = c == 3; /* WAIT_CLASS */
            for (Py_ssize_t j = 0; j < k; j++) {
                if (wait && u8(L->drop_wait, j)) continue;
                int64_t t = wrap_add(rep[u * k + j], we);
                if (t > best[j]) best[j] = t;
            }
        }
        for (Py_ssize_t j = 0; j < k; j++) rep[(Py_ssize_t)v * k + j] = best[j];
    }
}

/* longest_paths(order, indptr, in_edges, src, w, lb, ecls, state, rank, act, cost, host_f, rank_f,
 * cost_half, act_f, drop_wait, edge_f, edge_add, rep): loops.longest_paths into rep (nodes x k int64);
 * host_f is (k, states) float64. */
static PyObject *loops_longest_paths(PyObject *self, PyObject *args) {
    (void)self;
    Arr a[19];
    static const char *const names[19] = {"order",    "indptr", "in_edges", "src",      "w",     "lb",
                                          "ecls",     "state",  "rank",     "act",      "cost",  "host_f",
                                          "rank_f",   "cost_half", "act_f", "drop_wait", "edge_f", "edge_add",
                                          "rep"};
    static const char *const types[19] = {"i", "i", "i", "i", "i", "i", "i8", "i8", "i", "i",
                                          "i", "f", "f", "f", "f", "b", "f",  "f",  "i"};
    static const int wr[19] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (get_arrays(args, 19, 0, a, names, types, wr) < 0) return NULL;
    if (check_int64(&a[4], "w") < 0 || check_int64(&a[5], "lb") < 0 || check_int64(&a[18], "rep") < 0) goto fail;
    Arr *order = &a[0], *indptr = &a[1], *in_edges = &a[2], *src = &a[3], *w = &a[4], *lb = &a[5], *ecls = &a[6],
        *state = &a[7], *rank = &a[8], *act = &a[9], *cost = &a[10], *host_f = &a[11], *rank_f = &a[12],
        *cost_half = &a[13], *act_f = &a[14], *drop_wait = &a[15], *edge_f = &a[16], *edge_add = &a[17];
    Py_ssize_t k = cost_half->n;
    if (k < 1 || drop_wait->n != k || host_f->n % k != 0 || a[18].n != lb->n * k) {
        PyErr_SetString(PyExc_ValueError, "_loops.longest_paths: inconsistent shapes");
        goto fail;
    }
    Py_ssize_t ns = host_f->n / k;
    int per_edge = edge_f->n > 0, adds = edge_add->n > 0;
    int64_t *rep = (int64_t *)a[18].p;
    int64_t *best = PyMem_RawMalloc((size_t)k * sizeof(int64_t));
    if (!best) {
        PyErr_NoMemory();
        goto fail;
    }
    /* The usual types (32-bit indices, 64-bit edge pointers) get a loop of their own, reading through
       typed pointers instead of testing each index array's width on every read. */
    int typed = order->isz == 4 && indptr->isz == 8 && in_edges->isz == 4 && src->isz == 4 && rank->isz == 4 &&
                act->isz == 4 && cost->isz == 4;
    LP lp = {order, indptr, in_edges, src, w, lb, ecls, state, rank, act, cost, host_f, rank_f, cost_half,
             act_f, drop_wait, edge_f, edge_add, rep, best, k, ns, per_edge, adds};
    Py_BEGIN_ALLOW_THREADS
    if (typed) lp_loop(&lp, 1);
    else lp_loop(&lp, 0);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(best);
    release_arrays(a, 19);
    Py_RETURN_NONE;
fail:
    release_arrays(a, 19);
    return NULL;
}

static PyMethodDef methods[] = {
    {"group", loops_group, METH_VARARGS, "group(key, ptr, order): tracekit.whatif.loops._group, into ptr and order."},
    {"cover", loops_cover, METH_VARARGS, "cover(starts, ends, out): tracekit.whatif.loops._cover, into out."},
    {"kahn", loops_kahn, METH_VARARGS, "kahn(out_ptr, out_dst, indeg, seeds, seed_ptr, order, queue) -> 0 | 1."},
    {"kahn_by_time", loops_kahn_by_time, METH_VARARGS,
     "kahn_by_time(out_ptr, out_dst, indeg, by_time, order, queue, seen) -> forced."},
    {"binding_weights", loops_binding_weights, METH_VARARGS,
     "binding_weights(indptr, in_edges, src, obs, floor, kind, waits, w, unexplained, unexplained_ns)."},
    {"longest_paths", loops_longest_paths, METH_VARARGS,
     "longest_paths(order, indptr, in_edges, src, w, lb, ecls, state, rank, act, cost, host_f, rank_f, "
     "cost_half, act_f, drop_wait, edge_f, edge_add, rep)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops", "The what-if replay's loops in C.", -1, methods};

PyMODINIT_FUNC PyInit__loops(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA", SOURCE_SHA) < 0) Py_CLEAR(m);
    return m;
}
