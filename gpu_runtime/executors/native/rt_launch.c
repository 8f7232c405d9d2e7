/* The real-time launch path: arrival -> preemption flag -> RT graph, as one call.
 *
 * Called through ctypes from the thread where an RT request arrives (ctypes releases the GIL for
 * the call), so no scheduler Python and no thread hand-off sits between the arrival and the
 * launch. The flag is raised by a stream-ordered write on the RT stream itself, just ahead of the
 * RT graph: best-effort kernels see it at their next block or tile, and the RT graph's blocks,
 * on the highest-priority stream, take the SMs they leave. libcuda is opened with dlopen, so
 * building this needs no CUDA headers or toolkit, only a C compiler.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c11 */
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

typedef int (*write_value32_fn)(void *stream, unsigned long long address, unsigned int value,
                                unsigned int flags);
typedef int (*graph_launch_fn)(void *graph_exec, void *stream);
typedef int (*event_record_fn)(void *event, void *stream);
typedef int (*ctx_set_current_fn)(void *context);

static ctx_set_current_fn ctx_set_current;
static write_value32_fn write_value32;
static graph_launch_fn graph_launch;
static event_record_fn event_record;

/* One RT program on one stream; every handle is the driver's (CUstream, CUgraphExec, CUevent). */
typedef struct {
  void *context;                /* the CUcontext the handles belong to */
  void *stream;
  unsigned long long flag;      /* device address of the best-effort guard flag */
  void *flag_event;             /* recorded after the flag write: restore waits for it */
  void *graph;
  void *done_event;             /* recorded after the graph */
  volatile const int32_t *started; /* host view of the word the graph's stamp kernel sets, or 0 */
} atoll_rt_program;

int atoll_rt_open(const char *libcuda) {
  void *lib = dlopen(libcuda, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  write_value32 = (write_value32_fn)dlsym(lib, "cuStreamWriteValue32_v2");
  if (!write_value32) write_value32 = (write_value32_fn)dlsym(lib, "cuStreamWriteValue32");
  graph_launch = (graph_launch_fn)dlsym(lib, "cuGraphLaunch");
  event_record = (event_record_fn)dlsym(lib, "cuEventRecord");
  ctx_set_current = (ctx_set_current_fn)dlsym(lib, "cuCtxSetCurrent");
  return write_value32 && graph_launch && event_record && ctx_set_current ? 0 : -2;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t); /* CPython's time.perf_counter clock on Linux */
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Launches the program, raising the flag first when `preempt`; stores when the call began in
 * *entered_at. With `wait_s` > 0 it then spins (GIL released) until the stamp kernel has run or
 * `wait_s` passed, and stores when it saw it in *started_at (0 if it did not). Returns the first
 * driver error, or 0. */
int atoll_rt_fire(const atoll_rt_program *p, int preempt, double wait_s, double *entered_at,
                  double *started_at) {
  int rc;
  *entered_at = now();
  *started_at = 0.0;
  /* The arriving thread may never have touched CUDA; the driver API needs a current context. */
  if ((rc = ctx_set_current(p->context))) return rc;
  if (preempt) {
    if ((rc = write_value32(p->stream, p->flag, 1u, 0u))) return rc;
    if ((rc = event_record(p->flag_event, p->stream))) return rc;
  }
  if ((rc = graph_launch(p->graph, p->stream))) return rc;
  if ((rc = event_record(p->done_event, p->stream))) return rc;
  if (wait_s > 0.0 && p->started) {
    const double limit = *entered_at + wait_s;
    while (!*p->started) {
      if (now() > limit) return 0;
    }
    *started_at = now();
  }
  return 0;
}
