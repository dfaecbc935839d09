/* pytest_inferscope._cupti: the native CUPTI activity collector (the fast GPU path).
 *
 * libcupti is dlopen'ed on first use, never linked, so the module imports on any machine.
 * CUPTI hands filled activity buffers to a C callback, usually on its own worker thread;
 * records are decoded there, without the GIL, into a growable array in the 48-byte layout
 * of events.EVENT_DTYPE, which Python views with numpy.frombuffer. Policy (which backend,
 * when to drain, how to synchronise the device) lives in collectors/gpu_native.py.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <cupti.h>
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>

/* ---- the output record: events.EVENT_DTYPE, field for field ---- */

typedef struct {
    int64_t start, end, value;
    uint32_t corr;
    int32_t name, tid, stream;
    int16_t device;
    uint8_t kind, domain;
    uint32_t flags;
} Event;

_Static_assert(sizeof(Event) == 48, "Event must match events.EVENT_DTYPE (48 bytes)");
_Static_assert(offsetof(Event, corr) == 24 && offsetof(Event, device) == 40 && offsetof(Event, flags) == 44,
               "Event field offsets must match events.EVENT_DTYPE");

/* events.Kind and events.Domain */
enum { K_KERNEL = 10, K_MEMCPY, K_MEMSET, K_RUNTIME, K_SYNC, K_GPU_MEMORY, K_OVERHEAD };
enum { DOMAIN_DEVICE = 1 };

#define DEFAULT_BUFFER_SIZE ((size_t)8 << 20)
#define CUPTI_MAJOR(v) ((v) >= 100000 ? (int)((v) / 10000) : (v) >= 19 ? 12 : (v) >= 13 ? 11 : 10)

/* ---- libcupti, resolved at run time ---- */

#define CUPTI_SYMBOLS(X)                                                                                               \
    X(cuptiGetVersion)                                                                                                 \
    X(cuptiGetResultString)                                                                                            \
    X(cuptiGetTimestamp)                                                                                               \
    X(cuptiGetCallbackName)                                                                                            \
    X(cuptiGetThreadIdType)                                                                                            \
    X(cuptiSetThreadIdType)                                                                                            \
    X(cuptiActivityEnable)                                                                                             \
    X(cuptiActivityDisable)                                                                                            \
    X(cuptiActivityRegisterCallbacks)                                                                                  \
    X(cuptiActivityFlushAll)                                                                                           \
    X(cuptiActivityGetNextRecord)                                                                                      \
    X(cuptiActivityGetNumDroppedRecords)

typedef CUptiResult(CUPTIAPI *EnableApi)(CUpti_CallbackId, uint8_t);
typedef CUptiResult(CUPTIAPI *SetAttribute)(CUpti_ActivityAttribute, size_t *, void *);

typedef struct {
    void *handle;
    uint32_t version;
    char path[PATH_MAX];
#define DECLARE(f) __typeof__(f) *f;
    CUPTI_SYMBOLS(DECLARE)
#undef DECLARE
    EnableApi enable_api[2]; /* cuptiActivityEnable{Runtime,Driver}Api (CUPTI 12.x+), NULL when absent */
    SetAttribute set_attribute; /* cuptiActivitySetAttribute, NULL when absent */
} Library;

static Library lib; /* written under the GIL by load(); read-only once handle is set */
static char *(*cxa_demangle)(const char *, char *, size_t *, int *);

static PyObject *CuptiError, *CuptiBusyError;

static const char *result_name(CUptiResult rc) {
    const char *s = NULL;
    if (lib.cuptiGetResultString && lib.cuptiGetResultString(rc, &s) == CUPTI_SUCCESS && s) return s;
    return "CUPTI error";
}

static int is_busy(CUptiResult rc) {
    return rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || rc == CUPTI_ERROR_HARDWARE_BUSY;
}

static PyObject *raise_cupti(const char *what, CUptiResult rc) {
    if (is_busy(rc))
        PyErr_Format(CuptiBusyError,
                     "CUPTI is in use by another profiler in this process (torch.profiler/Kineto, Nsight "
                     "Systems or Compute, or another CUPTI client): %s returned %s (%d). Stop the other "
                     "profiler, or switch inferscope's GPU collection off for this run.",
                     what, result_name(rc), (int)rc);
    else
        PyErr_Format(CuptiError, "%s failed: %s (%d)", what, result_name(rc), (int)rc);
    return NULL;
}

/* ---- the API calls recorded ---- */

/* RUNTIME and DRIVER records are kept only for the calls the analysis reads: kernel launches (GPU work finds its
 * launch by correlation id), copies, memsets, synchronisations and allocations. torch makes about six other calls
 * per op (cudaGetDevice, cudaGetLastError, cudaStreamIsCapturing, ...), each a record that costs CUPTI host time.
 * These are the callback ids whose names, less their _vNNNN/_v2/_ptsz/_ptds suffixes, match
 * gpu_native.TRACED_API (tests/unit/test_native.py checks both against the headers); a name missing from the
 * headers fails the build. INFERSCOPE_CUPTI_ALL_API=1 records every call. */
typedef struct {
    CUpti_CallbackId cbid;
    const char *name;
} TracedApi;

/* clang-format off */
#define R(n) {CUPTI_RUNTIME_TRACE_CBID_##n, #n}
#define D(n) {CUPTI_DRIVER_TRACE_CBID_##n, #n}
static const TracedApi TRACED_RUNTIME[] = {
    R(cudaLaunch_v3020), R(cudaLaunchKernel_v7000), R(cudaLaunch_ptsz_v7000), R(cudaLaunchKernel_ptsz_v7000),
    R(cudaLaunchCooperativeKernel_v9000), R(cudaLaunchCooperativeKernel_ptsz_v9000),
    R(cudaLaunchCooperativeKernelMultiDevice_v9000), R(cudaGraphLaunch_v10000), R(cudaGraphLaunch_ptsz_v10000),
    R(cudaLaunchKernelExC_v11060), R(cudaLaunchKernelExC_ptsz_v11060),
    R(cudaMemcpy_v3020), R(cudaMemcpy2D_v3020), R(cudaMemcpyToArray_v3020), R(cudaMemcpy2DToArray_v3020),
    R(cudaMemcpyFromArray_v3020), R(cudaMemcpy2DFromArray_v3020), R(cudaMemcpyArrayToArray_v3020),
    R(cudaMemcpy2DArrayToArray_v3020), R(cudaMemcpyToSymbol_v3020), R(cudaMemcpyFromSymbol_v3020),
    R(cudaMemcpyAsync_v3020), R(cudaMemcpyToArrayAsync_v3020), R(cudaMemcpyFromArrayAsync_v3020),
    R(cudaMemcpy2DAsync_v3020), R(cudaMemcpy2DToArrayAsync_v3020), R(cudaMemcpy2DFromArrayAsync_v3020),
    R(cudaMemcpyToSymbolAsync_v3020), R(cudaMemcpyFromSymbolAsync_v3020), R(cudaMemcpy3D_v3020),
    R(cudaMemcpy3DAsync_v3020), R(cudaMemcpyPeer_v4000), R(cudaMemcpyPeerAsync_v4000), R(cudaMemcpy3DPeer_v4000),
    R(cudaMemcpy3DPeerAsync_v4000), R(cudaMemcpy_ptds_v7000), R(cudaMemcpy2D_ptds_v7000),
    R(cudaMemcpyToArray_ptds_v7000), R(cudaMemcpy2DToArray_ptds_v7000), R(cudaMemcpyFromArray_ptds_v7000),
    R(cudaMemcpy2DFromArray_ptds_v7000), R(cudaMemcpyArrayToArray_ptds_v7000), R(cudaMemcpy2DArrayToArray_ptds_v7000),
    R(cudaMemcpyToSymbol_ptds_v7000), R(cudaMemcpyFromSymbol_ptds_v7000), R(cudaMemcpyAsync_ptsz_v7000),
    R(cudaMemcpyToArrayAsync_ptsz_v7000), R(cudaMemcpyFromArrayAsync_ptsz_v7000), R(cudaMemcpy2DAsync_ptsz_v7000),
    R(cudaMemcpy2DToArrayAsync_ptsz_v7000), R(cudaMemcpy2DFromArrayAsync_ptsz_v7000),
    R(cudaMemcpyToSymbolAsync_ptsz_v7000), R(cudaMemcpyFromSymbolAsync_ptsz_v7000), R(cudaMemcpy3D_ptds_v7000),
    R(cudaMemcpy3DAsync_ptsz_v7000), R(cudaMemcpy3DPeer_ptds_v7000), R(cudaMemcpy3DPeerAsync_ptsz_v7000),
    R(cudaMemset_v3020), R(cudaMemset2D_v3020), R(cudaMemsetAsync_v3020), R(cudaMemset2DAsync_v3020),
    R(cudaMemset3D_v3020), R(cudaMemset3DAsync_v3020), R(cudaMemset_ptds_v7000), R(cudaMemset2D_ptds_v7000),
    R(cudaMemsetAsync_ptsz_v7000), R(cudaMemset2DAsync_ptsz_v7000), R(cudaMemset3D_ptds_v7000),
    R(cudaMemset3DAsync_ptsz_v7000),
    R(cudaThreadSynchronize_v3020), R(cudaStreamSynchronize_v3020), R(cudaEventSynchronize_v3020),
    R(cudaStreamWaitEvent_v3020), R(cudaDeviceSynchronize_v3020), R(cudaStreamSynchronize_ptsz_v7000),
    R(cudaStreamWaitEvent_ptsz_v7000),
    R(cudaMalloc_v3020), R(cudaMallocPitch_v3020), R(cudaFree_v3020), R(cudaMallocArray_v3020), R(cudaFreeArray_v3020),
    R(cudaMallocHost_v3020), R(cudaFreeHost_v3020), R(cudaHostAlloc_v3020), R(cudaMalloc3D_v3020),
    R(cudaMalloc3DArray_v3020), R(cudaMallocMipmappedArray_v5000), R(cudaFreeMipmappedArray_v5000),
    R(cudaMallocManaged_v6000), R(cudaMallocAsync_v11020), R(cudaMallocAsync_ptsz_v11020), R(cudaFreeAsync_v11020),
    R(cudaFreeAsync_ptsz_v11020), R(cudaMallocFromPoolAsync_v11020), R(cudaMallocFromPoolAsync_ptsz_v11020),
#if CUPTI_API_VERSION >= 130000 /* added in CUDA 12.8 and 13.0 */
    R(__cudaLaunchKernel_v13000), R(__cudaLaunchKernel_ptsz_v13000),
    R(cudaMemcpyBatchAsync_v12080), R(cudaMemcpyBatchAsync_ptsz_v12080), R(cudaMemcpy3DBatchAsync_v12080),
    R(cudaMemcpy3DBatchAsync_ptsz_v12080), R(cudaMemcpyBatchAsync_v13000), R(cudaMemcpyBatchAsync_ptsz_v13000),
    R(cudaMemcpy3DBatchAsync_v13000), R(cudaMemcpy3DBatchAsync_ptsz_v13000),
#endif
};
static const TracedApi TRACED_DRIVER[] = {
    D(cuLaunch), D(cuLaunchGrid), D(cuLaunchGridAsync), D(cuLaunchKernel), D(cuLaunchKernel_ptsz),
    D(cuLaunchCooperativeKernel), D(cuLaunchCooperativeKernel_ptsz), D(cuLaunchCooperativeKernelMultiDevice),
    D(cuGraphLaunch), D(cuGraphLaunch_ptsz), D(cuLaunchKernelEx), D(cuLaunchKernelEx_ptsz),
    D(cuMemcpyHtoD), D(cuMemcpyDtoH), D(cuMemcpyDtoD), D(cuMemcpyDtoA), D(cuMemcpyAtoD), D(cuMemcpyHtoA),
    D(cuMemcpyAtoH), D(cuMemcpyAtoA), D(cuMemcpy2D), D(cuMemcpy2DUnaligned), D(cuMemcpy3D), D(cuMemcpyHtoDAsync),
    D(cuMemcpyDtoHAsync), D(cuMemcpyDtoDAsync), D(cuMemcpyHtoAAsync), D(cuMemcpyAtoHAsync), D(cuMemcpy2DAsync),
    D(cuMemcpy3DAsync), D(cuMemcpy_v2), D(cuMemcpyHtoD_v2), D(cuMemcpyHtoDAsync_v2), D(cuMemcpyDtoH_v2),
    D(cuMemcpyDtoHAsync_v2), D(cuMemcpyDtoD_v2), D(cuMemcpyDtoDAsync_v2), D(cuMemcpyAtoH_v2), D(cuMemcpyAtoHAsync_v2),
    D(cuMemcpyAtoD_v2), D(cuMemcpyDtoA_v2), D(cuMemcpyAtoA_v2), D(cuMemcpy2D_v2), D(cuMemcpy2DUnaligned_v2),
    D(cuMemcpy2DAsync_v2), D(cuMemcpy3D_v2), D(cuMemcpy3DAsync_v2), D(cuMemcpyHtoA_v2), D(cuMemcpyHtoAAsync_v2),
    D(cuMemcpy), D(cuMemcpyAsync), D(cuMemcpyPeer), D(cuMemcpyPeerAsync), D(cuMemcpy3DPeer), D(cuMemcpy3DPeerAsync),
    D(cuMemcpyHtoD_v2_ptds), D(cuMemcpyDtoH_v2_ptds), D(cuMemcpyDtoD_v2_ptds), D(cuMemcpyDtoA_v2_ptds),
    D(cuMemcpyAtoD_v2_ptds), D(cuMemcpyHtoA_v2_ptds), D(cuMemcpyAtoH_v2_ptds), D(cuMemcpyAtoA_v2_ptds),
    D(cuMemcpy2D_v2_ptds), D(cuMemcpy2DUnaligned_v2_ptds), D(cuMemcpy3D_v2_ptds), D(cuMemcpy_ptds),
    D(cuMemcpyPeer_ptds), D(cuMemcpy3DPeer_ptds), D(cuMemcpyAsync_ptsz), D(cuMemcpyHtoAAsync_v2_ptsz),
    D(cuMemcpyAtoHAsync_v2_ptsz), D(cuMemcpyHtoDAsync_v2_ptsz), D(cuMemcpyDtoHAsync_v2_ptsz),
    D(cuMemcpyDtoDAsync_v2_ptsz), D(cuMemcpy2DAsync_v2_ptsz), D(cuMemcpy3DAsync_v2_ptsz), D(cuMemcpyPeerAsync_ptsz),
    D(cuMemcpy3DPeerAsync_ptsz),
    D(cuMemsetD8), D(cuMemsetD16), D(cuMemsetD32), D(cuMemsetD2D8), D(cuMemsetD2D16), D(cuMemsetD2D32),
    D(cuMemsetD8Async), D(cuMemsetD16Async), D(cuMemsetD32Async), D(cuMemsetD2D8Async), D(cuMemsetD2D16Async),
    D(cuMemsetD2D32Async), D(cuMemsetD8_v2), D(cuMemsetD16_v2), D(cuMemsetD32_v2), D(cuMemsetD2D8_v2),
    D(cuMemsetD2D16_v2), D(cuMemsetD2D32_v2), D(cuMemsetD8_v2_ptds), D(cuMemsetD16_v2_ptds), D(cuMemsetD32_v2_ptds),
    D(cuMemsetD2D8_v2_ptds), D(cuMemsetD2D16_v2_ptds), D(cuMemsetD2D32_v2_ptds), D(cuMemsetD8Async_ptsz),
    D(cuMemsetD16Async_ptsz), D(cuMemsetD32Async_ptsz), D(cuMemsetD2D8Async_ptsz), D(cuMemsetD2D16Async_ptsz),
    D(cuMemsetD2D32Async_ptsz),
    D(cuCtxSynchronize), D(cuEventSynchronize), D(cuStreamSynchronize), D(cuStreamWaitEvent), D(cuStreamWaitEvent_ptsz),
    D(cuStreamSynchronize_ptsz),
    D(cuMemAlloc), D(cuMemAllocPitch), D(cuMemFree), D(cuMemAllocHost), D(cuMemFreeHost), D(cuMemHostAlloc),
    D(cuMemAlloc_v2), D(cuMemAllocPitch_v2), D(cuMemFree_v2), D(cuMemHostAlloc_v2), D(cuMemAllocHost_v2),
    D(cuMemAllocManaged), D(cuMemAllocAsync), D(cuMemAllocAsync_ptsz), D(cuMemFreeAsync), D(cuMemFreeAsync_ptsz),
    D(cuMemAllocFromPoolAsync), D(cuMemAllocFromPoolAsync_ptsz),
#if CUPTI_API_VERSION >= 130000 /* added in CUDA 12.8 and 13.0 */
    D(cuMemcpyBatchAsync), D(cuMemcpyBatchAsync_ptsz), D(cuMemcpy3DBatchAsync), D(cuMemcpy3DBatchAsync_ptsz),
    D(cuMemcpyBatchAsync_v2), D(cuMemcpyBatchAsync_v2_ptsz), D(cuMemcpy3DBatchAsync_v2),
    D(cuMemcpy3DBatchAsync_v2_ptsz),
    D(cuCtxSynchronize_v2),
#endif
};
/* clang-format on */
#undef R
#undef D
#define N_OF(a) (sizeof(a) / sizeof *(a))
#define CBID_LIMIT 4096

static const struct {
    CUpti_ActivityKind kind;
    const char *label, *setter;
    const TracedApi *traced;
    size_t n_traced;
    CUpti_CallbackId size; /* the header's CBID_SIZE: calls newer than the headers stay recorded */
} API_DOMAINS[2] = {
    {CUPTI_ACTIVITY_KIND_RUNTIME, "runtime", "cuptiActivityEnableRuntimeApi", TRACED_RUNTIME, N_OF(TRACED_RUNTIME),
     CUPTI_RUNTIME_TRACE_CBID_SIZE},
    {CUPTI_ACTIVITY_KIND_DRIVER, "driver", "cuptiActivityEnableDriverApi", TRACED_DRIVER, N_OF(TRACED_DRIVER),
     CUPTI_DRIVER_TRACE_CBID_SIZE},
};
_Static_assert(CUPTI_RUNTIME_TRACE_CBID_SIZE <= CBID_LIMIT && CUPTI_DRIVER_TRACE_CBID_SIZE <= CBID_LIMIT,
               "raise CBID_LIMIT");

static int every_api_call(void) {
    const char *v = getenv("INFERSCOPE_CUPTI_ALL_API");
    return v && strcmp(v, "1") == 0;
}

/* ---- a small string -> index hash map (open addressing, owns its keys) ---- */

typedef struct {
    char *key;
    uint64_t hash;
    int32_t value;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, n;
} Map;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static Slot *map_slot(const Map *m, const char *key, uint64_t h) {
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1))
        if (!m->slots[i].key || (m->slots[i].hash == h && strcmp(m->slots[i].key, key) == 0)) return &m->slots[i];
}

static const int32_t *map_get(const Map *m, const char *key, uint64_t h) {
    if (!m->cap) return NULL;
    const Slot *s = map_slot(m, key, h);
    return s->key ? &s->value : NULL;
}

static int map_put(Map *m, const char *key, uint64_t h, int32_t value) {
    if (2 * (m->n + 1) > m->cap) {
        Map bigger = {calloc(m->cap ? 2 * m->cap : 256, sizeof(Slot)), m->cap ? 2 * m->cap : 256, m->n};
        if (!bigger.slots) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) *map_slot(&bigger, m->slots[i].key, m->slots[i].hash) = m->slots[i];
        free(m->slots);
        *m = bigger;
    }
    Slot *s = map_slot(m, key, h);
    if (!s->key) {
        if (!(s->key = strdup(key))) return -1;
        s->hash = h;
        m->n++;
    }
    s->value = value;
    return 0;
}

static void map_free(Map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- the sink: decoded records and interned names of one Collector ---- */

#define CBID_CACHE 1024

typedef struct {
    Event *ev;
    size_t n, cap, max; /* max = 0: unbounded */
    char **names;
    size_t n_names, cap_names;
    Map raw;                    /* name as CUPTI gives it -> index of its display form */
    int32_t api[2][CBID_CACHE]; /* [runtime, driver] cbid -> index + 1 (0: not yet) */
    uint64_t dropped, incomplete;
    size_t name_limit; /* test only (_decode): intern fails beyond this many names, as on OOM; 0: no limit */
} Sink;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards every Sink and g_sink */
static Sink *g_sink;                                       /* where CUPTI's buffers go; NULL: nowhere */
static size_t g_buffer_size = DEFAULT_BUFFER_SIZE;         /* guarded by g_lock: read on CUPTI's thread */

static void sink_free(Sink *s) {
    free(s->ev);
    for (size_t i = 0; i < s->n_names; i++) free(s->names[i]);
    free(s->names);
    map_free(&s->raw);
    memset(s, 0, sizeof *s);
}

static char *demangle(const char *raw) {
    int status = -1;
    if (!cxa_demangle || raw[0] != '_' || raw[1] != 'Z') return NULL;
    char *out = cxa_demangle(raw, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", as torch.profiler and Nsight show API names. */
static char *strip_version(const char *raw) {
    const char *v = strrchr(raw, '_');
    if (!v || v[1] != 'v' || !v[2] || v == raw) return NULL;
    for (const char *p = v + 2; *p; p++)
        if (*p < '0' || *p > '9') return NULL;
    return strndup(raw, (size_t)(v - raw));
}

/* Index of `raw` in the names list, adding its display form (`display(raw)`, or raw) once; -1 on OOM. */
static int32_t intern(Sink *s, const char *raw, char *(*display)(const char *)) {
    uint64_t h = hash_str(raw);
    const int32_t *hit = map_get(&s->raw, raw, h);
    if (hit) return *hit;
    if (s->name_limit && s->n_names >= s->name_limit) return -1;
    if (s->n_names == s->cap_names) {
        size_t cap = s->cap_names ? 2 * s->cap_names : 256;
        char **names = realloc(s->names, cap * sizeof *names);
        if (!names) return -1;
        s->names = names;
        s->cap_names = cap;
    }
    char *shown = display ? display(raw) : NULL;
    if ((!shown && !(shown = strdup(raw))) || map_put(&s->raw, raw, h, (int32_t)s->n_names) < 0) {
        free(shown);
        return -1;
    }
    s->names[s->n_names] = shown;
    return (int32_t)s->n_names++;
}

static int32_t api_name(Sink *s, CUpti_CallbackDomain domain, uint32_t cbid) {
    int d = domain == CUPTI_CB_DOMAIN_DRIVER_API;
    if (cbid < CBID_CACHE && s->api[d][cbid]) return s->api[d][cbid] - 1;
    const char *raw = NULL;
    char fallback[48];
    if (lib.cuptiGetCallbackName(domain, cbid, &raw) != CUPTI_SUCCESS || !raw) {
        snprintf(fallback, sizeof fallback, "%s API cbid %u", d ? "driver" : "runtime", cbid);
        raw = fallback;
    }
    int32_t idx = intern(s, raw, strip_version);
    if (cbid < CBID_CACHE && idx >= 0) s->api[d][cbid] = idx + 1;
    return idx;
}

static Event *push(Sink *s, uint8_t kind) {
    if (s->max && s->n >= s->max) {
        s->dropped++;
        return NULL;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 65536;
        if (s->max && cap > s->max) cap = s->max;
        Event *ev = realloc(s->ev, cap * sizeof *ev);
        if (!ev) {
            s->dropped++;
            return NULL;
        }
        s->ev = ev;
        s->cap = cap;
    }
    Event *e = &s->ev[s->n++];
    *e = (Event){.tid = -1, .stream = -1, .device = -1, .kind = kind, .domain = DOMAIN_DEVICE};
    return e;
}

/* A forced flush returns still-running work with end = 0: kept, so the merger can count it. */
static void span(Sink *s, Event *e, uint64_t start, uint64_t end) {
    e->start = (int64_t)start;
    e->end = (int64_t)end;
    if (end == 0 || end < start) s->incomplete++;
}

static const char *const COPY_NAMES[] = {"Memcpy",      "Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoA",
                                         "Memcpy AtoH", "Memcpy AtoA", "Memcpy AtoD", "Memcpy DtoA",
                                         "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"};

static const char *overhead_name(uint32_t kind) {
    static const char *const names[] = {"CUPTI overhead",      "CUPTI buffer flush",      "CUPTI instrumentation",
                                        "CUPTI resource",      "Runtime module loading",  "Lazy function loading",
                                        "Command buffer full", "Activity buffer request", "UVM activity init"};
    if (kind == CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER) return "Driver compiler";
    return (kind & 0xFFFF) == 0 && (kind >> 16) < sizeof names / sizeof *names ? names[kind >> 16] : names[0];
}

static int32_t as_id(uint32_t v) { return v == 0xFFFFFFFFu ? -1 : (int32_t)v; }

/* A peer copy's device in its flags' top byte (events.copy_flags): device + 1 in 4 bits, 0 when it does not fit. */
static uint32_t peer_nibble(uint32_t device) { return device <= 14 ? device + 1 : 0; }

static void decode_record(Sink *s, const CUpti_Activity *r) {
    Event *e;
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const void *)r;
        if (!(e = push(s, K_KERNEL))) return;
        span(s, e, k->start, k->end);
        e->corr = k->correlationId;
        e->name = intern(s, k->name ? k->name : "<unnamed kernel>", demangle);
        e->stream = as_id(k->streamId);
        e->device = (int16_t)k->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const void *)r;
        if (!(e = push(s, K_MEMCPY))) return;
        span(s, e, m->start, m->end);
        e->value = (int64_t)m->bytes;
        e->flags = (uint32_t)m->copyKind | (uint32_t)m->srcKind << 8 | (uint32_t)m->dstKind << 16;
        e->corr = m->correlationId ? m->correlationId : m->runtimeCorrelationId;
        e->name = intern(s, COPY_NAMES[m->copyKind < sizeof COPY_NAMES / sizeof *COPY_NAMES ? m->copyKind : 0], NULL);
        e->stream = as_id(m->streamId);
        e->device = (int16_t)m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: { /* between two devices: a MEMCPY event that also says which two */
        const CUpti_ActivityMemcpyPtoP4 *m = (const void *)r;
        if (!(e = push(s, K_MEMCPY))) return;
        span(s, e, m->start, m->end);
        e->value = (int64_t)m->bytes;
        e->flags = (uint32_t)m->copyKind | (uint32_t)m->srcKind << 8 | (uint32_t)m->dstKind << 16 |
                   peer_nibble(m->srcDeviceId) << 24 | peer_nibble(m->dstDeviceId) << 28;
        e->corr = m->correlationId;
        e->name = intern(s, COPY_NAMES[m->copyKind < sizeof COPY_NAMES / sizeof *COPY_NAMES ? m->copyKind : 0], NULL);
        e->stream = as_id(m->streamId);
        e->device = (int16_t)m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)r;
        if (!(e = push(s, K_MEMSET))) return;
        span(s, e, m->start, m->end);
        e->value = (int64_t)m->bytes;
        e->flags = m->memoryKind;
        e->corr = m->correlationId;
        e->name = intern(s, "Memset", NULL);
        e->stream = as_id(m->streamId);
        e->device = (int16_t)m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const void *)r;
        CUpti_CallbackDomain domain =
            r->kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
        if (!(e = push(s, K_RUNTIME))) return;
        span(s, e, a->start, a->end);
        e->value = a->returnValue;
        e->flags = (uint32_t)domain;
        e->corr = a->correlationId;
        e->tid = (int32_t)a->threadId;
        e->name = api_name(s, domain, a->cbid);
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *y = (const void *)r;
        if (!(e = push(s, K_SYNC))) return;
        span(s, e, y->start, y->end);
        e->value = as_id(y->cudaEventId);
        e->flags = (uint32_t)y->type;
        e->corr = y->correlationId;
        e->stream = as_id(y->streamId);
        e->name = intern(s, "Synchronization", NULL);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const CUpti_ActivityMemory4 *m = (const void *)r;
        int release = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
        if (!(e = push(s, K_GPU_MEMORY))) return;
        e->start = e->end = (int64_t)m->timestamp;
        e->value = release ? -(int64_t)m->bytes : (int64_t)m->bytes;
        e->flags = (uint32_t)m->memoryKind;
        e->corr = m->correlationId;
        e->stream = as_id(m->streamId);
        e->device = (int16_t)m->deviceId;
        e->name = intern(s, release ? "Memory free" : "Memory alloc", NULL);
        break;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const CUpti_ActivityOverhead3 *o = (const void *)r;
        if (!(e = push(s, K_OVERHEAD))) return;
        span(s, e, o->start, o->end);
        e->flags = (uint32_t)o->overheadKind;
        e->corr = o->correlationId;
        if (o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD)
            e->tid = (int32_t)o->objectId.pt.threadId;
        else if (o->objectKind >= CUPTI_ACTIVITY_OBJECT_DEVICE)
            e->device = (int16_t)o->objectId.dcs.deviceId;
        e->name = intern(s, overhead_name((uint32_t)o->overheadKind), NULL);
        break;
    }
    default:
        return; /* kinds we did not enable (another client's) are not ours to report */
    }
    /* A name that could not be interned (out of memory) must not reach Python as -1, where
       names[-1] would silently give the record the last name: the record is dropped and counted. */
    if (e->name < 0) {
        s->n--;
        s->dropped++;
    }
}

/* The one decoder: CUPTI's buffers and _decode's synthetic ones both come through here. Lock held. */
static void decode_buffer(Sink *s, uint8_t *buffer, size_t valid) {
    CUpti_Activity *r = NULL;
    while (valid && lib.cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) decode_record(s, r);
}

/* Buffers are fresh anonymous pages, which read as zero: CUPTI is told so (`zeroed_buffers`) and does not zero each
 * one itself in the thread that needs it. It did, 8 MB at every request: 0.79 ms a request by its own OVERHEAD records,
 * at the first record after a start and after every flush (H200, 2026-11-28). Only the pages records are written to
 * are ever faulted in, and munmap gives them all back at once. */
static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    pthread_mutex_lock(&g_lock);
    size_t want = g_buffer_size;
    pthread_mutex_unlock(&g_lock);
    void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL; /* CUPTI then drops records and counts them */
    *buffer = p;
    *size = p ? want : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    size_t dropped = 0;
    (void)size;
    if (lib.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
    pthread_mutex_lock(&g_lock);
    if (g_sink && buffer) {
        decode_buffer(g_sink, buffer, valid);
        g_sink->dropped += dropped;
    }
    pthread_mutex_unlock(&g_lock);
    if (buffer) munmap(buffer, size); /* `size`: what buffer_requested gave CUPTI */
}

/* Whether CUPTI may take our buffers as zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER; process-wide): on from
 * a start, off again at the stop, for another client of this libcupti that hands it buffers of its own. */
static void zeroed_buffers(uint8_t on) {
    size_t size = sizeof on;
    if (lib.set_attribute) lib.set_attribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &on);
}

/* ---- loading libcupti ---- */

static void note(PyObject *tried, const char *what, const char *why) {
    PyObject *line = PyUnicode_FromFormat("%s: %s", what, why ? why : "failed");
    if (line) PyList_Append(tried, line);
    Py_XDECREF(line);
    PyErr_Clear();
}

/* Opens one candidate and checks it; 0 when it became `lib`, else -1 with the reason in `tried`. */
static int try_open(const char *what, const char *path, int flags, PyObject *tried) {
    Library cand = {0};
    char why[PATH_MAX + 256];
    dlerror();
    if (!(cand.handle = dlopen(path, flags))) {
        const char *err = dlerror();
        note(tried, what, err ? err : "not loaded in this process");
        return -1;
    }
#define RESOLVE(f)                                                                                                     \
    if (!(*(void **)&cand.f = dlsym(cand.handle, #f))) {                                                               \
        note(tried, what, "lacks " #f ": not a usable libcupti");                                                      \
        dlclose(cand.handle);                                                                                          \
        return -1;                                                                                                     \
    }
    CUPTI_SYMBOLS(RESOLVE)
#undef RESOLVE
    for (int d = 0; d < 2; d++) *(void **)&cand.enable_api[d] = dlsym(cand.handle, API_DOMAINS[d].setter);
    *(void **)&cand.set_attribute = dlsym(cand.handle, "cuptiActivitySetAttribute");
    CUptiResult rc = cand.cuptiGetVersion(&cand.version);
    if (rc != CUPTI_SUCCESS || CUPTI_MAJOR(cand.version) != CUPTI_MAJOR(CUPTI_API_VERSION)) {
        if (rc != CUPTI_SUCCESS)
            snprintf(why, sizeof why, "cuptiGetVersion failed (%d)", (int)rc);
        else
            snprintf(why, sizeof why,
                     "CUPTI API version %u (CUDA %d) but this extension was built against %u (CUDA %d); "
                     "the activity record layouts may differ, so it refuses rather than misread them "
                     "(rebuild against the matching CUDA toolkit)",
                     cand.version, CUPTI_MAJOR(cand.version), (unsigned)CUPTI_API_VERSION,
                     CUPTI_MAJOR(CUPTI_API_VERSION));
        note(tried, what, why);
        dlclose(cand.handle);
        return -1;
    }
    Dl_info info;
    const char *where = dladdr(*(void **)&cand.cuptiGetVersion, &info) && info.dli_fname ? info.dli_fname : path;
    if (!realpath(where, cand.path)) snprintf(cand.path, sizeof cand.path, "%s", where);
    lib = cand;
    return 0;
}

static int try_dir(const char *dir, PyObject *tried) {
    char path[PATH_MAX + 32];
    char soname[32];
    const char *names[] = {soname, "libcupti.so"};
    int present = 0;
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUPTI_MAJOR(CUPTI_API_VERSION));
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, F_OK) != 0) continue;
        present = 1;
        if (try_open(path, path, RTLD_NOW | RTLD_LOCAL, tried) == 0) return 0;
    }
    if (!present) note(tried, dir, "no libcupti.so there");
    return -1;
}

/* The nvidia-cuda-cupti wheel (what torch installs): <sys.path entry>/nvidia/{cuda_cupti,cuNN}/lib. */
static int try_wheels(PyObject *tried) {
    PyObject *paths = PySys_GetObject("path"); /* borrowed */
    Py_ssize_t n = paths && PyList_Check(paths) ? PyList_Size(paths) : 0;
    char versioned[32];
    const char *subdirs[] = {"nvidia/cuda_cupti/lib", versioned};
    int found = 0;
    snprintf(versioned, sizeof versioned, "nvidia/cu%d/lib", CUPTI_MAJOR(CUPTI_API_VERSION));
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *entry =
            PyUnicode_Check(PyList_GetItem(paths, i)) ? PyUnicode_AsUTF8AndSize(PyList_GetItem(paths, i), NULL) : NULL;
        if (!entry) {
            PyErr_Clear();
            continue;
        }
        for (int j = 0; j < 2; j++) {
            char pattern[PATH_MAX];
            glob_t g;
            snprintf(pattern, sizeof pattern, "%s/%s/libcupti.so*", *entry ? entry : ".", subdirs[j]);
            if (glob(pattern, 0, NULL, &g) != 0) continue;
            for (size_t k = 0; k < g.gl_pathc; k++) {
                found = 1;
                if (try_open(g.gl_pathv[k], g.gl_pathv[k], RTLD_NOW | RTLD_LOCAL, tried) == 0) {
                    globfree(&g);
                    return 0;
                }
            }
            globfree(&g);
        }
    }
    if (!found) note(tried, "nvidia-cuda-cupti wheel", "not found under any sys.path entry");
    return -1;
}

static void find_demangler(void) {
    if (cxa_demangle) return;
    *(void **)&cxa_demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!cxa_demangle) {
        void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL); /* kept open: names need it */
        if (cxx) *(void **)&cxa_demangle = dlsym(cxx, "__cxa_demangle");
    }
}

/* Loads libcupti (once): the copy already in the process first, so Kineto and we share it. */
static int load_library(const char *path) {
    if (lib.handle) return 0;
    PyObject *tried = PyList_New(0);
    if (!tried) return -1;
    char soname[32];
    const char *sonames[] = {soname, "libcupti.so"};
    int ok = 0;
    snprintf(soname, sizeof soname, "libcupti.so.%d", CUPTI_MAJOR(CUPTI_API_VERSION));
    if (path) {
        ok = try_open(path, path, RTLD_NOW | RTLD_LOCAL, tried) == 0;
    } else {
        char label[64], dir[PATH_MAX];
        for (int i = 0; i < 2 && !ok; i++) {
            snprintf(label, sizeof label, "%s already in this process", sonames[i]);
            ok = try_open(label, sonames[i], RTLD_NOW | RTLD_NOLOAD, tried) == 0;
        }
        const char *home = getenv("CUDA_HOME");
        if (!ok && !(home && *home)) note(tried, "$CUDA_HOME", "not set");
        const char *roots[] = {home && *home ? home : NULL, "/usr/local/cuda"};
        for (int i = 0; i < 2 && !ok; i++) {
            if (!roots[i]) continue;
            snprintf(dir, sizeof dir, "%s/lib64", roots[i]);
            ok = try_dir(dir, tried) == 0;
        }
        ok = ok || try_wheels(tried) == 0;
        for (int i = 0; i < 2 && !ok; i++) {
            snprintf(label, sizeof label, "%s on the loader path", sonames[i]);
            ok = try_open(label, sonames[i], RTLD_NOW | RTLD_LOCAL, tried) == 0;
        }
    }
    if (ok) {
        find_demangler();
        Py_DECREF(tried);
        return 0;
    }
    PyObject *sep = PyUnicode_FromString("; ");
    PyObject *why = sep ? PyUnicode_Join(sep, tried) : NULL;
    if (why) PyErr_Format(CuptiError, "cannot load libcupti (tried: %U)", why);
    Py_XDECREF(sep);
    Py_XDECREF(why);
    Py_DECREF(tried);
    return -1;
}

/* ---- the Collector type ---- */

typedef struct {
    PyObject_HEAD Sink sink;
    PyObject *names; /* list[str]: sink.names converted so far */
    size_t buffer_size;
    int driver, active;
    uint64_t enabled; /* bit per CUpti_ActivityKind */
    int filtered[2];  /* [runtime, driver]: only the traced calls enabled by the last start */
    uint64_t api_started; /* the API kinds (bits by kind) the last start enabled: set_api_records turns these back on */
    char apis[256];   /* what the last start recorded of the runtime and driver APIs */
    CUpti_ActivityThreadIdType saved_tid_type;
    int tid_type_saved;
} Collector;

static const struct {
    CUpti_ActivityKind kind;
    const char *name;
    int required;
} KINDS[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", 1},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", 1},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", 1},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME", 1},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER", 0},
    {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION", 0},
    {CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2", 0},
    {CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", 0},
    {CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2", 0}, /* peer copies (between two devices) */
};
#define N_KINDS (sizeof KINDS / sizeof *KINDS)

static int collector_init(Collector *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buffer_size", "max_records", "driver", NULL};
    Py_ssize_t buffer_size = (Py_ssize_t)DEFAULT_BUFFER_SIZE, max_records = 0;
    int driver = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|nn$p", kwlist, &buffer_size, &max_records, &driver)) return -1;
    if (buffer_size < 65536 || buffer_size % 8 || max_records < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "buffer_size must be a multiple of 8 of at least 65536 bytes; max_records must be >= 0");
        return -1;
    }
    if (self->active) {
        PyErr_SetString(PyExc_RuntimeError, "cannot re-initialise a started Collector");
        return -1;
    }
    if (!self->names && !(self->names = PyList_New(0))) return -1;
    self->buffer_size = (size_t)buffer_size;
    self->sink.max = (size_t)max_records;
    self->driver = driver;
    return 0;
}

/* Why every call of domain d is recorded, or NULL when the traced ones can be picked. */
static const char *unfiltered(int d, char *why, size_t size) {
    if (every_api_call()) return "INFERSCOPE_CUPTI_ALL_API=1";
    if (lib.enable_api[d]) return NULL;
    snprintf(why, size, "this libcupti lacks %s", API_DOMAINS[d].setter);
    return why;
}

/* After cuptiActivityEnable(RUNTIME or DRIVER), which records every call: all but the traced calls off again.
 * Appends to self->apis what it did, or why every call stays recorded. */
static void filter_apis(Collector *self, int d) {
    uint8_t on[CBID_LIMIT] = {0};
    char why[128];
    size_t ok = 0, len = strlen(self->apis);
    CUptiResult rc = CUPTI_SUCCESS;
    const char *all = unfiltered(d, why, sizeof why);
    if (!all) {
        for (size_t i = 0; i < API_DOMAINS[d].n_traced; i++) on[API_DOMAINS[d].traced[i].cbid] = 1;
        for (CUpti_CallbackId cbid = 1; cbid < API_DOMAINS[d].size; cbid++) {
            CUptiResult r = lib.enable_api[d](cbid, on[cbid]);
            if (r == CUPTI_SUCCESS)
                ok++;
            else
                rc = r; /* a call this libcupti does not know: nothing to record either way */
        }
        self->filtered[d] = ok > 0;
        if (!ok) { /* nothing took, so the kind still records every call */
            snprintf(why, sizeof why, "%s returned %s", API_DOMAINS[d].setter, result_name(rc));
            all = why;
        }
    }
    if (all)
        snprintf(self->apis + len, sizeof self->apis - len, "%s%s: every call (%s)", len ? "; " : "",
                 API_DOMAINS[d].label, all);
    else
        snprintf(self->apis + len, sizeof self->apis - len, "%s%s: %zu traced calls of %u", len ? "; " : "",
                 API_DOMAINS[d].label, API_DOMAINS[d].n_traced, (unsigned)API_DOMAINS[d].size - 1);
}

static void disable_kinds(Collector *self) {
    for (size_t i = 0; i < N_KINDS; i++)
        if (self->enabled & (1ULL << KINDS[i].kind)) lib.cuptiActivityDisable(KINDS[i].kind);
    /* Per-call enables may outlive the kind (they record on their own without it): the traced ones off too. */
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; self->filtered[d] && i < API_DOMAINS[d].n_traced; i++)
            lib.enable_api[d](API_DOMAINS[d].traced[i].cbid, 0);
        self->filtered[d] = 0;
    }
}

static void release(Collector *self) {
    zeroed_buffers(0);
    if (self->tid_type_saved) lib.cuptiSetThreadIdType(self->saved_tid_type);
    self->tid_type_saved = 0;
    pthread_mutex_lock(&g_lock);
    if (g_sink == &self->sink) g_sink = NULL;
    pthread_mutex_unlock(&g_lock);
}

static PyObject *collector_start(Collector *self, PyObject *unused) {
    char what[96];
    CUptiResult rc;
    (void)unused;
    if (self->active) return PyErr_Format(PyExc_RuntimeError, "this Collector is already started");
    if (!self->names) return PyErr_Format(PyExc_RuntimeError, "Collector.__init__ was not called");
    if (load_library(NULL) < 0) return NULL;
    pthread_mutex_lock(&g_lock);
    Sink *other = g_sink;
    if (!other) {
        g_sink = &self->sink;
        self->sink.dropped = self->sink.incomplete = 0;
        g_buffer_size = self->buffer_size;
    }
    pthread_mutex_unlock(&g_lock);
    if (other)
        return PyErr_Format(CuptiBusyError,
                            "another _cupti.Collector is collecting; CUPTI allows one activity client per process");
    self->enabled = 0;
    self->apis[0] = '\0';
    self->tid_type_saved = lib.cuptiGetThreadIdType(&self->saved_tid_type) == CUPTI_SUCCESS;
    /* SYSTEM ids are gettid(), what threading.get_native_id() returns on the Python side. */
    if ((rc = lib.cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)) != CUPTI_SUCCESS) {
        snprintf(what, sizeof what, "cuptiSetThreadIdType(SYSTEM)");
        goto fail;
    }
    zeroed_buffers(1); /* a libcupti without the attribute zeroes them itself, as before */
    if ((rc = lib.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
        snprintf(what, sizeof what, "cuptiActivityRegisterCallbacks");
        goto fail;
    }
    for (size_t i = 0; i < N_KINDS; i++) {
        if (KINDS[i].kind == CUPTI_ACTIVITY_KIND_DRIVER && !self->driver) continue;
        rc = lib.cuptiActivityEnable(KINDS[i].kind);
        if (rc == CUPTI_SUCCESS) {
            self->enabled |= 1ULL << KINDS[i].kind;
            for (int d = 0; d < 2; d++)
                if (KINDS[i].kind == API_DOMAINS[d].kind) filter_apis(self, d);
        } else if (KINDS[i].required || is_busy(rc)) {
            snprintf(what, sizeof what, "cuptiActivityEnable(%s)", KINDS[i].name);
            goto fail;
        } /* optional kinds this device or driver lacks are left out; enabled() lists what ran */
    }
    self->api_started = self->enabled & ((1ULL << CUPTI_ACTIVITY_KIND_RUNTIME) | (1ULL << CUPTI_ACTIVITY_KIND_DRIVER));
    self->active = 1;
    Py_RETURN_NONE;
fail:
    disable_kinds(self);
    self->enabled = 0;
    release(self);
    return raise_cupti(what, rc);
}

static PyObject *collector_stop(Collector *self, PyObject *unused) {
    CUptiResult rc0, rc1;
    (void)unused;
    if (!self->active) Py_RETURN_NONE;
    self->active = 0;
    /* Records of finished work first; then nothing new; then what is still open (end = 0). */
    PyThreadState *ts = PyEval_SaveThread(); /* flushing runs our callback, which never needs the GIL */
    rc0 = lib.cuptiActivityFlushAll(0);
    disable_kinds(self);
    rc1 = lib.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    PyEval_RestoreThread(ts);
    release(self); /* and never cuptiFinalize: it breaks CUPTI for the rest of the process */
    if (rc0 != CUPTI_SUCCESS) return raise_cupti("cuptiActivityFlushAll(0)", rc0);
    if (rc1 != CUPTI_SUCCESS) return raise_cupti("cuptiActivityFlushAll(FORCED)", rc1);
    Py_RETURN_NONE;
}

static PyObject *collector_flush(Collector *self, PyObject *unused) {
    (void)unused;
    if (!self->active) Py_RETURN_NONE;
    PyThreadState *ts = PyEval_SaveThread(); /* flushing runs our callback, which never needs the GIL */
    CUptiResult rc = lib.cuptiActivityFlushAll(0);
    PyEval_RestoreThread(ts);
    if (rc != CUPTI_SUCCESS) return raise_cupti("cuptiActivityFlushAll(0)", rc);
    Py_RETURN_NONE;
}

static PyObject *collector_drain(Collector *self, PyObject *unused) {
    (void)unused;
    if (!self->names) return PyErr_Format(PyExc_RuntimeError, "Collector.__init__ was not called");
    Py_ssize_t have = PyList_Size(self->names);
    if (have < 0) return NULL;
    /* Snapshot under the lock, convert after: the Python C API can run arbitrary code (the GC,
       finalizers) and must not run while CUPTI's thread waits on g_lock. The name strings stay put
       until the Collector is freed (interning only appends), so their pointers can be copied. */
    pthread_mutex_lock(&g_lock);
    Event *ev = self->sink.ev;
    size_t n = self->sink.n;
    self->sink.ev = NULL;
    self->sink.n = self->sink.cap = 0;
    size_t n_new = self->sink.n_names > (size_t)have ? self->sink.n_names - (size_t)have : 0;
    char **fresh = n_new ? malloc(n_new * sizeof *fresh) : NULL;
    if (fresh) memcpy(fresh, self->sink.names + have, n_new * sizeof *fresh);
    pthread_mutex_unlock(&g_lock);
    int failed = n_new && !fresh;
    if (failed) PyErr_NoMemory();
    for (size_t i = 0; !failed && i < n_new; i++) {
        PyObject *name = PyUnicode_DecodeUTF8(fresh[i], (Py_ssize_t)strlen(fresh[i]), "replace");
        failed = !name || PyList_Append(self->names, name) < 0;
        Py_XDECREF(name);
    }
    free(fresh);
    PyObject *buf = failed ? NULL : PyByteArray_FromStringAndSize((const char *)ev, (Py_ssize_t)(n * sizeof(Event)));
    free(ev);
    if (!buf) { /* the records are lost: counted, so the report says so */
        pthread_mutex_lock(&g_lock);
        self->sink.dropped += n;
        pthread_mutex_unlock(&g_lock);
        return NULL;
    }
    return Py_BuildValue("(NN)", buf, PyList_GetSlice(self->names, 0, PY_SSIZE_T_MAX));
}

static PyObject *counter(Collector *self, int which) {
    pthread_mutex_lock(&g_lock);
    uint64_t v = which ? self->sink.incomplete : self->sink.dropped;
    pthread_mutex_unlock(&g_lock);
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *collector_dropped(Collector *self, PyObject *unused) {
    (void)unused;
    return counter(self, 0);
}

static PyObject *collector_incomplete(Collector *self, PyObject *unused) {
    (void)unused;
    return counter(self, 1);
}

static PyObject *collector_timestamp(Collector *self, PyObject *unused) {
    uint64_t t = 0;
    CUptiResult rc;
    (void)self, (void)unused;
    if (load_library(NULL) < 0) return NULL;
    if ((rc = lib.cuptiGetTimestamp(&t)) != CUPTI_SUCCESS) return raise_cupti("cuptiGetTimestamp", rc);
    return PyLong_FromUnsignedLongLong(t);
}

/* While collecting: the runtime/driver API records (the CPU side of each launch) off, or on again with the
 * same traced calls, so rounds that only time the body can leave out their per-launch cost. */
static PyObject *collector_set_api_records(Collector *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    if (!self->active) return PyErr_Format(PyExc_RuntimeError, "set_api_records needs a started Collector");
    for (int d = 0; d < 2; d++) {
        CUpti_ActivityKind kind = API_DOMAINS[d].kind;
        uint64_t bit = 1ULL << kind;
        if (!(self->api_started & bit)) continue; /* not recorded by this start (driver=False, or unsupported) */
        if (!on && (self->enabled & bit)) {
            lib.cuptiActivityDisable(kind);
            for (size_t i = 0; self->filtered[d] && i < API_DOMAINS[d].n_traced; i++)
                lib.enable_api[d](API_DOMAINS[d].traced[i].cbid, 0);
            self->filtered[d] = 0;
            self->enabled &= ~bit;
        } else if (on && !(self->enabled & bit)) {
            size_t len = strlen(self->apis);
            CUptiResult rc = lib.cuptiActivityEnable(kind);
            if (rc != CUPTI_SUCCESS)
                return raise_cupti(kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "cuptiActivityEnable(RUNTIME)"
                                                                       : "cuptiActivityEnable(DRIVER)",
                                   rc);
            self->enabled |= bit;
            filter_apis(self, d);
            self->apis[len] = '\0'; /* the description start() wrote still holds */
        }
    }
    Py_RETURN_NONE;
}

static PyObject *collector_api_records(Collector *self, PyObject *unused) {
    (void)unused;
    return PyUnicode_FromString(self->apis);
}

static PyObject *collector_enabled(Collector *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < N_KINDS; i++) {
        if (!(self->enabled & (1ULL << KINDS[i].kind))) continue;
        PyObject *s = PyUnicode_FromString(KINDS[i].name);
        if (!s || PyList_Append(out, s) < 0) Py_CLEAR(out);
        Py_XDECREF(s);
    }
    return out;
}

/* Test-only: decode a synthetic activity buffer with the same code as CUPTI's, then drain. */
static PyObject *collector_decode(Collector *self, PyObject *args) {
    Py_buffer view;
    void *copy = NULL;
    PyObject *arg;
    Py_ssize_t name_limit = 0;
    if (!PyArg_ParseTuple(args, "O|n", &arg, &name_limit)) return NULL;
    if (name_limit < 0) return PyErr_Format(PyExc_ValueError, "name_limit must be >= 0");
    if (load_library(NULL) < 0 || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (posix_memalign(&copy, 8, view.len ? (size_t)view.len : 8) != 0) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memcpy(copy, view.buf, (size_t)view.len);
    pthread_mutex_lock(&g_lock);
    self->sink.name_limit = (size_t)name_limit;
    decode_buffer(&self->sink, copy, (size_t)view.len);
    self->sink.name_limit = 0;
    pthread_mutex_unlock(&g_lock);
    free(copy);
    PyBuffer_Release(&view);
    return collector_drain(self, NULL);
}

static void collector_dealloc(Collector *self) {
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject *r = collector_stop(self, NULL);
    if (r)
        Py_DECREF(r);
    else
        PyErr_Clear();
    release(self);
    pthread_mutex_lock(&g_lock);
    sink_free(&self->sink);
    pthread_mutex_unlock(&g_lock);
    Py_XDECREF(self->names);
    ((freefunc)PyType_GetSlot(tp, Py_tp_free))(self);
    Py_DECREF(tp);
}

static PyMethodDef collector_methods[] = {
    {"start", (PyCFunction)collector_start, METH_NOARGS,
     "Enable activity collection. Raises CuptiBusyError when another CUPTI client holds CUPTI."},
    {"stop", (PyCFunction)collector_stop, METH_NOARGS,
     "Flush (then force-flush) and disable collection. Does not synchronise the device; never finalizes."},
    {"flush", (PyCFunction)collector_flush, METH_NOARGS,
     "While collecting: hand the records of finished work to drain(), collection going on."},
    {"drain", (PyCFunction)collector_drain, METH_NOARGS,
     "(bytearray of 48-byte EVENT_DTYPE records since the last drain, the full names list)."},
    {"dropped", (PyCFunction)collector_dropped, METH_NOARGS, "Records lost since start (CUPTI's and ours)."},
    {"incomplete", (PyCFunction)collector_incomplete, METH_NOARGS,
     "Records since start whose end is 0 or before their start (still running at a forced flush)."},
    {"timestamp", (PyCFunction)collector_timestamp, METH_NOARGS, "cuptiGetTimestamp(): CUPTI's clock now."},
    {"enabled", (PyCFunction)collector_enabled, METH_NOARGS, "CUPTI activity kinds enabled by the last start()."},
    {"set_api_records", (PyCFunction)collector_set_api_records, METH_O,
     "While collecting: runtime/driver API records off (False) or on again (True), the same calls traced."},
    {"api_records", (PyCFunction)collector_api_records, METH_NOARGS,
     "Which runtime and driver API calls the last start() records (all of them, and why, when not filtered)."},
    {"_decode", (PyCFunction)collector_decode, METH_VARARGS,
     "Test only: _decode(buffer, name_limit=0): decode a synthetic activity buffer, then drain; interning a "
     "name fails beyond name_limit names (as on OOM)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot collector_slots[] = {
    {Py_tp_doc, "Collector(buffer_size=8 MiB, max_records=0, *, driver=True): CUPTI activity records as EVENT_DTYPE."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, collector_init},
    {Py_tp_dealloc, collector_dealloc},
    {Py_tp_methods, collector_methods},
    {0, NULL},
};

static PyType_Spec collector_spec = {"pytest_inferscope._cupti.Collector", sizeof(Collector), 0, Py_TPFLAGS_DEFAULT,
                                     collector_slots};

/* ---- module functions ---- */

static PyObject *mod_load(PyObject *m, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"path", NULL};
    const char *path = NULL;
    (void)m;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|z", kwlist, &path)) return NULL;
    if (lib.handle && path) {
        char real[PATH_MAX];
        if (!realpath(path, real) || strcmp(real, lib.path) != 0)
            return PyErr_Format(CuptiError, "libcupti is already loaded from %s; cannot switch to %s", lib.path, path);
    }
    if (load_library(path) < 0) return NULL;
    return PyUnicode_DecodeFSDefault(lib.path);
}

static PyObject *mod_library(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    if (!lib.handle) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(lib.path);
}

static PyObject *mod_version(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    if (!lib.handle)
        return PyUnicode_FromFormat("built for CUPTI API %u; libcupti not loaded", (unsigned)CUPTI_API_VERSION);
    char why[128];
    const char *all = unfiltered(0, why, sizeof why);
    all = all ? all : unfiltered(1, why, sizeof why);
    return PyUnicode_FromFormat("built for CUPTI API %u; libcupti %u from %s; API records: %s%s%s",
                                (unsigned)CUPTI_API_VERSION, lib.version, lib.path,
                                all ? "every call (" : "launches, copies, memsets, syncs and allocations only",
                                all ? all : "", all ? ")" : "");
}

static PyMethodDef module_methods[] = {
    {"load", (PyCFunction)(void (*)(void))mod_load, METH_VARARGS | METH_KEYWORDS,
     "load(path=None) -> str: load libcupti (once) and check its API version; raises CuptiError with "
     "every place tried and why it failed."},
    {"library", mod_library, METH_NOARGS, "Path of the loaded libcupti, or None."},
    {"version", mod_version, METH_NOARGS, "Compiled CUPTI API version, and the loaded library's version and path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, .m_name = "pytest_inferscope._cupti", .m_size = -1,
                                        .m_methods = module_methods,
                                        .m_doc = "Native CUPTI activity collector (see native/README.md)."};

static int add_layout(PyObject *m) {
#define FIELD(f) #f, (int)offsetof(Event, f), (int)sizeof(((Event *)0)->f)
    PyObject *layout = Py_BuildValue("{s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)s(ii)}", FIELD(start),
                                     FIELD(end), FIELD(value), FIELD(corr), FIELD(name), FIELD(tid), FIELD(stream),
                                     FIELD(device), FIELD(kind), FIELD(domain), FIELD(flags));
#undef FIELD
    int rc = layout ? PyModule_AddObjectRef(m, "RECORD_LAYOUT", layout) : -1;
    Py_XDECREF(layout);
    return rc;
}

/* TRACED_APIS: {"runtime": {name: cbid}, "driver": {...}}, the calls recorded unless INFERSCOPE_CUPTI_ALL_API=1. */
static int add_traced(PyObject *m) {
    PyObject *all = PyDict_New();
    for (int d = 0; all && d < 2; d++) {
        PyObject *names = PyDict_New();
        for (size_t i = 0; names && i < API_DOMAINS[d].n_traced; i++) {
            PyObject *cbid = PyLong_FromUnsignedLong(API_DOMAINS[d].traced[i].cbid);
            if (!cbid || PyDict_SetItemString(names, API_DOMAINS[d].traced[i].name, cbid) < 0) Py_CLEAR(names);
            Py_XDECREF(cbid);
        }
        if (!names || PyDict_SetItemString(all, API_DOMAINS[d].label, names) < 0) Py_CLEAR(all);
        Py_XDECREF(names);
    }
    int rc = all ? PyModule_AddObjectRef(m, "TRACED_APIS", all) : -1;
    Py_XDECREF(all);
    return rc;
}

PyMODINIT_FUNC PyInit__cupti(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    CuptiError =
        PyErr_NewExceptionWithDoc("pytest_inferscope._cupti.CuptiError",
                                  "libcupti cannot be loaded, or a CUPTI call failed.", PyExc_RuntimeError, NULL);
    CuptiBusyError =
        CuptiError ? PyErr_NewExceptionWithDoc("pytest_inferscope._cupti.CuptiBusyError",
                                               "CUPTI is held by another profiler in this process.", CuptiError, NULL)
                   : NULL;
    PyObject *type = PyType_FromSpec(&collector_spec);
    /* PyModule_AddObjectRef never steals: `type` is ours to release on every path, once. */
    int failed = !CuptiBusyError || !type || PyModule_AddObjectRef(m, "Collector", type) < 0 ||
                 PyModule_AddObjectRef(m, "CuptiError", CuptiError) < 0 ||
                 PyModule_AddObjectRef(m, "CuptiBusyError", CuptiBusyError) < 0 ||
                 PyModule_AddIntConstant(m, "API_VERSION", CUPTI_API_VERSION) < 0 ||
                 PyModule_AddIntConstant(m, "RECORD_SIZE", (long)sizeof(Event)) < 0 || add_layout(m) < 0 ||
                 add_traced(m) < 0;
    Py_XDECREF(type);
    if (failed) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
