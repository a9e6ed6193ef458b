/* The few entries of CPython's public C API that hpalloc's extensions use
 * but the limited API of CPython 3.10 (Py_LIMITED_API=0x030A0000, the
 * wheel's abi3 build: one build for CPython 3.10 and later) does not
 * declare.  Included after Python.h; without Py_LIMITED_API (the system
 * route's build for one interpreter) Python.h declares them and this
 * declares nothing.
 *
 *   - the raw memory domain's allocator (hpalloc._rawdomain):
 *     PyMemAllocatorEx, PyMem_GetAllocator, PyMem_SetAllocator, public
 *     since 3.5 with this layout (Include/cpython/pymem.h);
 *   - tracemalloc's tracking of foreign blocks (hpalloc._nrt):
 *     PyTraceMalloc_Track/_Untrack, public since 3.7 (Include/tracemalloc.h
 *     up to 3.12, Include/cpython/tracemalloc.h since 3.13);
 *   - the buffer protocol (hpalloc._shared): Py_buffer, PyBuffer_FillInfo
 *     and the Py_bf_getbuffer slot are in the limited API from 3.11 on
 *     (where Python.h declares them); 3.10 has the same layout, and its
 *     PyType_FromSpec takes the slot (since 3.9), so below 3.11 they are
 *     declared here.
 * Each is copied from CPython's headers, which keep it unchanged from 3.10
 * to 3.13.  tests/wheel/abi-declarations.sh compiles
 * tests/wheel/cpython_check.c against the full headers of every CPython
 * the machine has and compares each layout and value.
 *
 * HP_CPYTHON_CHECK (the check only) declares everything under hp_decl_
 * names beside Python.h's own.  Declarations only: no code, no state.
 */
#ifndef HPALLOC_ABI_CPYTHON_H
#define HPALLOC_ABI_CPYTHON_H

#include <stddef.h>
#include <stdint.h>

#if defined(HP_CPYTHON_CHECK)
#define HP_PY(name) hp_decl_##name
#define HP_PY_DECLARE_MEM 1
#define HP_PY_DECLARE_BUFFER 1
#elif defined(Py_LIMITED_API)
#define HP_PY(name) name
#define HP_PY_DECLARE_MEM 1
#define HP_PY_DECLARE_BUFFER (Py_LIMITED_API + 0 < 0x030b0000)
#else
#define HP_PY_DECLARE_MEM 0
#define HP_PY_DECLARE_BUFFER 0
#endif

#if HP_PY_DECLARE_MEM
/* PyMemAllocatorDomain: PYMEM_DOMAIN_RAW is 0 (MEM 1, OBJ 2). */
#define HP_PY_MEM_DOMAIN_RAW 0
typedef struct {
	void *ctx;
	void *(*malloc)(void *ctx, size_t size);
	void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
	void *(*realloc)(void *ctx, void *ptr, size_t new_size);
	void (*free)(void *ctx, void *ptr);
} HP_PY(PyMemAllocatorEx);
/* The domain is an enum, passed as an int. */
PyAPI_FUNC(void) HP_PY(PyMem_GetAllocator)(int domain, HP_PY(PyMemAllocatorEx) *allocator);
PyAPI_FUNC(void) HP_PY(PyMem_SetAllocator)(int domain, HP_PY(PyMemAllocatorEx) *allocator);
PyAPI_FUNC(int) HP_PY(PyTraceMalloc_Track)(unsigned int domain, uintptr_t ptr, size_t size);
PyAPI_FUNC(int) HP_PY(PyTraceMalloc_Untrack)(unsigned int domain, uintptr_t ptr);
#else
#define HP_PY_MEM_DOMAIN_RAW PYMEM_DOMAIN_RAW
#endif

#if HP_PY_DECLARE_BUFFER
typedef struct {
	void *buf;
	PyObject *obj;
	Py_ssize_t len;
	Py_ssize_t itemsize;
	int readonly;
	int ndim;
	char *format;
	Py_ssize_t *shape;
	Py_ssize_t *strides;
	Py_ssize_t *suboffsets;
	void *internal;
} HP_PY(Py_buffer);
PyAPI_FUNC(int) HP_PY(PyBuffer_FillInfo)(HP_PY(Py_buffer) *view, PyObject *o, void *buf,
					 Py_ssize_t len, int readonly, int flags);
/* typeslots.h defines the slot's number in every version; the flags
 * PyObject_GetBuffer callers pass are theirs. */
#define HP_PY_BF_GETBUFFER 1
#else
#define HP_PY_BF_GETBUFFER Py_bf_getbuffer
#endif

#endif
