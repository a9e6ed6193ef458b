/* hpalloc._rawdomain — CPython's raw memory domain on hpalloc's huge path.
 *
 * PYMEM_DOMAIN_RAW serves PyMem_RawMalloc & co and, through pymalloc,
 * every object allocation above 512 bytes: bytes, bytearray, the buffers
 * of pickle/io, list item arrays, and Numba's runtime (NRT allocates with
 * PyMem_RawMalloc).  install() wraps the running interpreter's raw
 * allocator the way tracemalloc does (PyMem_GetAllocator, then
 * PyMem_SetAllocator with functions that call the previous one):
 *   - malloc/calloc ask hp_huge_alloc() with the python origin's context;
 *     its "1" (below threshold, mode=off, fallback=small) sends the
 *     request to the previous allocator;
 *   - free/realloc route by address (hp_owns), so blocks the previous
 *     allocator handed out -- before the switch or below the threshold --
 *     go back to it, and hpalloc's come back to hpalloc.
 * No policy here: sizes, modes and page choice are the library's.
 *
 * The raw domain runs without the GIL, in threads Python never saw: every
 * function below is only atomics and thread-safe hp_* calls, and none
 * calls back into Python.
 *
 * Once set, the wrapper stays for the life of the process; uninstall()
 * only stops it from taking new blocks.  Taking it out again would be
 * unsound: blocks hpalloc handed out (bytes objects, NRT arrays, a
 * tracemalloc set above us keeps our functions anyway) are freed for as
 * long as the process lives, including after Py_Finalize, and another
 * thread may be inside one of these functions at any time (there is no
 * lock to wait for them).  A pass-through costs one atomic load per
 * allocation and an alignment test per free.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "abi/cpython.h"
#include "hpalloc.h"

/* The allocator we wrap, copied once before our functions are set and
 * never written again: lock-free reads from any thread are safe. */
static PyMemAllocatorEx previous;
static void *python_ctx;        /* hp_ctx(HP_ORIGIN_PYTHON, 0) */
static atomic_bool wrapped;     /* our functions are (or were) set */
static atomic_bool taking;      /* between install() and uninstall() */

/* What PyMem_RawMalloc promises: malloc's alignment. */
#define RAW_ALIGN alignof(max_align_t)

static inline bool take_new_blocks(void)
{
	return atomic_load_explicit(&taking, memory_order_relaxed);
}

/* ---- the wrapper ---------------------------------------------------------
 * ctx is ignored: the previous allocator is reached through `previous`,
 * and our ctx is the previous one's (see install_wrapper). */

static void *raw_malloc(void *ctx, size_t size)
{
	void *p;
	(void)ctx;
	if (take_new_blocks()) {
		int rc = hp_huge_alloc(python_ctx, size, RAW_ALIGN, 0, &p);
		if (rc == 0)
			return p;
		if (rc < 0)
			return NULL; /* fallback=fail: Python raises MemoryError */
	}
	return previous.malloc(previous.ctx, size);
}

static void *raw_calloc(void *ctx, size_t nelem, size_t elsize)
{
	size_t total;
	void *p;
	(void)ctx;
	/* On overflow the previous allocator fails the request itself. */
	if (take_new_blocks() && !__builtin_mul_overflow(nelem, elsize, &total)) {
		int rc = hp_huge_alloc(python_ctx, total, RAW_ALIGN, 1, &p);
		if (rc == 0)
			return p;
		if (rc < 0)
			return NULL;
	}
	return previous.calloc(previous.ctx, nelem, elsize);
}

static void raw_free(void *ctx, void *ptr)
{
	(void)ctx;
	if (hp_owns(ptr))
		hp_free(ptr);
	else
		previous.free(previous.ctx, ptr);
}

/* An hpalloc block: resized by hpalloc while it stays huge, else moved to
 * the previous allocator (below the threshold now, or after uninstall). */
static void *realloc_owned(void *ptr, size_t size)
{
	void *np;
	if (take_new_blocks()) {
		int rc = hp_huge_realloc(python_ctx, ptr, size, &np);
		if (rc == 0)
			return np;
		if (rc < 0)
			return NULL; /* ptr untouched, as realloc() promises */
	}
	np = previous.malloc(previous.ctx, size);
	if (np == NULL)
		return NULL;
	size_t old = hp_usable_size(ptr);
	memcpy(np, ptr, old < size ? old : size);
	hp_free(ptr);
	return np;
}

/* A block of the previous allocator growing onto the huge path (a list or
 * bytearray growing past the threshold).  That allocator does not say how
 * many bytes ptr holds, so it resizes the block to `size` first -- after
 * which `size` bytes are readable -- and the copy takes them all. */
static void *realloc_foreign(void *ptr, size_t size)
{
	void *np;
	int rc = take_new_blocks() ? hp_huge_alloc(python_ctx, size, RAW_ALIGN, 0, &np) : 1;
	if (rc == 1)
		return previous.realloc(previous.ctx, ptr, size);
	if (rc < 0)
		return NULL;
	void *grown = previous.realloc(previous.ctx, ptr, size);
	if (grown == NULL) {
		hp_free(np); /* ptr is still the caller's */
		return NULL;
	}
	memcpy(np, grown, size);
	previous.free(previous.ctx, grown);
	return np;
}

static void *raw_realloc(void *ctx, void *ptr, size_t size)
{
	if (ptr == NULL)
		return raw_malloc(ctx, size);
	if (hp_owns(ptr))
		return realloc_owned(ptr, size);
	return realloc_foreign(ptr, size);
}

/* Our ctx is the previous allocator's: PyMem_SetAllocator copies the
 * struct while threads without the GIL may be reading it, so a reader can
 * pair our function with the old ctx or the old function with ours.
 * With the same ctx in both, every pairing is valid. */
static void install_wrapper(void)
{
	PyMem_GetAllocator(HP_PY_MEM_DOMAIN_RAW, &previous);
	PyMemAllocatorEx ours = {
		.ctx = previous.ctx,
		.malloc = raw_malloc,
		.calloc = raw_calloc,
		.realloc = raw_realloc,
		.free = raw_free,
	};
	atomic_store(&taking, true);
	PyMem_SetAllocator(HP_PY_MEM_DOMAIN_RAW, &ours);
	atomic_store(&wrapped, true);
}

/* ---- Python interface -------------------------------------------------------
 * Called with the GIL held, which serialises install/uninstall. */

static PyObject *py_install(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	if (python_ctx == NULL) {
		python_ctx = hp_ctx(HP_ORIGIN_PYTHON, 0);
		if (python_ctx == NULL)
			return PyErr_SetFromErrno(PyExc_OSError);
	}
	if (atomic_load(&wrapped))
		atomic_store(&taking, true);
	else
		install_wrapper();
	Py_RETURN_NONE;
}

static PyObject *py_uninstall(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	atomic_store(&taking, false);
	Py_RETURN_NONE;
}

static PyObject *py_installed(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyBool_FromLong(take_new_blocks());
}

static PyObject *py_wrapped(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyBool_FromLong(atomic_load(&wrapped));
}

/* Whether the raw domain's current allocator is ours (False once someone,
 * e.g. tracemalloc, wrapped it in turn). */
static PyObject *py_outermost(PyObject *self, PyObject *noargs)
{
	PyMemAllocatorEx now;
	(void)self;
	(void)noargs;
	PyMem_GetAllocator(HP_PY_MEM_DOMAIN_RAW, &now);
	return PyBool_FromLong(now.malloc == raw_malloc);
}

static PyMethodDef methods[] = {
	{"install", py_install, METH_NOARGS,
	 "install(): wrap the raw domain (once) and take requests >= threshold"},
	{"uninstall", py_uninstall, METH_NOARGS,
	 "uninstall(): take no new blocks; the wrapper stays as a router"},
	{"installed", py_installed, METH_NOARGS,
	 "installed() -> True while new requests may go to hpalloc"},
	{"wrapped", py_wrapped, METH_NOARGS,
	 "wrapped() -> True once the wrapper has been set in this process"},
	{"outermost", py_outermost, METH_NOARGS,
	 "outermost() -> True if the raw domain's current allocator is ours"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"hpalloc._rawdomain",
	"CPython's raw memory domain on hpalloc (use hpalloc.python).",
	-1,
	methods,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__rawdomain(void); /* the interpreter's entry point */

PyMODINIT_FUNC PyInit__rawdomain(void)
{
	return PyModule_Create(&module);
}
