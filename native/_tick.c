/* The stack sampler's clock (`--inferscope-sampler=signal` and `pending`, collectors/cpu_tick.py `SignalSampler`).
 *
 * A thread of ours, plain C (it never runs Python, and takes the GIL only for a nudge, below), wakes every interval
 * and has CPython run the sampler in the main thread between two bytecodes, with the interrupted frame. Two ways, one
 * per start:
 *
 * - a pending call (Py_AddPendingCall), which calls `callback(frame)` in the main thread. No signal is sent: no
 *   system call of anyone's fails with EINTR. CPython wakes the main thread's eval loop for it from 3.13 on; before,
 *   a pending call queued from a thread of ours waits for the main thread's next GIL switch (at 10 ms, 0 calls in
 *   200 ms of pure Python on 3.11 and 3.12, 19 on 3.13). PyErr_SetInterruptEx is not used: from a thread without the
 *   GIL it compares the handler objects, and where the handler is SIG_DFL that crashed 3.13 (a test found it).
 * - a signal sent to the main thread alone (pthread_kill), whose Python handler takes the sample: before 3.13. Never
 *   while the signal's disposition is the default or ignore (a test reset it, or the interpreter is finalising): a
 *   real-time signal's default action ends the process.
 *
 * Before 3.13 a pending call runs at the main thread's next GIL switch: at once where it lets the GIL go (a torch op,
 * a CUDA launch, a sleep), never in pure Python. With nudge_ns, a call still queued that long after its tick, the
 * main thread at work, is nudged: this thread takes the GIL and gives it back (PyGILState_Ensure: after the switch
 * interval CPython asks the main thread for it), and the main thread runs the call on its way (before 3.13 it runs
 * pending calls before it lets the GIL go at such a request), or as it takes the GIL back. One forced hand-over, as
 * a sampler thread's, where nothing else switches the GIL; none where something does.
 *
 * start(interval_ns, callback, signum, thread_id[, watch_id, watch_tid[, nudge_ns]]): thread_id 0: pending calls of
 * callback; else signum to thread_id. With watch_id and watch_tid (the sampled thread's pthread id and native id),
 * each tick that calls or signals first asks whether that thread is at work: on a CPU (its CPU clock read twice moved)
 * or runnable ('R' in its /proc stat). at_work() says it for the last such tick (the thread's CPU clock there, -1:
 * waiting), so a sample taken for it can tell a thread at work from one waiting for an event (a sleep, I/O, a lock),
 * whose time off a CPU since the last sample lies at the sample's own stack.
 * stop(): nothing after it returns (a pending call queued before it returns without calling anything; a signal sent
 * before it reaches its handler, which the caller leaves installed; a nudge under way only takes and gives back the
 * GIL). Neither blocks: the thread is started once, and waits on a condition variable between two starts. Returns the
 * number of ticks since the start; nudges() the number of nudges.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
/* Under mu. */
static int have_thread, running, signum;
static pthread_t target;   /* the main thread, or 0: pending calls */
static int direct;         /* a signal to `target` */
static uintptr_t gen;      /* one per start and stop: a pending call of an earlier one does nothing */
static int64_t period_ns;
static struct timespec due;
static unsigned long ticks; /* since the last start */
static atomic_int queued;   /* QUEUED: a pending call is queued and has not run yet; RUNNING: it runs; else 0 */
enum { QUEUED = 1, RUNNING = 2 };
static int watching;        /* under mu: watch_clock is the sampled thread's CPU clock */
static clockid_t watch_clock;
static int watch_fd = -1;   /* under mu: its /proc/self/task/<tid>/stat from start to stop, or -1 */
static _Atomic int64_t at_work; /* the last tick that called or signalled: the thread's CPU clock if it was at work
                                   there, else -1 */
static int64_t nudge_ns;    /* under mu: a pending call still queued this long after its tick is nudged; 0: never */
static int64_t queued_at;   /* under mu: when the queued call was queued */
static int nudge_looked;    /* under mu: the queued call's nudge was looked at (once a call) */
static unsigned long nudges; /* under mu: since the last start */
static atomic_int nudging;  /* this thread waits for the GIL for a nudge; the call, run before it gets it, clears it */

/* Under the GIL. */
static PyObject *callback;
static uintptr_t callback_gen;

static int64_t to_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec; }

static struct timespec from_ns(int64_t ns) {
    struct timespec t = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    return t;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return to_ns(&t);
}

/* In the main thread, with the GIL. An exception of the callback is reported, never raised into the test. */
static int fire(void *arg) {
    /* No call is queued while this one runs: CPython 3.11 runs pending calls one at a time and does not clear the
     * eval breaker for one queued meanwhile, and once a GIL re-take in the callback had set it, a traced or profiled
     * thread (sys.setprofile: coverage, debuggers) looped on the next Python function's entry until a thread of
     * another's cleared it (a hung test, found in this suite; tests/unit/test_tick.py). */
    atomic_store(&queued, RUNNING);
    if (atomic_exchange(&nudging, 0)) { /* a nudge's request came while the thread ran Python: at work till now */
        struct timespec t;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0) atomic_store(&at_work, to_ns(&t));
    }
    if ((uintptr_t)arg == callback_gen && callback != NULL) {
        PyObject *frame = (PyObject *)PyEval_GetFrame(); /* borrowed; NULL outside Python code */
        PyObject *result = PyObject_CallFunctionObjArgs(callback, frame ? frame : Py_None, NULL);
        if (result == NULL) PyErr_WriteUnraisable(callback);
        Py_XDECREF(result);
    }
    atomic_store(&queued, 0);
    return 0;
}

/* The watched thread's CPU clock if it is at work now, else -1. At work: on a CPU (its CPU clock, read twice, moved:
 * Linux brings a running thread's up to the nanosecond at each read), or runnable ('R' in its /proc stat: this
 * thread's wake-up may have taken its core, or it waits for one). A thread waiting for an event (a sleep, I/O, a lock)
 * is neither. */
static int64_t watched_at_work(void) {
    struct timespec a, b;
    if (!watching || clock_gettime(watch_clock, &a) != 0 || clock_gettime(watch_clock, &b) != 0) return -1;
    if (to_ns(&b) > to_ns(&a)) return to_ns(&b);
    char buf[512];
    ssize_t n = watch_fd < 0 ? -1 : pread(watch_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *end = strrchr(buf, ')'); /* "tid (comm) S ...": the name may hold a ')' */
    return end != NULL && end[1] == ' ' && end[2] == 'R' ? to_ns(&b) : -1;
}

static void tick(void) { /* under mu */
    if (direct) {
        struct sigaction sa;
        if (sigaction(signum, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN) {
            atomic_store(&at_work, watched_at_work());
            pthread_kill(target, signum);
        }
    } else {
        int idle = 0; /* none more while the last has not run (the main thread is in C) or runs now */
        if (atomic_compare_exchange_strong(&queued, &idle, QUEUED)) {
            atomic_store(&at_work, watched_at_work());
            if (Py_AddPendingCall(fire, (void *)gen) != 0) atomic_store(&queued, 0); /* CPython's queue is full */
            queued_at = now_ns();
            nudge_looked = 0;
        }
    }
    ticks++;
}

/* Under mu, with a queued call nudge_ns old and the main thread at work: take the GIL and give it back, mu let go
 * meanwhile (stop() holds the GIL as it takes mu). Returns under mu. */
static void nudge(void) {
    atomic_store(&nudging, 1);
    nudges++;
    pthread_mutex_unlock(&mu);
    PyGILState_STATE state = PyGILState_Ensure();
    /* Still set: the main thread let the GIL go itself (a C call) and runs the call as it takes it back; its state now
     * stands for the call's instant, as a tick's does. Read with the GIL, which start() and stop() hold. */
    if (atomic_exchange(&nudging, 0) && running) atomic_store(&at_work, watched_at_work());
    PyGILState_Release(state);
    pthread_mutex_lock(&mu);
}

static void *loop(void *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!running) pthread_cond_wait(&cv, &mu);
        int look = nudge_ns > 0 && !nudge_looked && atomic_load(&queued) == QUEUED;
        struct timespec wake = look && queued_at + nudge_ns < to_ns(&due) ? from_ns(queued_at + nudge_ns) : due;
        pthread_cond_timedwait(&cv, &mu, &wake); /* woken early by start or stop: the checks below */
        if (!running) continue;
        int64_t now = now_ns(), at = to_ns(&due);
        if (look && !nudge_looked && atomic_load(&queued) == QUEUED && now >= queued_at + nudge_ns) {
            nudge_looked = 1;
            /* Waiting (a sleep, I/O): the call runs as the wait ends. Not watched: at work, its clock unknown (0). */
            int64_t clock = watching ? watched_at_work() : 0;
            if (clock >= 0) {
                atomic_store(&at_work, clock);
                nudge();
                continue;
            }
        }
        if (now < at) continue;
        at += period_ns;
        due = from_ns(at > now ? at : now + period_ns); /* fallen behind (a descheduled thread): no burst */
        tick(); /* under mu, so that nothing is sent after stop() returns; neither way blocks */
    }
    return NULL;
}

static void init_cv(void) { /* waits measured on the monotonic clock, as `due` is */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &attr);
    pthread_condattr_destroy(&attr);
}

static void after_fork_in_child(void) { /* the thread is not in the child: a later start() makes a new one */
    pthread_mutex_init(&mu, NULL);
    init_cv();
    have_thread = 0;
    running = 0;
    watching = 0;
    if (watch_fd >= 0) close(watch_fd); /* the parent's thread's */
    watch_fd = -1;
    atomic_store(&queued, 0);
    atomic_store(&nudging, 0);
}

static PyObject *tick_start(PyObject *self, PyObject *args) {
    (void)self;
    long long interval_ns;
    PyObject *cb;
    int sig;
    unsigned long long thread_id, watch_id = 0, tid = 0;
    long long nudge_after = 0;
    if (!PyArg_ParseTuple(args, "LOiK|KKL:start", &interval_ns, &cb, &sig, &thread_id, &watch_id, &tid, &nudge_after))
        return NULL;
    clockid_t clock = 0;
    if (watch_id != 0 && pthread_getcpuclockid((pthread_t)watch_id, &clock) != 0) watch_id = 0; /* no clock: not told */
    if (interval_ns < 10000 || !PyCallable_Check(cb) || (thread_id != 0 && sig < 1) || nudge_after < 0 ||
        (nudge_after > 0 && thread_id != 0)) {
        PyErr_SetString(PyExc_ValueError, "start: interval_ns must be at least 10000, callback callable, signum "
                                          "positive with a thread, and nudge_ns not negative, and 0 with a thread");
        return NULL;
    }
    pthread_mutex_lock(&mu);
    if (!have_thread) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, loop, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            pthread_mutex_unlock(&mu);
            errno = rc;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        have_thread = 1;
    }
    gen++;
    running = 1;
    signum = sig;
    direct = thread_id != 0;
    target = (pthread_t)thread_id;
    period_ns = interval_ns;
    ticks = 0;
    nudges = 0;
    nudge_ns = nudge_after;
    nudge_looked = 1; /* until a call is queued */
    watching = watch_id != 0;
    watch_clock = clock;
    if (watch_fd >= 0) close(watch_fd); /* a start after a start */
    watch_fd = -1;
    if (tid != 0) { /* closed at the stop: nothing of the clock's stays open between two collections */
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%llu/stat", tid);
        watch_fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    atomic_store(&at_work, -1);
    due = from_ns(now_ns() + interval_ns);
    uintptr_t g = gen;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    PyObject *old = callback;
    Py_INCREF(cb);
    callback = cb;
    callback_gen = g;
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyObject *tick_stop(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&mu);
    gen++;
    running = 0;
    watching = 0;
    if (watch_fd >= 0) close(watch_fd);
    watch_fd = -1;
    unsigned long n = ticks;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    callback_gen = 0;
    Py_CLEAR(callback);
    return PyLong_FromUnsignedLong(n);
}

static PyObject *tick_nudges(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&mu);
    unsigned long n = nudges;
    pthread_mutex_unlock(&mu);
    return PyLong_FromUnsignedLong(n);
}

static PyObject *tick_at_work(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromLongLong((long long)atomic_load(&at_work));
}

static PyMethodDef methods[] = {
    {"start", tick_start, METH_VARARGS,
     "start(interval_ns, callback, signum, thread_id[, watch_id, watch_tid[, nudge_ns]]): every interval, "
     "callback(frame) in the main thread by a pending call (thread_id 0), or signum sent to thread_id; with watch_id "
     "and watch_tid, at_work() says that thread's state; with nudge_ns, a call still queued that long after its tick, "
     "the thread at work, is nudged by a GIL hand-over."},
    {"at_work", tick_at_work, METH_NOARGS,
     "at_work() -> the watched thread's CPU clock (ns) at the last tick that called or signalled if it found it at "
     "work (on a CPU or runnable), else -1."},
    {"stop", tick_stop, METH_NOARGS, "stop() -> the ticks since start(): nothing after it returns."},
    {"nudges", tick_nudges, METH_NOARGS, "nudges() -> the GIL hand-overs made for pending calls since start()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tick", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tick(void) {
    static int once;
    if (!once) {
        init_cv();
        pthread_atfork(NULL, NULL, after_fork_in_child);
        once = 1;
    }
    return PyModule_Create(&module);
}
