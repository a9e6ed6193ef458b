/* hpalloc._nrt — Numba's runtime (NRT) on hpalloc.
 *
 * Two pieces, both plain C because NRT calls them without the GIL, from
 * any thread (prange workers included):
 *   - an NRT_ExternalAllocator (numba/core/runtime/nrt_external.h, the
 *     interface NRT offers extension authors) whose functions are the
 *     library's hp_ctx_* entry points with the numba origin's context;
 *   - a stand-in for NRT_MemInfo_alloc_safe_aligned, the one function
 *     @njit code calls to allocate array data: while routing is on it
 *     calls NRT_MemInfo_alloc_safe_aligned_external with that allocator,
 *     else the original.  hpalloc.numba makes LLVM resolve the symbol to
 *     it.  Numba's own addresses come from its c_helpers table (bind()).
 *
 * A MemInfo made with an external allocator records it and is freed
 * through it (NRT_dealloc), so arrays outlive uninstall() and may be
 * released in any thread: the allocator struct is static.  tracemalloc
 * keeps seeing NRT memory (see ext_malloc).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hpalloc.h"

/* Layout of NRT_ExternalAllocator (nrt_external.h, a public interface). */
struct nrt_external_allocator {
	void *(*malloc)(size_t size, void *opaque);
	void *(*realloc)(void *ptr, size_t new_size, void *opaque);
	void (*free)(void *ptr, void *opaque);
	void *opaque; /* hp_ctx(HP_ORIGIN_NUMBA, 0) */
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

/* NRT_MemInfo *NRT_MemInfo_alloc_safe_aligned(size_t, unsigned) and its
 * _external variant, from numba.core.runtime._nrt_python.c_helpers. */
typedef void *(*alloc_aligned_fn)(size_t size, unsigned align);
typedef void *(*alloc_aligned_external_fn)(size_t size, unsigned align, void *allocator);
static _Atomic(alloc_aligned_fn) nrt_alloc;
static _Atomic(alloc_aligned_external_fn) nrt_alloc_external;
static atomic_bool routing;

/* What @njit code calls instead of NRT_MemInfo_alloc_safe_aligned. */
static void *meminfo_alloc_safe_aligned(size_t size, unsigned align)
{
	if (atomic_load_explicit(&routing, memory_order_relaxed))
		return atomic_load_explicit(&nrt_alloc_external, memory_order_acquire)(
			size, align, &allocator);
	return atomic_load_explicit(&nrt_alloc, memory_order_acquire)(size, align);
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

/* bind(alloc_safe_aligned, alloc_safe_aligned_external): Numba's own
 * functions, before the stand-in's address is handed to LLVM.  Binding
 * other addresses later is refused: compiled code may be calling it. */
static PyObject *py_bind(PyObject *self, PyObject *args)
{
	PyObject *a, *b;
	void *plain, *external;
	(void)self;
	if (!PyArg_ParseTuple(args, "OO:bind", &a, &b) ||
	    pointer_arg(a, &plain) != 0 || pointer_arg(b, &external) != 0 ||
	    ready() != 0)
		return NULL;
	alloc_aligned_fn old = atomic_load(&nrt_alloc);
	if (old != NULL && ((void *)old != plain ||
			    (void *)atomic_load(&nrt_alloc_external) != external)) {
		PyErr_SetString(PyExc_RuntimeError,
				"Numba's NRT functions moved since hpalloc.numba was bound");
		return NULL;
	}
	atomic_store_explicit(&nrt_alloc_external, (alloc_aligned_external_fn)external,
			      memory_order_release);
	atomic_store_explicit(&nrt_alloc, (alloc_aligned_fn)plain, memory_order_release);
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
	return PyLong_FromVoidPtr((void *)meminfo_alloc_safe_aligned);
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
	 "bind(alloc_safe_aligned, alloc_safe_aligned_external): Numba's functions"},
	{"standin_address", py_standin_address, METH_NOARGS,
	 "standin_address() -> address of the NRT_MemInfo_alloc_safe_aligned stand-in"},
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
