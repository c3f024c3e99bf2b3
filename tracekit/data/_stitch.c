/* tracekit.data.stitch's optional C part: a part file's row groups, their offsets moved (Thrift compact
 * protocol).
 *
 * stitch_groups(part, footer_start, shift, ordinal) -> (num_rows, [row group bytes, ...]): each RowGroup
 * of the part's FileMetaData copied byte for byte but for file_offset (+shift), ordinal (set, counting
 * from `ordinal`), each ColumnChunk's file_offset (+shift when not 0), offset / column index offsets
 * (+shift) and its ColumnMetaData's data / index / dictionary page and bloom filter offsets (+shift):
 * what stitch.py's decode, _shift_row_group and encode give, without a Python object per value. None
 * for anything unexpected (stitch.py's Python path then does it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The source's hash (setup.py; tracekit.native compares it with this file before running the build). */
#ifndef SOURCE_SHA
#define SOURCE_SHA ""
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>



typedef struct {
    const unsigned char *p, *end;
    unsigned char *out;
    size_t n, cap;
    int bad;
} Tc;

static void tc_put(Tc *t, const unsigned char *b, size_t n) {
    if (t->bad) return;
    if (t->n + n > t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 4096;
        while (nc < t->n + n) nc *= 2;
        unsigned char *o = realloc(t->out, nc);
        if (!o) {
            t->bad = 1;
            return;
        }
        t->out = o;
        t->cap = nc;
    }
    memcpy(t->out + t->n, b, n);
    t->n += n;
}

static uint64_t tc_varint(Tc *t) {
    uint64_t r = 0;
    int shift = 0;
    while (t->p < t->end && shift < 64) {
        unsigned char b = *t->p++;
        r |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return r;
        shift += 7;
    }
    t->bad = 1;
    return 0;
}

static void tc_put_varint(Tc *t, uint64_t v) {
    unsigned char b[10];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    b[n++] = (unsigned char)v;
    tc_put(t, b, n);
}

static int64_t unzig(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }
static uint64_t zig(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

enum { T_TRUE = 1, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, T_MAP, T_STRUCT };

/* What to do with an integer field of the struct being copied. */
enum { KEEP, SHIFT, SHIFT_NONZERO, SET_ORDINAL };
enum { S_OTHER, S_ROW_GROUP, S_COLUMN_CHUNK, S_COLUMN_META };

static void tc_value(Tc *t, int type, int kind, int depth, int64_t shift, int64_t ordinal, int action);

/* Copy a struct (its fields up to the stop byte), applying `kind`'s rules to its fields. */
static void tc_struct(Tc *t, int kind, int depth, int64_t shift, int64_t ordinal) {
    if (depth > 32) {
        t->bad = 1;
        return;
    }
    int64_t last = 0;
    while (!t->bad) {
        if (t->p >= t->end) {
            t->bad = 1;
            return;
        }
        unsigned char head = *t->p++;
        tc_put(t, &head, 1);
        if (head == 0) return;
        int type = head & 0x0F, delta = head >> 4;
        int64_t fid;
        if (delta) {
            fid = last + delta;
        } else {
            const unsigned char *a = t->p;
            fid = unzig(tc_varint(t));
            tc_put(t, a, (size_t)(t->p - a));
        }
        last = fid;
        int action = KEEP, sub = S_OTHER;
        if (kind == S_ROW_GROUP) {
            if (fid == 5) action = SHIFT;
            else if (fid == 7) action = SET_ORDINAL;
            else if (fid == 1) sub = S_COLUMN_CHUNK; /* the list's elements */
        } else if (kind == S_COLUMN_CHUNK) {
            if (fid == 4 || fid == 6) action = SHIFT;
            else if (fid == 2) action = SHIFT_NONZERO;
            else if (fid == 3) sub = S_COLUMN_META;
        } else if (kind == S_COLUMN_META) {
            if (fid == 9 || fid == 10 || fid == 11 || fid == 14) action = SHIFT;
        }
        tc_value(t, type, sub, depth + 1, shift, ordinal, action);
    }
}

static void tc_value(Tc *t, int type, int kind, int depth, int64_t shift, int64_t ordinal, int action) {
    const unsigned char *a = t->p;
    switch (type) {
    case T_TRUE:
    case T_FALSE:
        return; /* a bool field's value is its type */
    case T_BYTE:
        if (t->p >= t->end) t->bad = 1;
        else t->p++;
        break;
    case T_I16:
    case T_I32:
    case T_I64: {
        int64_t v = unzig(tc_varint(t));
        if (action == KEEP || (action == SHIFT_NONZERO && v == 0)) break;
        v = action == SET_ORDINAL ? ordinal : v + shift;
        tc_put_varint(t, zig(v));
        return;
    }
    case T_DOUBLE:
        if (t->end - t->p < 8) t->bad = 1;
        else t->p += 8;
        break;
    case T_BINARY: {
        uint64_t n = tc_varint(t);
        if (t->bad || (uint64_t)(t->end - t->p) < n) t->bad = 1;
        else t->p += n;
        break;
    }
    case T_LIST:
    case T_SET: {
        if (t->p >= t->end) {
            t->bad = 1;
            return;
        }
        unsigned char head = *t->p++;
        uint64_t size = head >> 4;
        int elem = head & 0x0F;
        if (size == 15) size = tc_varint(t);
        tc_put(t, a, (size_t)(t->p - a));
        for (uint64_t i = 0; i < size && !t->bad; i++) {
            if (elem == T_TRUE || elem == T_FALSE) { /* a bool element is one byte */
                if (t->p >= t->end) t->bad = 1;
                else tc_put(t, t->p++, 1);
            } else {
                tc_value(t, elem, kind, depth + 1, shift, ordinal, KEEP);
            }
        }
        return;
    }
    case T_STRUCT:
        tc_struct(t, kind, depth, shift, ordinal);
        return;
    default: /* maps never appear in a Parquet footer */
        t->bad = 1;
        return;
    }
    tc_put(t, a, (size_t)(t->p - a));
}

static PyObject *stitch_groups(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start;
    long long shift, ordinal;
    if (!PyArg_ParseTuple(args, "y*nLL", &view, &start, &shift, &ordinal)) return NULL;
    PyObject *groups = PyList_New(0), *result = NULL;
    long long rows = 0;
    int rows_seen = 0, groups_seen = 0, bad = groups == NULL || start < 0 || start > view.len;
    Tc t = {0};
    if (!bad) {
        t.p = (const unsigned char *)view.buf + start;
        t.end = (const unsigned char *)view.buf + view.len;
    }
    int64_t last = 0;
    while (!bad && !t.bad) { /* the FileMetaData's fields: num_rows and row_groups read, the rest skipped */
        if (t.p >= t.end) {
            bad = 1;
            break;
        }
        unsigned char head = *t.p++;
        if (head == 0) break;
        int type = head & 0x0F, delta = head >> 4;
        int64_t fid = delta ? last + delta : unzig(tc_varint(&t));
        last = fid;
        if (fid == 3 && type == T_I64) {
            rows = (long long)unzig(tc_varint(&t));
            rows_seen = 1;
        } else if (fid == 4 && type == T_LIST) {
            if (t.p >= t.end) {
                bad = 1;
                break;
            }
            unsigned char lh = *t.p++;
            uint64_t size = lh >> 4;
            if (size == 15) size = tc_varint(&t);
            if ((lh & 0x0F) != T_STRUCT) bad = 1;
            for (uint64_t i = 0; i < size && !bad && !t.bad; i++) {
                t.n = 0;
                tc_struct(&t, S_ROW_GROUP, 0, shift, ordinal + (long long)i);
                if (t.bad) break;
                PyObject *b = PyBytes_FromStringAndSize((const char *)t.out, (Py_ssize_t)t.n);
                if (!b || PyList_Append(groups, b) < 0) {
                    Py_XDECREF(b);
                    free(t.out);
                    Py_DECREF(groups);
                    PyBuffer_Release(&view);
                    return NULL;
                }
                Py_DECREF(b);
            }
            groups_seen = 1;
        } else { /* skipped: copied into a scratch output nobody reads */
            t.n = 0;
            tc_value(&t, type, S_OTHER, 1, 0, 0, KEEP);
        }
    }
    free(t.out);
    PyBuffer_Release(&view);
    if (bad || t.bad || !rows_seen || !groups_seen) {
        Py_XDECREF(groups);
        Py_RETURN_NONE;
    }
    result = Py_BuildValue("(LN)", rows, groups);
    return result;
}

static PyMethodDef methods[] = {
    {"stitch_groups", stitch_groups, METH_VARARGS,
     "stitch_groups(part, footer_start, shift, ordinal) -> (num_rows, [row group bytes]) or None:\n"
     "a part file's row groups with their offsets moved by shift (tracekit.data.stitch)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stitch", "Parquet footers for tracekit.data.stitch.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__stitch(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA", SOURCE_SHA) < 0) Py_CLEAR(m);
    return m;
}
