/*
 * fake_nvml.c - a stand-in libnvidia-ml.so.1 for gpufleet's tests.
 *
 * The real pynvml loads this through LD_LIBRARY_PATH, so the agent's real NVML code path runs end to
 * end on a machine with no GPU. Struct layouts follow the pinned nvidia-ml-py ctypes definitions.
 *
 * Everything the library reports comes from a plain text state file named by $GPUFLEET_FAKE_NVML_STATE,
 * one `key value` per line (# starts a comment). It is re-read whenever its inode, size or mtime
 * changes (checked on every call), so a test can change the GPUs while the agent runs. Keys:
 *   driver S | nvml S | cuda N | init_error CODE | gpu.count N | xid.SEQ GPU CODE
 *   gpu.I.{name,uuid,serial,pci_bus_id} S
 *   gpu.I.{util,util_mem,mem_total,mem_used,mem_reserved,temp,temp_shutdown,temp_slowdown,temp_mem_max,
 *          temp_gpu_max,power_mw,power_limit_mw,clock_graphics,clock_sm,clock_mem,clock_video,throttle,fan,
 *          ecc_corrected,ecc_uncorrected,ecc_agg_corrected,ecc_agg_uncorrected,mig,mig_pending,mig_max,
 *          pci_domain,pci_bus,pci_device,pci_device_id,pci_subsys,event_types,lost,sm_active,tensor_active,
 *          dram_active,temp_hbm,recovery_action,remap_corr,remap_unc,remap_pending,remap_failed,energy_mj,
 *          hang} N
 *   (sm_active: GPM SM activity %, Hopper+; absent: nvmlGpmQueryDeviceSupport says the GPU has no GPM)
 *   gpu.I.unsupported F,F.. | gpu.I.noperm F,F.. | gpu.I.fail.F CODE       (F: a feature name below)
 *   gpu.I.proc.J.{pid,mem,sm,memutil,enc,dec,gi,ci} N   (mem "na": not available; sm absent or 0: no sample)
 *   gpu.I.proc.J.type compute|graphics|both|mps
 *   gpu.I.mig.J.{name,uuid} S | gpu.I.mig.J.{gi,ci,mem_total,mem_used,mem_reserved} N
 * A reading whose key is absent answers NVML_ERROR_NOT_SUPPORTED. gpu.I.lost makes every call on that
 * GPU answer NVML_ERROR_GPU_IS_LOST. Xid events are delivered once each, in SEQ order, by nvmlEventSetWait.
 * A missing symbol (FUNCTION_NOT_FOUND) is made at link time with a version script (see fakelib.py).
 *
 * What real drivers do, modelled here (the tests that rely on each name the source):
 * - per-process utilization: samples only for processes that ran kernels; NOT_FOUND when none did
 *   (NVML API reference, nvmlDeviceGetProcessUtilization);
 * - the _v3 process lists write the struct the driver was built with: 32 bytes (usedGpuCcProtectedMemory)
 *   on r535 drivers, which export nvmlDeviceGetConfComputeMemSizeInfo but not
 *   nvmlDeviceGetRunningProcessDetailList; 24 bytes otherwise (nvitop issue #75 and PR #79). This library
 *   looks at its own exported symbols, so a build that omits DetailList is an r535 driver;
 * - MIG: the parent has no utilization or per-process utilization, lists processes only for root (the
 *   caller's real euid), and each MIG device lists its own (NVML API reference, "Multi-Instance GPU");
 * - nvmlEventSetWait answers GPU_IS_LOST while a registered GPU is lost;
 * - gpu.I.hang 1: every call on that GPU blocks (without the library lock) until the key goes back to 0,
 *   as a read stuck in D state after some Xids.
 */
#include <dlfcn.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 16
#define MAX_PROCS 256
#define MAX_MIG 8
#define MAX_XIDS 128
#define MAX_SETS 8
#define STR_LEN 96
#define UNSET LLONG_MIN
#define XID_EVENT 0x8ULL
#define MEMORY_V2 0x02000028u      /* nvmlMemory_v2: version 2, sizeof 40 */
#define TEMPERATURE_V1 0x0100000Cu /* nvmlTemperature_v1: version 1, sizeof 12 */

/* ---- structs, field for field as in pynvml ---- */
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned version; int sensorType; int temperature; } nvmlTemperature_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* pynvml: c_nvmlProcessInfo_v3_t is the v2 layout */
typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct dev *nvmlDevice_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; } nvmlEventData_v1_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct eset *nvmlEventSet_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlTemperature_t) == 12, "nvmlTemperature_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");

/* ---- the model ---- */
enum { F_NAME, F_UUID, F_SERIAL, F_PCI, F_UTIL, F_MEMORY, F_MEMORY_V2, F_TEMPERATURE, F_THRESHOLDS, F_POWER,
       F_POWER_LIMIT, F_CLOCKS, F_THROTTLE, F_FAN, F_ECC, F_MIG, F_PROCESSES, F_GRAPHICS, F_PROCESS_UTIL,
       F_EVENTS, F_HANDLE, F_MPS, F_REMAP, F_ENERGY, F_FIELDS, F_COUNT,
       F_MIGID = F_COUNT /* gi/ci ids: always allowed on a MIG handle */ };
static const char *const feature_names[F_COUNT] = {
    "name", "uuid", "serial", "pci", "util", "memory", "memory_v2", "temperature", "thresholds", "power",
    "power_limit", "clocks", "throttle", "fan", "ecc", "mig", "processes", "graphics_processes",
    "process_util", "events", "handle", "mps_processes", "remapped_rows", "energy", "field_values"};

enum { K_UTIL, K_UTIL_MEM, K_MEM_TOTAL, K_MEM_USED, K_MEM_RESERVED, K_TEMP, K_TEMP_SHUTDOWN, K_TEMP_SLOWDOWN,
       K_TEMP_MEM_MAX, K_TEMP_GPU_MAX, K_POWER, K_POWER_LIMIT, K_CLK_GRAPHICS, K_CLK_SM, K_CLK_MEM, K_CLK_VIDEO,
       K_THROTTLE, K_FAN, K_ECC_CORR, K_ECC_UNCORR, K_ECC_AGG_CORR, K_ECC_AGG_UNCORR, K_MIG, K_MIG_PENDING,
       K_MIG_MAX, K_PCI_DOMAIN, K_PCI_BUS, K_PCI_DEVICE, K_PCI_DEVICE_ID, K_PCI_SUBSYS, K_EVENT_TYPES, K_LOST,
       K_UTIL_ENC, K_UTIL_DEC, K_PSTATE, K_PERSISTENCE, K_COMPUTE_MODE, K_DISPLAY_ACTIVE, K_GI, K_CI, K_SM_ACTIVE,
       K_TENSOR_ACTIVE, K_DRAM_ACTIVE, K_TEMP_HBM, K_RECOVERY, K_REMAP_CORR, K_REMAP_UNC, K_REMAP_PENDING,
       K_REMAP_FAILED, K_ENERGY, K_HANG, K_COUNT };
static const char *const key_names[K_COUNT] = {
    "util", "util_mem", "mem_total", "mem_used", "mem_reserved", "temp", "temp_shutdown", "temp_slowdown",
    "temp_mem_max", "temp_gpu_max", "power_mw", "power_limit_mw", "clock_graphics", "clock_sm", "clock_mem",
    "clock_video", "throttle", "fan", "ecc_corrected", "ecc_uncorrected", "ecc_agg_corrected",
    "ecc_agg_uncorrected", "mig", "mig_pending", "mig_max", "pci_domain", "pci_bus", "pci_device",
    "pci_device_id", "pci_subsys", "event_types", "lost", "util_enc", "util_dec", "pstate", "persistence",
    "compute_mode", "display_active", "gi", "ci", "sm_active", "tensor_active", "dram_active", "temp_hbm",
    "recovery_action", "remap_corr", "remap_unc", "remap_pending", "remap_failed", "energy_mj", "hang"};

enum { S_NAME, S_UUID, S_SERIAL, S_PCI_BUS_ID, S_COUNT };
static const char *const str_names[S_COUNT] = {"name", "uuid", "serial", "pci_bus_id"};

enum { P_COMPUTE = 1, P_GRAPHICS = 2, P_MPS = 4 };
struct proc { unsigned pid; unsigned long long mem; long long sm, memutil, enc, dec; unsigned gi, ci; int type; };

struct dev {
    struct dev *parent; /* set on MIG devices */
    long long v[K_COUNT];
    char s[S_COUNT][STR_LEN];
    int has_s[S_COUNT];
    int err[F_COUNT];
    int nproc, nmig;
    struct proc *procs; /* GPUs only: a row of proc_rows */
};
struct xid { long long seq; int gpu; unsigned long long code; };
struct eset { int used; unsigned long long mask[MAX_GPUS]; };

static struct {
    char driver[STR_LEN], nvml[STR_LEN];
    long long cuda;
    int init_error, ngpu, nxid;
    struct xid xids[MAX_XIDS];
} sys_state;
static struct dev gpus[MAX_GPUS];
static struct dev migs[MAX_GPUS][MAX_MIG];
static struct proc proc_rows[MAX_GPUS][MAX_PROCS]; /* apart from dev, so only rows in use are touched */
static struct eset sets[MAX_SETS];
static long long delivered = LLONG_MIN; /* highest Xid seq handed out: each event happens once */
static int init_count;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct stat seen;

/* ---- state file ---- */
static void dev_reset(struct dev *d, struct dev *parent) {
    memset(d, 0, sizeof *d);
    d->parent = parent;
    for (int k = 0; k < K_COUNT; k++) d->v[k] = UNSET;
}

static void copy_str(char *dst, const char *src) { snprintf(dst, STR_LEN, "%s", src); }

static int feature_index(const char *name, size_t len) {
    for (int f = 0; f < F_COUNT; f++)
        if (strlen(feature_names[f]) == len && strncmp(feature_names[f], name, len) == 0) return f;
    return -1;
}

static void set_errors(struct dev *d, const char *list, int code) {
    while (*list) {
        size_t len = strcspn(list, ", ");
        int f = feature_index(list, len);
        if (f >= 0) d->err[f] = code;
        list += len;
        list += strspn(list, ", ");
    }
}

/* A field of a GPU or MIG device: a string, a number, or an error list. Unknown keys are ignored. */
static void parse_dev_field(struct dev *d, const char *field, const char *value) {
    for (int i = 0; i < S_COUNT; i++)
        if (strcmp(field, str_names[i]) == 0) { copy_str(d->s[i], value); d->has_s[i] = 1; return; }
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(field, key_names[k]) == 0) { d->v[k] = strtoll(value, NULL, 0); return; }
    if (strcmp(field, "unsupported") == 0) set_errors(d, value, NVML_ERROR_NOT_SUPPORTED);
    else if (strcmp(field, "noperm") == 0) set_errors(d, value, NVML_ERROR_NO_PERMISSION);
    else if (strncmp(field, "fail.", 5) == 0) {
        int f = feature_index(field + 5, strlen(field + 5));
        if (f >= 0) d->err[f] = atoi(value);
    }
}

static void parse_proc_field(struct proc *p, const char *field, const char *value) {
    long long n = strtoll(value, NULL, 0);
    if (strcmp(field, "pid") == 0) p->pid = (unsigned)n;
    else if (strcmp(field, "mem") == 0) p->mem = strcmp(value, "na") == 0 ? ULLONG_MAX : (unsigned long long)n;
    else if (strcmp(field, "sm") == 0) p->sm = n;
    else if (strcmp(field, "memutil") == 0) p->memutil = n;
    else if (strcmp(field, "enc") == 0) p->enc = n;
    else if (strcmp(field, "dec") == 0) p->dec = n;
    else if (strcmp(field, "gi") == 0) p->gi = (unsigned)n;
    else if (strcmp(field, "ci") == 0) p->ci = (unsigned)n;
    else if (strcmp(field, "type") == 0)
        p->type = strcmp(value, "graphics") == 0 ? P_GRAPHICS
                  : strcmp(value, "both") == 0   ? P_COMPUTE | P_GRAPHICS
                  : strcmp(value, "mps") == 0    ? P_MPS
                                                  : P_COMPUTE;
}

static struct proc *proc_at(struct dev *g, int j) {
    if (j < 0 || j >= MAX_PROCS) return NULL;
    for (; g->nproc <= j; g->nproc++) {
        struct proc *p = &g->procs[g->nproc];
        memset(p, 0, sizeof *p);
        p->sm = p->memutil = p->enc = p->dec = -1;
        p->gi = p->ci = 0xFFFFFFFFu;
        p->type = P_COMPUTE;
    }
    return &g->procs[j];
}

static void parse_line(char *key, const char *value, int *explicit_count) {
    int i, j, n = 0;
    char *rest;
    if (strcmp(key, "driver") == 0) copy_str(sys_state.driver, value);
    else if (strcmp(key, "nvml") == 0) copy_str(sys_state.nvml, value);
    else if (strcmp(key, "cuda") == 0) sys_state.cuda = strtoll(value, NULL, 0);
    else if (strcmp(key, "init_error") == 0) sys_state.init_error = atoi(value);
    else if (strcmp(key, "gpu.count") == 0) *explicit_count = atoi(value);
    else if (sscanf(key, "xid.%d%n", &i, &n) == 1 && key[n] == 0 && sys_state.nxid < MAX_XIDS) {
        struct xid *x = &sys_state.xids[sys_state.nxid];
        if (sscanf(value, "%d %llu", &x->gpu, &x->code) == 2) { x->seq = i; sys_state.nxid++; }
    } else if ((n = 0, sscanf(key, "gpu.%d.%n", &i, &n)) == 1 && n > 0 && i >= 0 && i < MAX_GPUS) {
        struct dev *g = &gpus[i];
        rest = key + n;
        if (i >= sys_state.ngpu) sys_state.ngpu = i + 1;
        if ((n = 0, sscanf(rest, "proc.%d.%n", &j, &n)) == 1 && n > 0) {
            struct proc *p = proc_at(g, j);
            if (p) parse_proc_field(p, rest + n, value);
        } else if ((n = 0, sscanf(rest, "mig.%d.%n", &j, &n)) == 1 && n > 0 && j >= 0 && j < MAX_MIG) {
            if (j >= g->nmig) g->nmig = j + 1;
            parse_dev_field(&migs[i][j], rest + n, value);
        } else {
            parse_dev_field(g, rest, value);
        }
    }
}

/* Parse the state file into the live model (caller holds mu). A missing file means "no driver". */
static int load_state(const char *path) {
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int explicit_count = -1;
    if (!f) return -1;
    memset(&sys_state, 0, sizeof sys_state);
    sys_state.cuda = UNSET;
    for (int i = 0; i < MAX_GPUS; i++) {
        dev_reset(&gpus[i], NULL);
        gpus[i].procs = proc_rows[i];
        for (int j = 0; j < MAX_MIG; j++) dev_reset(&migs[i][j], &gpus[i]);
    }
    while (getline(&line, &cap, f) >= 0) {
        char *key = line + strspn(line, " \t"), *value, *end;
        if (*key == '#' || *key == '\n' || *key == 0) continue;
        value = key + strcspn(key, " \t\n");
        if (*value) *value++ = 0;
        value += strspn(value, " \t");
        end = value + strlen(value);
        while (end > value && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
        parse_line(key, value, &explicit_count);
    }
    free(line);
    fclose(f);
    if (explicit_count >= 0) sys_state.ngpu = explicit_count < MAX_GPUS ? explicit_count : MAX_GPUS;
    return 0;
}

static double elapsed_ms(const struct timespec *a, const struct timespec *b) {
    return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* Re-read the state file when it changed (caller holds mu). A stat per call costs about a microsecond,
 * and it means a change is visible to the very next call: no sleeps in tests. */
static int refresh(int force) {
    const char *path = getenv("GPUFLEET_FAKE_NVML_STATE");
    struct stat st;
    if (!path || stat(path, &st) != 0) return -1;
    if (!force && st.st_ino == seen.st_ino && st.st_size == seen.st_size &&
        st.st_mtim.tv_sec == seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == seen.st_mtim.tv_nsec)
        return 0;
    seen = st;
    return load_state(path);
}

static nvmlReturn_t leave(nvmlReturn_t rc) { pthread_mutex_unlock(&mu); return rc; }

/* Lock, check init, refresh. On failure returns the error with the lock released. */
static nvmlReturn_t enter(void) {
    pthread_mutex_lock(&mu);
    if (init_count == 0) return leave(NVML_ERROR_UNINITIALIZED);
    refresh(0);
    return NVML_SUCCESS;
}

static int valid_dev(const struct dev *d) {
    for (int i = 0; i < sys_state.ngpu; i++) {
        if (d == &gpus[i]) return 1;
        for (int j = 0; j < gpus[i].nmig; j++)
            if (d == &migs[i][j]) return 1;
    }
    return 0;
}

/* enter() plus handle validation, a hang, and the per-feature error (lost, unsupported, no permission).
 * A hung GPU blocks its caller with the lock released, so the other GPUs keep answering. */
static nvmlReturn_t dev_enter(struct dev *d, int feature) {
    nvmlReturn_t rc = enter();
    const struct dev *gpu = d;
    if (rc != NVML_SUCCESS) return rc;
    if (!d || !valid_dev(d)) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (d->parent) gpu = d->parent;
    while (gpu->v[K_HANG] > 0) {
        struct timespec nap = {0, 20 * 1000 * 1000};
        leave(NVML_SUCCESS);
        nanosleep(&nap, NULL);
        if ((rc = enter()) != NVML_SUCCESS) return rc;
        if (!valid_dev(d)) return leave(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->v[K_LOST] > 0) return leave(NVML_ERROR_GPU_IS_LOST);
    if (feature == F_MIGID) return NVML_SUCCESS;
    if (d->parent && feature != F_NAME && feature != F_UUID && feature != F_MEMORY && feature != F_MEMORY_V2 &&
        feature != F_PROCESSES && feature != F_GRAPHICS && feature != F_MPS)
        return leave(NVML_ERROR_NOT_SUPPORTED);
    if (d->err[feature]) return leave(d->err[feature]);
    return NVML_SUCCESS;
}

/* A MIG GPU's parent: utilization and per-process utilization are not supported there (nvitop issue #5). */
static int in_mig(const struct dev *d) { return !d->parent && d->v[K_MIG] > 0; }

#define DEV(h, feature) do { nvmlReturn_t rc_ = dev_enter((h), (feature)); if (rc_) return rc_; } while (0)
#define NEED(cond) do { if (!(cond)) return leave(NVML_ERROR_INVALID_ARGUMENT); } while (0)
#define VAL(d, k, out) \
    do { if ((d)->v[k] == UNSET) return leave(NVML_ERROR_NOT_SUPPORTED); (out) = (d)->v[k]; } while (0)

static nvmlReturn_t put_str(char *buf, unsigned len, const char *s, int present) {
    if (!present) return leave(NVML_ERROR_NOT_SUPPORTED);
    if (!buf) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (strlen(s) + 1 > len) return leave(NVML_ERROR_INSUFFICIENT_SIZE);
    memcpy(buf, s, strlen(s) + 1);
    return leave(NVML_SUCCESS);
}

/* ---- init, system ---- */
nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    if (refresh(1) != 0) return leave(NVML_ERROR_DRIVER_NOT_LOADED);
    if (sys_state.init_error) return leave(sys_state.init_error);
    init_count++;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    if (init_count == 0) return leave(NVML_ERROR_UNINITIALIZED);
    init_count--;
    return leave(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t sys_str(char *buf, unsigned len, const char *which) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    return put_str(buf, len, which, which[0] != 0);
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len) { return sys_str(buf, len, sys_state.driver); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned len) { return sys_str(buf, len, sys_state.nvml); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(version);
    if (sys_state.cuda == UNSET) return leave(NVML_ERROR_NOT_SUPPORTED);
    *version = (int)sys_state.cuda;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

/* ---- enumeration ---- */
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(count);
    *count = (unsigned)sys_state.ngpu;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(device && index < (unsigned)sys_state.ngpu);
    if (gpus[index].v[K_LOST] > 0) return leave(NVML_ERROR_GPU_IS_LOST);
    if (gpus[index].err[F_HANDLE]) return leave(gpus[index].err[F_HANDLE]);
    *device = &gpus[index];
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(uuid && device);
    for (int i = 0; i < sys_state.ngpu; i++)
        if (gpus[i].has_s[S_UUID] && strcmp(gpus[i].s[S_UUID], uuid) == 0) {
            *device = &gpus[i];
            return leave(NVML_SUCCESS);
        }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    DEV(d, F_MIGID);
    NEED(index && !d->parent);
    *index = (unsigned)(d - gpus);
    return leave(NVML_SUCCESS);
}

/* ---- identity ---- */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len) {
    DEV(d, F_NAME);
    return put_str(buf, len, d->s[S_NAME], d->has_s[S_NAME]);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len) {
    DEV(d, F_UUID);
    return put_str(buf, len, d->s[S_UUID], d->has_s[S_UUID]);
}
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *buf, unsigned len) {
    DEV(d, F_SERIAL);
    return put_str(buf, len, d->s[S_SERIAL], d->has_s[S_SERIAL]);
}

static nvmlReturn_t pci_info(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    long long dom, bus, devno, id, sub;
    DEV(d, F_PCI);
    NEED(pci);
    if (!d->has_s[S_PCI_BUS_ID]) return leave(NVML_ERROR_NOT_SUPPORTED);
    VAL(d, K_PCI_DOMAIN, dom); VAL(d, K_PCI_BUS, bus); VAL(d, K_PCI_DEVICE, devno);
    VAL(d, K_PCI_DEVICE_ID, id); VAL(d, K_PCI_SUBSYS, sub);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.0",
             (unsigned)dom & 0xffff, (unsigned)bus & 0xff, (unsigned)devno & 0xff);
    memcpy(pci->busId, d->s[S_PCI_BUS_ID], strnlen(d->s[S_PCI_BUS_ID], sizeof pci->busId - 1));
    pci->domain = (unsigned)dom; pci->bus = (unsigned)bus; pci->device = (unsigned)devno;
    pci->pciDeviceId = (unsigned)id; pci->pciSubSystemId = (unsigned)sub;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) { return pci_info(d, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci) { return pci_info(d, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci) { return pci_info(d, pci); }

/* ---- readings ---- */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    long long gpu, mem;
    DEV(d, F_UTIL);
    NEED(u);
    if (in_mig(d)) return leave(NVML_ERROR_NOT_SUPPORTED);
    VAL(d, K_UTIL, gpu);
    VAL(d, K_UTIL_MEM, mem);
    u->gpu = (unsigned)gpu; u->memory = (unsigned)mem;
    return leave(NVML_SUCCESS);
}

/* ---- GPM (Hopper+): a metric compares two samples; SM activity is the newer sample's sm_active ---- */
typedef struct { unsigned version, isSupportedDevice; } nvmlGpmSupport_t;
typedef struct gpm_sample { struct dev *d; long long sm, tensor, dram; } *nvmlGpmSample_t;
typedef struct { const char *shortName, *longName, *unit; } nvmlGpmMetricInfo_t;
typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[]; /* pynvml: NVML_GPM_METRIC_MAX of them; numMetrics are read */
} nvmlGpmMetricsGet_t;
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t");
_Static_assert(sizeof(nvmlGpmMetricsGet_t) == 24, "nvmlGpmMetricsGet_t header");
#define GPM_METRIC_GRAPHICS_UTIL 1u
#define GPM_METRIC_SM_UTIL 2u
#define GPM_METRIC_ANY_TENSOR_UTIL 5u
#define GPM_METRIC_DRAM_BW_UTIL 10u

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *support) {
    DEV(d, F_UTIL);
    NEED(support && support->version == 1);
    support->isSupportedDevice = d->v[K_SM_ACTIVE] != UNSET;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(sample);
    *sample = calloc(1, sizeof **sample);
    return leave(*sample ? NVML_SUCCESS : NVML_ERROR_UNKNOWN);
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(sample);
    free(sample);
    return leave(NVML_SUCCESS);
}
static void gpm_take(struct dev *d, nvmlGpmSample_t sample) {
    sample->tensor = d->v[K_TENSOR_ACTIVE];
    sample->dram = d->v[K_DRAM_ACTIVE];
    sample->d = d;
}
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t sample) {
    DEV(d, F_UTIL);
    NEED(sample);
    if (in_mig(d)) return leave(NVML_ERROR_NOT_SUPPORTED); /* a MIG GPU is sampled per GPU instance */
    VAL(d, K_SM_ACTIVE, sample->sm);
    gpm_take(d, sample);
    return leave(NVML_SUCCESS);
}
/* One GPU instance of a MIG GPU, on the parent's handle (this fake: the GPU's own activity). */
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned gi, nvmlGpmSample_t sample) {
    int found = 0;
    DEV(d, F_UTIL);
    NEED(sample && !d->parent && in_mig(d));
    for (int j = 0; j < d->nmig; j++) found |= migs[d - gpus][j].v[K_GI] == (long long)gi;
    NEED(found);
    VAL(d, K_SM_ACTIVE, sample->sm);
    gpm_take(d, sample);
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(m && m->version == 1 && m->sample1 && m->sample2 && m->numMetrics <= 477);
    NEED(m->sample1->d && m->sample1->d == m->sample2->d);
    for (unsigned i = 0; i < m->numMetrics; i++) {
        unsigned id = m->metrics[i].metricId;
        long long v = id == GPM_METRIC_SM_UTIL || id == GPM_METRIC_GRAPHICS_UTIL ? m->sample2->sm
                      : id == GPM_METRIC_ANY_TENSOR_UTIL                        ? m->sample2->tensor
                      : id == GPM_METRIC_DRAM_BW_UTIL                           ? m->sample2->dram
                                                                                : UNSET;
        m->metrics[i].nvmlReturn = v == UNSET ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        m->metrics[i].value = v == UNSET ? 0.0 : (double)v;
    }
    return leave(NVML_SUCCESS);
}

/* v1 counts reserved memory as used, as real drivers do: that is why callers want v2. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    long long total, used, reserved;
    DEV(d, F_MEMORY);
    NEED(m);
    VAL(d, K_MEM_TOTAL, total);
    VAL(d, K_MEM_USED, used);
    reserved = d->v[K_MEM_RESERVED] == UNSET ? 0 : d->v[K_MEM_RESERVED];
    m->total = (unsigned long long)total;
    m->used = (unsigned long long)(used + reserved);
    m->free = (unsigned long long)(total - used - reserved);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    long long total, used, reserved;
    DEV(d, F_MEMORY_V2);
    NEED(m);
    if (m->version != MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (d->err[F_MEMORY]) return leave(d->err[F_MEMORY]);
    VAL(d, K_MEM_TOTAL, total);
    VAL(d, K_MEM_USED, used);
    reserved = d->v[K_MEM_RESERVED] == UNSET ? 0 : d->v[K_MEM_RESERVED];
    m->total = (unsigned long long)total;
    m->reserved = (unsigned long long)reserved;
    m->used = (unsigned long long)used;
    m->free = (unsigned long long)(total - used - reserved);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *temp) {
    long long t;
    DEV(d, F_TEMPERATURE);
    NEED(temp && sensor == 0);
    VAL(d, K_TEMP, t);
    *temp = (unsigned)t;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *t) {
    long long v;
    DEV(d, F_TEMPERATURE);
    NEED(t);
    if (t->version != TEMPERATURE_V1) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    NEED(t->sensorType == 0);
    VAL(d, K_TEMP, v);
    t->temperature = (int)v;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int which, unsigned *temp) {
    static const int keys[] = {K_TEMP_SHUTDOWN, K_TEMP_SLOWDOWN, K_TEMP_MEM_MAX, K_TEMP_GPU_MAX};
    long long t;
    DEV(d, F_THRESHOLDS);
    NEED(temp && which >= 0);
    if (which >= 4) return leave(NVML_ERROR_NOT_SUPPORTED);
    VAL(d, keys[which], t);
    *temp = (unsigned)t;
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t get_uint(nvmlDevice_t d, int feature, int key, unsigned *out) {
    long long v;
    DEV(d, feature);
    NEED(out);
    VAL(d, key, v);
    *out = (unsigned)v;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw) { return get_uint(d, F_POWER, K_POWER, mw); }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *mw) {
    return get_uint(d, F_POWER_LIMIT, K_POWER_LIMIT, mw);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned *mw) {
    return get_uint(d, F_POWER_LIMIT, K_POWER_LIMIT, mw);
}
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned *speed) { return get_uint(d, F_FAN, K_FAN, speed); }

/* What nvitop and gpustat also read (encoder/decoder load, P-state, modes): so they run on the fake too. */
static nvmlReturn_t codec_util(nvmlDevice_t d, int key, unsigned *util, unsigned *period_us) {
    long long v;
    DEV(d, F_UTIL);
    NEED(util && period_us);
    VAL(d, key, v);
    *util = (unsigned)v;
    *period_us = 167000; /* what real drivers report for the codec sampling window */
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned *util, unsigned *period_us) {
    return codec_util(d, K_UTIL_ENC, util, period_us);
}
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned *util, unsigned *period_us) {
    return codec_util(d, K_UTIL_DEC, util, period_us);
}
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *pstate) {
    return get_uint(d, F_CLOCKS, K_PSTATE, (unsigned *)pstate);
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode) {
    return get_uint(d, F_NAME, K_PERSISTENCE, (unsigned *)mode);
}
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode) {
    return get_uint(d, F_NAME, K_COMPUTE_MODE, (unsigned *)mode);
}
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, int *active) {
    return get_uint(d, F_NAME, K_DISPLAY_ACTIVE, (unsigned *)active);
}
nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, int *mode) {
    return get_uint(d, F_NAME, K_DISPLAY_ACTIVE, (unsigned *)mode);
}
/* Windows only (WDDM / TCC): a Linux driver exports it and answers "not supported". */
nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t d, int *current, int *pending) {
    DEV(d, F_NAME);
    (void)current;
    (void)pending;
    return leave(NVML_ERROR_NOT_SUPPORTED);
}
nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t d, unsigned fan, unsigned *speed) {
    if (fan != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(d, F_FAN, K_FAN, speed);
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count) {
    return get_uint(d, F_MIG, K_MIG_MAX, count);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    static const int keys[] = {K_CLK_GRAPHICS, K_CLK_SM, K_CLK_MEM, K_CLK_VIDEO};
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint(d, F_CLOCKS, keys[type], mhz);
}

static nvmlReturn_t clock_reasons(nvmlDevice_t d, unsigned long long *reasons) {
    long long v;
    DEV(d, F_THROTTLE);
    NEED(reasons);
    VAL(d, K_THROTTLE, v);
    *reasons = (unsigned long long)v;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    return clock_reasons(d, r);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    return clock_reasons(d, r);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type, unsigned long long *count) {
    long long v;
    DEV(d, F_ECC);
    NEED(count && (error_type == 0 || error_type == 1) && (counter_type == 0 || counter_type == 1));
    VAL(d, counter_type == 0 ? (error_type == 0 ? K_ECC_CORR : K_ECC_UNCORR)
                             : (error_type == 0 ? K_ECC_AGG_CORR : K_ECC_AGG_UNCORR), v);
    *count = (unsigned long long)v;
    return leave(NVML_SUCCESS);
}

/* ---- health ---- */
typedef union { double dVal; unsigned uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal;
                int siVal; unsigned short usVal; } nvmlValue_t;
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
#define FI_DEV_MEMORY_TEMP 82u
#define FI_DEV_GET_GPU_RECOVERY_ACTION 230u

/* Each value carries its own return code: a field this GPU lacks is NOT_SUPPORTED alone. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    DEV(d, F_FIELDS);
    NEED(values && count >= 0);
    for (int i = 0; i < count; i++) {
        unsigned id = values[i].fieldId;
        long long v = id == FI_DEV_MEMORY_TEMP ? d->v[K_TEMP_HBM] : id == FI_DEV_GET_GPU_RECOVERY_ACTION ? d->v[K_RECOVERY] : UNSET;
        values[i].nvmlReturn = v == UNSET ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        values[i].valueType = 1; /* unsigned int */
        values[i].value.ullVal = 0;
        values[i].value.uiVal = v == UNSET ? 0u : (unsigned)v;
    }
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corr, unsigned *unc, unsigned *pending,
                                       unsigned *failure) {
    long long c, u, p, f;
    DEV(d, F_REMAP);
    NEED(corr && unc && pending && failure);
    VAL(d, K_REMAP_CORR, c);
    VAL(d, K_REMAP_UNC, u);
    p = d->v[K_REMAP_PENDING] == UNSET ? 0 : d->v[K_REMAP_PENDING];
    f = d->v[K_REMAP_FAILED] == UNSET ? 0 : d->v[K_REMAP_FAILED];
    *corr = (unsigned)c; *unc = (unsigned)u; *pending = (unsigned)p; *failure = (unsigned)f;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    long long v;
    DEV(d, F_ENERGY);
    NEED(mj);
    VAL(d, K_ENERGY, v);
    *mj = (unsigned long long)v;
    return leave(NVML_SUCCESS);
}

/* ---- MIG ---- */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending) {
    long long cur;
    DEV(d, F_MIG);
    NEED(current && pending);
    VAL(d, K_MIG, cur);
    *current = (unsigned)cur;
    *pending = (unsigned)(d->v[K_MIG_PENDING] == UNSET ? cur : d->v[K_MIG_PENDING]);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index, nvmlDevice_t *mig) {
    long long max, mode;
    DEV(d, F_MIG);
    NEED(mig && !d->parent);
    VAL(d, K_MIG_MAX, max);
    VAL(d, K_MIG, mode);
    NEED(index < (unsigned long long)max);
    if (mode == 0 || index >= (unsigned)d->nmig) return leave(NVML_ERROR_NOT_FOUND);
    *mig = &migs[d - gpus][index];
    return leave(NVML_SUCCESS);
}

static nvmlReturn_t instance_id(nvmlDevice_t d, int key, unsigned *id) {
    long long v;
    DEV(d, F_MIGID);
    NEED(id && d->parent);
    VAL(d, key, v);
    *id = (unsigned)v;
    return leave(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned *id) { return instance_id(d, K_GI, id); }
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned *id) { return instance_id(d, K_CI, id); }

/* ---- processes ---- */
/* Which struct the _v3 lists write: the r535 layout (32 bytes) when this build exports
 * nvmlDeviceGetConfComputeMemSizeInfo but not nvmlDeviceGetRunningProcessDetailList, like an r535 driver;
 * 24 bytes otherwise. Decided from this library's own dynamic symbols (a version script can hide them). */
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_r535_t;
_Static_assert(sizeof(nvmlProcessInfo_r535_t) == 32, "nvmlProcessInfo_r535_t");
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t d, void *info);
static int exported(const char *symbol) {
    Dl_info self;
    void *lib;
    int found;
    if (!dladdr((void *)nvmlDeviceGetConfComputeMemSizeInfo, &self) || !self.dli_fname) return 0;
    lib = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return 0;
    found = dlsym(lib, symbol) != NULL;
    dlclose(lib);
    return found;
}
static size_t v3_size(void) {
    static size_t size;
    if (!size)
        size = exported("nvmlDeviceGetConfComputeMemSizeInfo") && !exported("nvmlDeviceGetRunningProcessDetailList")
                   ? sizeof(nvmlProcessInfo_r535_t) : sizeof(nvmlProcessInfo_t);
    return size;
}

/* The processes a handle lists: its own on a GPU; on a MIG device those of its GPU instance; on the parent
 * of a MIG GPU every instance's, but only for root (the caller's real euid). */
static int listed(const struct dev *d, const struct proc *p, int type) {
    if (!(p->type & type)) return 0;
    return !d->parent || (long long)p->gi == d->v[K_GI];
}

/* The probe contract pynvml relies on: count 0 -> SUCCESS if none, INSUFFICIENT_SIZE (with count) if some. */
static nvmlReturn_t running(nvmlDevice_t d, int feature, int type, unsigned *count, void *out, size_t elem) {
    unsigned n = 0, k = 0;
    const struct dev *g;
    DEV(d, feature);
    NEED(count);
    if (in_mig(d) && geteuid() != 0) return leave(NVML_ERROR_NO_PERMISSION);
    g = d->parent ? d->parent : d;
    for (int i = 0; i < g->nproc; i++) n += listed(d, &g->procs[i], type);
    if (*count < n || (n > 0 && !out)) { *count = n; return leave(NVML_ERROR_INSUFFICIENT_SIZE); }
    for (int i = 0; i < g->nproc; i++) {
        const struct proc *p = &g->procs[i];
        nvmlProcessInfo_r535_t info = {p->pid, p->mem, p->gi, p->ci, 0};
        if (!listed(d, p, type)) continue;
        memcpy((char *)out + elem * k++, &info, elem);
    }
    *count = n;
    return leave(NVML_SUCCESS);
}
#define PROCESS_CALLS(Name, feature, type)                                                                  \
    nvmlReturn_t nvmlDeviceGet##Name##RunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *infos) {  \
        return running(d, feature, type, count, infos, v3_size());                                        \
    }                                                                                                        \
    nvmlReturn_t nvmlDeviceGet##Name##RunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *infos) {  \
        return running(d, feature, type, count, infos, sizeof(nvmlProcessInfo_t));                        \
    }                                                                                                        \
    nvmlReturn_t nvmlDeviceGet##Name##RunningProcesses(nvmlDevice_t d, unsigned *count, void *infos) {     \
        return running(d, feature, type, count, infos, sizeof(nvmlProcessInfo_v1_t));                     \
    }
PROCESS_CALLS(Compute, F_PROCESSES, P_COMPUTE)
PROCESS_CALLS(Graphics, F_GRAPHICS, P_GRAPHICS)
PROCESS_CALLS(MPSCompute, F_MPS, P_MPS)

/* r535's confidential-computing call (its presence marks an r535-or-later driver) and r545's detail list
 * (its absence, with the former, marks r535): stubs that answer "not supported". */
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t d, void *info) {
    DEV(d, F_NAME);
    (void)info;
    return leave(NVML_ERROR_NOT_SUPPORTED);
}
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t d, void *plist) {
    DEV(d, F_NAME);
    (void)plist;
    return leave(NVML_ERROR_NOT_SUPPORTED);
}

/* Like real NVML: NOT_FOUND when no process ran kernels since last_seen (timestamps in µs). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                             unsigned *count, unsigned long long last_seen) {
    struct timespec now;
    unsigned long long ts;
    unsigned n = 0, k = 0;
    DEV(d, F_PROCESS_UTIL);
    NEED(count);
    if (in_mig(d)) return leave(NVML_ERROR_NOT_SUPPORTED);
    clock_gettime(CLOCK_REALTIME, &now);
    ts = (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL;
    if (ts <= last_seen) return leave(NVML_ERROR_NOT_FOUND);
    for (int i = 0; i < d->nproc; i++) n += d->procs[i].sm > 0; /* ran kernels: only those have samples */
    if (n == 0) return leave(NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) { *count = n; return leave(NVML_ERROR_INSUFFICIENT_SIZE); }
    for (int i = 0; i < d->nproc; i++) {
        const struct proc *p = &d->procs[i];
        if (p->sm <= 0) continue;
        samples[k].pid = p->pid;
        samples[k].timeStamp = ts;
        samples[k].smUtil = (unsigned)p->sm;
        samples[k].memUtil = (unsigned)(p->memutil < 0 ? 0 : p->memutil);
        samples[k].encUtil = (unsigned)(p->enc < 0 ? 0 : p->enc);
        samples[k].decUtil = (unsigned)(p->dec < 0 ? 0 : p->dec);
        k++;
    }
    *count = n;
    return leave(NVML_SUCCESS);
}

/* ---- events ---- */
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    long long v;
    DEV(d, F_EVENTS);
    NEED(types && !d->parent);
    VAL(d, K_EVENT_TYPES, v);
    *types = (unsigned long long)v;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(set);
    for (int i = 0; i < MAX_SETS; i++)
        if (!sets[i].used) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].used = 1;
            *set = &sets[i];
            return leave(NVML_SUCCESS);
        }
    return leave(NVML_ERROR_UNKNOWN);
}

static int valid_set(const struct eset *s) {
    for (int i = 0; i < MAX_SETS; i++)
        if (s == &sets[i] && sets[i].used) return 1;
    return 0;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    long long supported;
    DEV(d, F_EVENTS);
    NEED(!d->parent && valid_set(set));
    VAL(d, K_EVENT_TYPES, supported);
    if (types & ~(unsigned long long)supported) return leave(NVML_ERROR_NOT_SUPPORTED);
    set->mask[d - gpus] |= types;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t rc = enter();
    if (rc) return rc;
    NEED(valid_set(set));
    set->used = 0;
    return leave(NVML_SUCCESS);
}

/* Next undelivered Xid for a GPU this set listens to (caller holds mu). */
static const struct xid *next_xid(const struct eset *s) {
    const struct xid *best = NULL;
    for (int i = 0; i < sys_state.nxid; i++) {
        const struct xid *x = &sys_state.xids[i];
        if (x->seq <= delivered || x->gpu < 0 || x->gpu >= sys_state.ngpu || !(s->mask[x->gpu] & XID_EVENT)) continue;
        if (!best || x->seq < best->seq) best = x;
    }
    return best;
}

/* An inotify descriptor on the state file's folder (caller holds mu), or -1 where inotify is unavailable.
 * The real driver's event wait blocks in the kernel and costs no CPU while nothing happens; a wait that
 * woke every few milliseconds to look for new Xids would show up as the agent's CPU in the overhead bench.
 * The folder, not the file: write_state replaces the file by renaming over it. */
static int state_watch(void) {
    static int fd = -2;
    const char *path = getenv("GPUFLEET_FAKE_NVML_STATE");
    char dir[PATH_MAX];
    const char *slash;
    if (fd != -2) return fd;
    fd = -1;
    if (!path || !(slash = strrchr(path, '/')) || (size_t)(slash - path) >= sizeof dir) return fd;
    if (slash == path) strcpy(dir, "/");
    else { memcpy(dir, path, (size_t)(slash - path)); dir[slash - path] = 0; }
    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd >= 0 && inotify_add_watch(fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_ATTRIB) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Block until the state folder changes or ``ms`` pass (without the lock). Without inotify, nap 20 ms. */
static void await_change(int fd, double ms) {
    char buf[4096];
    if (fd < 0) {
        struct timespec nap = {0, (long)((ms < 20.0 ? ms : 20.0) * 1e6)};
        nanosleep(&nap, NULL);
        return;
    }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(ms + 0.999)) > 0)
        while (read(fd, buf, sizeof buf) > 0) {}
}

/* Wait without holding the lock, so the sampling thread keeps going while the event thread waits. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout_ms) {
    struct timespec start, now;
    double left_ms;
    int watch;
    pthread_mutex_lock(&mu);
    watch = state_watch();  /* before the first look, so a change after that look wakes the wait */
    pthread_mutex_unlock(&mu);
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        const struct xid *x;
        nvmlReturn_t rc = enter();
        if (rc) return rc;
        NEED(data && valid_set(set));
        for (int g = 0; g < sys_state.ngpu; g++)
            if ((set->mask[g] & XID_EVENT) && gpus[g].v[K_LOST] > 0) return leave(NVML_ERROR_GPU_IS_LOST);
        if ((x = next_xid(set)) != NULL) {
            delivered = x->seq;
            data->device = &gpus[x->gpu];
            data->eventType = XID_EVENT;
            data->eventData = x->code;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return leave(NVML_SUCCESS);
        }
        leave(NVML_SUCCESS);
        clock_gettime(CLOCK_MONOTONIC, &now);
        left_ms = (double)timeout_ms - elapsed_ms(&start, &now);
        if (left_ms <= 0) return NVML_ERROR_TIMEOUT;
        await_change(watch, left_ms);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned timeout_ms) {
    nvmlEventData_t full;
    nvmlReturn_t rc;
    if (!data) return NVML_ERROR_INVALID_ARGUMENT;
    rc = nvmlEventSetWait_v2(set, &full, timeout_ms);
    if (rc == NVML_SUCCESS) memcpy(data, &full, sizeof *data);
    return rc;
}
