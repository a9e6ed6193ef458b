/* hpalloc._nrt — Numba's runtime (NRT) on hpalloc.
 *
 * Two pieces, both plain C because NRT calls them without the GIL, from
 * any thread (prange workers included):
 *   - an NRT_ExternalAllocator (numba/core/runtime/nrt_external.h, the
 *     interface NRT offers extension authors) whose functions are the
 *     library's hp_ctx_* entry points with the numba origin's context;
 *   - a stand-in for the function @njit code calls to allocate array data,
 *     NRT_MemInfo_alloc_aligned (Numba >= 0.57) or its "safe" variant
 *     NRT_MemInfo_alloc_safe_aligned (older Numba, and NUMBA_DEBUG_NRT=1),
 *     which fills the data with debug markers when allocated and freed.
 *     While routing is on it allocates the same MemInfo through NRT with an
 *     hpalloc allocator, else calls the original.  hpalloc.numba makes LLVM
 *     resolve the symbol to it.  Numba's own addresses come from its
 *     c_helpers table (bind()).
 *
 * NRT has an external-allocator variant of the safe function only
 * (NRT_MemInfo_alloc_safe_aligned_external).  Standing in for the plain
 * one, the debug markers would be two writes of every array that Numba
 * does not do (and would fault in every page of np.empty's result), so the
 * stand-in uses NRT's plain external allocation (NRT_api_functions
 * .allocate_external: MemInfo header, then data, in one block) with an
 * allocator that places the block so that the data is aligned as asked.
 *
 * A MemInfo made with an external allocator records it and is freed
 * through it (NRT_dealloc), so arrays outlive uninstall() and may be
 * released in any thread: the allocator structs are static.  tracemalloc
 * keeps seeing NRT memory (see ext_malloc).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "abi/cpython.h"
#include "hpalloc.h"

/* Layout of NRT_ExternalAllocator (nrt_external.h, a public interface). */
struct nrt_external_allocator {
	void *(*malloc)(size_t size, void *opaque);
	void *(*realloc)(void *ptr, size_t new_size, void *opaque);
	void (*free)(void *ptr, void *opaque);
	void *opaque; /* hp_ctx(HP_ORIGIN_NUMBA, 0) */
};

/* The start of NRT_api_functions (nrt_external.h), from NRT_get_api(). */
struct nrt_api {
	void *(*allocate)(size_t nbytes);
	void *(*allocate_external)(size_t nbytes, struct nrt_external_allocator *allocator);
};

/* NRT's own allocations go through PyMem_RawMalloc, which tracemalloc
 * traces (domain 0) and Numba's tests expect it to.  These bypass the raw
 * domain, so they tell tracemalloc themselves.  PyTraceMalloc_Track and
 * _Untrack return at once when tracemalloc is not tracing; when it is they
 * take the GIL from any thread, as tracemalloc's own raw-domain hook
 * does. */
#define TRACE_DOMAIN 0

static void *ext_malloc(size_t size, void *ctx)
{
	void *p = hp_ctx_malloc(ctx, size);
	if (p != NULL)
		PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)p, size);
	return p;
}

static void *ext_realloc(void *ptr, size_t new_size, void *ctx)
{
	void *p = hp_ctx_realloc(ctx, ptr, new_size);
	if (p != NULL) {
		if (ptr != NULL)
			PyTraceMalloc_Untrack(TRACE_DOMAIN, (uintptr_t)ptr);
		PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)p, new_size);
	}
	return p;
}

static void ext_free(void *ptr, void *ctx)
{
	if (ptr != NULL)
		PyTraceMalloc_Untrack(TRACE_DOMAIN, (uintptr_t)ptr);
	hp_ctx_free(ctx, ptr, 0); /* routed by address; the size is a hint */
}

static struct nrt_external_allocator allocator = {
	ext_malloc, ext_realloc, ext_free, NULL,
};

/* ---- the allocator of the plain stand-in ------------------------------------
 * NRT asks it for one block: its MemInfo header (a size private to NRT),
 * then `size` bytes of data.  The stand-in says, in this thread, how much
 * data and which alignment (NRT calls malloc synchronously), so the header
 * is what remains; the block starts `pad` bytes into an hpalloc block,
 * with pad stored just before it for free(). */
struct aligned_request {
	size_t size;
	size_t align;
};
static _Thread_local struct aligned_request request;

#define PAD_SLOT sizeof(size_t)

static void *aligned_malloc(size_t n, void *ctx)
{
	const size_t align = request.align, header = n - request.size;
	if (align == 0 || n < request.size || n > SIZE_MAX - align - PAD_SLOT) {
		errno = ENOMEM;
		return NULL;
	}
	char *block = hp_ctx_malloc(ctx, n + align + PAD_SLOT);
	if (block == NULL)
		return NULL;
	uintptr_t data = (uintptr_t)block + PAD_SLOT + header;
	data += (align - data % align) % align;
	char *mi = (char *)(data - header);
	size_t pad = (size_t)(mi - block);
	memcpy(mi - PAD_SLOT, &pad, sizeof(pad));
	PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)mi, n);
	return mi;
}

static void aligned_free(void *mi, void *ctx)
{
	size_t pad;
	if (mi == NULL)
		return;
	PyTraceMalloc_Untrack(TRACE_DOMAIN, (uintptr_t)mi);
	memcpy(&pad, (char *)mi - PAD_SLOT, sizeof(pad));
	hp_ctx_free(ctx, (char *)mi - pad, 0);
}

/* NRT never resizes a MemInfo's block (varsize data uses its own
 * allocator), and a copy could not keep the data's alignment: refused. */
static void *aligned_realloc(void *mi, size_t new_size, void *ctx)
{
	(void)mi;
	(void)new_size;
	(void)ctx;
	errno = ENOMEM;
	return NULL;
}

static struct nrt_external_allocator aligned_allocator = {
	aligned_malloc, aligned_realloc, aligned_free, NULL,
};

/* ---- the stand-in -------------------------------------------------------------
 * NRT_MemInfo *NRT_MemInfo_alloc[_safe]_aligned(size_t, unsigned), the
 * safe variant's _external, and NRT_api_functions.allocate_external. */
typedef void *(*alloc_aligned_fn)(size_t size, unsigned align);
typedef void *(*alloc_aligned_external_fn)(size_t size, unsigned align, void *allocator);
static _Atomic(alloc_aligned_fn) nrt_alloc;
static _Atomic(alloc_aligned_external_fn) nrt_alloc_safe_external;
static const struct nrt_api *nrt_api; /* set with nrt_alloc, read after it */
static bool markers; /* the replaced function is the safe variant */
static atomic_bool routing;

static void *alloc_plain(size_t size, unsigned align)
{
	request = (struct aligned_request){size, align ? align : 1};
	void *mi = nrt_api->allocate_external(size, &aligned_allocator);
	request = (struct aligned_request){0, 0};
	return mi;
}

/* NRT adds its header (and, in the safe variant, twice the alignment) to
 * the size without checking: a size that would wrap is refused here, a
 * failed allocation (MemoryError) instead of a small block. */
#define NRT_SLACK ((size_t)4096)

/* What @njit code calls instead of NRT's function. */
static void *meminfo_alloc_aligned(size_t size, unsigned align)
{
	alloc_aligned_fn original = atomic_load_explicit(&nrt_alloc, memory_order_acquire);
	if (!atomic_load_explicit(&routing, memory_order_relaxed))
		return original(size, align);
	if (size > SIZE_MAX - 2 * (size_t)align - NRT_SLACK) {
		errno = ENOMEM;
		return NULL;
	}
	if (markers)
		return atomic_load_explicit(&nrt_alloc_safe_external, memory_order_relaxed)(
			size, align, &allocator);
	return alloc_plain(size, align);
}

/* ---- Python interface ---------------------------------------------------- */

static int ready(void)
{
	if (allocator.opaque != NULL)
		return 0;
	allocator.opaque = hp_ctx(HP_ORIGIN_NUMBA, 0);
	if (allocator.opaque == NULL) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	return 0;
}

static PyObject *py_allocator_address(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	if (ready() != 0)
		return NULL;
	return PyLong_FromVoidPtr(&allocator);
}

static int pointer_arg(PyObject *obj, void **out)
{
	void *p = PyLong_AsVoidPtr(obj);
	if (p == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "NULL function address");
		return -1;
	}
	*out = p;
	return 0;
}

/* bind(original, markers, alloc_safe_aligned_external, get_api): the
 * function the stand-in replaces (markers: it is the safe variant) and
 * NRT's entry points it allocates with, before the stand-in's address is
 * handed to LLVM.  Binding other ones later is refused: compiled code may
 * be calling the stand-in. */
static PyObject *py_bind(PyObject *self, PyObject *args)
{
	PyObject *a, *c, *d;
	int safe;
	void *original, *safe_external, *get_api;
	(void)self;
	if (!PyArg_ParseTuple(args, "OpOO:bind", &a, &safe, &c, &d) ||
	    pointer_arg(a, &original) != 0 || pointer_arg(c, &safe_external) != 0 ||
	    pointer_arg(d, &get_api) != 0 || ready() != 0)
		return NULL;
	const struct nrt_api *api = ((const struct nrt_api *(*)(void))get_api)();
	if (api == NULL || api->allocate_external == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "Numba's NRT_get_api() has no allocate_external");
		return NULL;
	}
	alloc_aligned_fn old = atomic_load(&nrt_alloc);
	if (old != NULL) {
		if ((void *)old != original || markers != (safe != 0) || nrt_api != api ||
		    (void *)atomic_load(&nrt_alloc_safe_external) != safe_external) {
			PyErr_SetString(PyExc_RuntimeError,
					"Numba's NRT functions moved since hpalloc.numba was bound");
			return NULL;
		}
		Py_RETURN_NONE;
	}
	aligned_allocator.opaque = allocator.opaque;
	nrt_api = api;
	markers = safe != 0;
	atomic_store_explicit(&nrt_alloc_safe_external, (alloc_aligned_external_fn)safe_external,
			      memory_order_release);
	/* last: the stand-in reads the others after it */
	atomic_store_explicit(&nrt_alloc, (alloc_aligned_fn)original, memory_order_release);
	Py_RETURN_NONE;
}

static PyObject *py_standin_address(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	if (atomic_load(&nrt_alloc) == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "bind() Numba's functions first");
		return NULL;
	}
	return PyLong_FromVoidPtr((void *)meminfo_alloc_aligned);
}

static PyObject *py_set_routing(PyObject *self, PyObject *arg)
{
	(void)self;
	int on = PyObject_IsTrue(arg);
	if (on < 0)
		return NULL;
	if (on && atomic_load(&nrt_alloc) == NULL) {
		PyErr_SetString(PyExc_RuntimeError, "bind() Numba's functions first");
		return NULL;
	}
	atomic_store(&routing, on != 0);
	Py_RETURN_NONE;
}

static PyObject *py_routing(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyBool_FromLong(atomic_load(&routing));
}

static PyMethodDef methods[] = {
	{"allocator_address", py_allocator_address, METH_NOARGS,
	 "allocator_address() -> address of hpalloc's NRT_ExternalAllocator"},
	{"bind", py_bind, METH_VARARGS,
	 "bind(original, markers, alloc_safe_aligned_external, get_api): Numba's functions"},
	{"standin_address", py_standin_address, METH_NOARGS,
	 "standin_address() -> address of the stand-in for NRT_MemInfo_alloc[_safe]_aligned"},
	{"set_routing", py_set_routing, METH_O,
	 "set_routing(on): the stand-in allocates through hpalloc (on) or NRT's own allocator"},
	{"routing", py_routing, METH_NOARGS, "routing() -> bool"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"hpalloc._nrt",
	"Numba's runtime on hpalloc (use hpalloc.numba).",
	-1,
	methods,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__nrt(void); /* the interpreter's entry point */

PyMODINIT_FUNC PyInit__nrt(void)
{
	return PyModule_Create(&module);
}
