/* The replay's walk (pytest_inferscope/analyzer/replay.py, `_walk`) in C: node by node, for what-ifs the array
 * replay does not take (a round of many short stretches between blocking calls: a per-step sync loop). The same
 * arithmetic on the same integers; replay.py falls back to its Python walk where this module is not built, and
 * tests/unit/test_replay_native.py holds the two equal.
 *
 * walk(kinds, durs, ops_at, ops, waits_at, waits,
 *      op_start, op_lat, op_floor, op_after, op_gap, op_dur, counted, start_out, end_out,
 *      segment, external, blocking) -> (round_ns, host_ns)
 *
 * kinds: int8 by node; the rest int64, C-contiguous. Node i issues ops[ops_at[i]:ops_at[i+1]] and, blocking,
 * waits for waits[waits_at[i]:waits_at[i+1]]. start_out and end_out (n_ops each, writable) receive each op's start
 * and end. Indices are checked before the walk: a bad one raises IndexError, nothing is written out of bounds.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define NOT_PLACED (-(INT64_C(1) << 62)) /* an op not placed yet ends here: it delays nothing */
#define N_BUFFERS 15

static const char *const NAMES[N_BUFFERS] = {
    "kinds", "durs", "ops_at", "ops", "waits_at", "waits", "op_start", "op_lat",
    "op_floor", "op_after", "op_gap", "op_dur", "counted", "start_out", "end_out",
};

static int in_range(const int64_t *idx, Py_ssize_t n, int64_t lo, int64_t hi, const char *name) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (idx[i] < lo || idx[i] >= hi) {
            PyErr_Format(PyExc_IndexError, "walk: %s[%zd] = %lld is outside [%lld, %lld)", name, i,
                         (long long)idx[i], (long long)lo, (long long)hi);
            return 0;
        }
    }
    return 1;
}

/* Whether `b` holds signed integers of `size` bytes (numpy's int8: "b"; int64: "l" or "q", maybe "<"-prefixed). */
static int integers(const Py_buffer *b, Py_ssize_t size, const char *name) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    int ok = b->itemsize == size && f[1] == '\0' && (size == 1 ? *f == 'b' : (*f == 'l' || *f == 'q'));
    if (!ok)
        PyErr_Format(PyExc_TypeError, "walk: %s is not an array of %zd-byte signed integers (format %s)", name, size,
                     b->format ? b->format : "B");
    return ok;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj[N_BUFFERS];
    long long segment, external, blocking;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOLLL", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14],
                          &segment, &external, &blocking))
        return NULL;
    Py_buffer buf[N_BUFFERS];
    int got = 0;
    PyObject *result = NULL;
    while (got < N_BUFFERS) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (got >= 13 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj[got], &buf[got], flags) < 0)
            goto done;
        got++;
        if (!integers(&buf[got - 1], got == 1 ? 1 : 8, NAMES[got - 1]))
            goto done;
    }
    const int8_t *kind = buf[0].buf;
    const int64_t *dur = buf[1].buf, *ops_at = buf[2].buf, *ops = buf[3].buf, *waits_at = buf[4].buf,
                  *waits = buf[5].buf, *o_start = buf[6].buf, *lat = buf[7].buf, *floor_ = buf[8].buf,
                  *after = buf[9].buf, *gap = buf[10].buf, *o_dur = buf[11].buf, *counted = buf[12].buf;
    int64_t *start = buf[13].buf, *end = buf[14].buf;
    Py_ssize_t n_nodes = buf[0].len, n_ops = buf[6].len / 8, n_issued = buf[3].len / 8, n_waits = buf[5].len / 8;
    for (int i = 7; i < 15; i++) {
        if (i != 12 && buf[i].len / 8 != n_ops) {
            PyErr_Format(PyExc_ValueError, "walk: %s has %zd items, op_start %zd", NAMES[i], buf[i].len / 8, n_ops);
            goto done;
        }
    }
    if (buf[1].len / 8 != n_nodes || buf[2].len / 8 != n_nodes + 1 || buf[4].len / 8 != n_nodes + 1) {
        PyErr_SetString(PyExc_ValueError, "walk: durs must have one item a node, ops_at and waits_at one more");
        goto done;
    }
    if (!in_range(ops_at, n_nodes + 1, 0, n_issued + 1, "ops_at") ||
        !in_range(waits_at, n_nodes + 1, 0, n_waits + 1, "waits_at") || !in_range(ops, n_issued, 0, n_ops, "ops") ||
        !in_range(waits, n_waits, 0, n_ops, "waits") || !in_range(after, n_ops, -1, n_ops, "op_after") ||
        !in_range(counted, buf[12].len / 8, 0, n_ops, "counted"))
        goto done;
    for (Py_ssize_t i = 0; i < n_nodes; i++) {
        if (ops_at[i] > ops_at[i + 1] || waits_at[i] > waits_at[i + 1]) {
            PyErr_Format(PyExc_ValueError, "walk: ops_at or waits_at decreases at node %zd", i);
            goto done;
        }
    }
    for (Py_ssize_t j = 0; j < n_ops; j++) {
        start[j] = 0;
        end[j] = NOT_PLACED;
    }
    int64_t h = 0;
    for (Py_ssize_t i = 0; i < n_nodes; i++) {
        int64_t k = kind[i];
        if (k == segment) {
            h += dur[i];
            continue;
        }
        for (int64_t p = ops_at[i]; p < ops_at[i + 1]; p++) {
            int64_t j = ops[p];
            int64_t s = k == external ? o_start[j] : h + lat[j];
            if (floor_[j] > s)
                s = floor_[j];
            if (after[j] >= 0 && end[after[j]] + gap[j] > s)
                s = end[after[j]] + gap[j];
            start[j] = s;
            end[j] = s + o_dur[j];
        }
        if (k == external)
            continue;
        if (k == blocking) {
            for (int64_t p = waits_at[i]; p < waits_at[i + 1]; p++) {
                if (end[waits[p]] > h)
                    h = end[waits[p]];
            }
        }
        h += dur[i];
    }
    for (Py_ssize_t j = 0; j < n_ops; j++) { /* an op no node issued: at its measured time, after its stream's op */
        if (end[j] != NOT_PLACED)
            continue;
        int64_t s = o_start[j] > floor_[j] ? o_start[j] : floor_[j];
        if (after[j] >= 0 && end[after[j]] != NOT_PLACED && end[after[j]] + gap[j] > s)
            s = end[after[j]] + gap[j];
        start[j] = s;
        end[j] = s + o_dur[j];
    }
    int64_t last = 0, n_counted = buf[12].len / 8;
    for (int64_t c = 0; c < n_counted; c++) {
        if (c == 0 || end[counted[c]] > last)
            last = end[counted[c]];
    }
    result = Py_BuildValue("(LL)", (long long)(h > last ? h : last), (long long)h);
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&buf[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "The replay's walk over a graph's columns (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay", "The replay's walk in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__replay(void) { return PyModule_Create(&module); }
