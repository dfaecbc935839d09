/* The stack sampler's clock without a signal (`--inferscope-sampler=trip`, collectors/cpu.py `TripSampler`).
 *
 * A thread of ours, plain C (never Python, never the GIL), wakes every interval and "trips" a signal number with
 * PyErr_SetInterruptEx: CPython then runs that number's Python handler in the main thread between two bytecodes,
 * as it would for a signal that arrived, with the interrupted frame. No signal is sent: no system call of anyone's
 * returns EINTR, and the wall-clock timer and SIGALRM stay free for pytest-timeout and the test. (Py_AddPendingCall
 * from a thread of its own does not wake the eval loop before CPython 3.13: it ran 0 calls in 200 ms of pure
 * Python on 3.11 and 3.12.)
 *
 * start(interval_ns, signum[, thread_id]): trip signum every interval_ns until stop(); its handler must be a Python
 * function. A signal whose disposition is the default or ignore (a test reset it, or the interpreter is finalising)
 * is not sent: a real-time signal's default action ends the process.
 * stop(): no trip after it returns (one already tripped runs its handler at the next check). Neither blocks: the
 * thread is started once, and waits on a condition variable between two starts.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
/* All under mu. */
static int have_thread, running, signum, direct;
static pthread_t target;
static int64_t period_ns;
static struct timespec due;
static unsigned long trips; /* since the last start */

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

static void *loop(void *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!running) pthread_cond_wait(&cv, &mu);
        pthread_cond_timedwait(&cv, &mu, &due); /* woken early by start or stop: the checks below */
        int64_t now = now_ns(), at = to_ns(&due);
        if (!running || now < at) continue;
        at += period_ns;
        due = from_ns(at > now ? at : now + period_ns); /* fallen behind (a descheduled thread): no burst */
        /* Under mu, so that no trip comes after stop() returns: async-signal-safe, it never blocks. */
        if (direct) { /* never where the signal would take its default action, which ends the process */
            struct sigaction now_sa;
            if (sigaction(signum, NULL, &now_sa) == 0 && now_sa.sa_handler != SIG_DFL && now_sa.sa_handler != SIG_IGN)
                pthread_kill(target, signum);
        } else {
            PyErr_SetInterruptEx(signum); /* a no-op where the Python handler is SIG_DFL or SIG_IGN */
        }
        trips++;
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
}

static PyObject *tick_start(PyObject *self, PyObject *args) {
    (void)self;
    long long interval_ns;
    unsigned long long thread_id = 0;
    int sig;
    if (!PyArg_ParseTuple(args, "Li|K:start", &interval_ns, &sig, &thread_id)) return NULL;
    if (interval_ns < 10000 || sig < 1) {
        PyErr_SetString(PyExc_ValueError, "start: interval_ns must be at least 10000 and signum positive");
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
    running = 1;
    signum = sig;
    direct = thread_id != 0;
    target = (pthread_t)thread_id;
    period_ns = interval_ns;
    trips = 0;
    due = from_ns(now_ns() + interval_ns);
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    Py_RETURN_NONE;
}

static PyObject *tick_stop(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&mu);
    running = 0;
    unsigned long n = trips;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    return PyLong_FromUnsignedLong(n);
}

static PyMethodDef methods[] = {
    {"start", tick_start, METH_VARARGS, "start(interval_ns, signum): trip signum every interval_ns."},
    {"stop", tick_stop, METH_NOARGS, "stop() -> the number of trips since start: none after it returns."},
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
