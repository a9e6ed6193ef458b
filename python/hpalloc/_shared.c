/* hpalloc._shared: SharedBlock, a Python object owning one hpalloc shared
 * block (hp_shared_alloc / hp_shared_map) and exposing it through the
 * buffer protocol, so NumPy arrays (np.frombuffer, np.ndarray(buffer=))
 * can live on it.  Policy (page size, fallback, backing) is the library's;
 * this only translates.
 *
 * The block is unmapped when the object goes, never before: every array on
 * it holds a reference to it.  np.frombuffer() holds a buffer export too,
 * but np.ndarray(buffer=block) -- how multiprocessing's receiver rebuilds
 * an array -- only keeps base=block, so no count of exports can tell that
 * the mapping is still in use.  close() therefore only ends new uses (new
 * buffers, sending the descriptor) and the unmap waits for the last
 * reference; it never raises and may be called again. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "abi/cpython.h"
#include "hpalloc.h"

typedef struct {
	PyObject_HEAD
	void *addr;
	size_t size;
	bool closed;        /* close() was called: no new buffer, not sent */
} SharedBlock;

/* A heap type (PyType_FromSpec): the limited API has no static types. */
static PyObject *SharedBlockType;

static PyObject *error_from_errno(const char *what)
{
	if (errno == ENOMEM)
		return PyErr_Format(PyExc_MemoryError, "%s: %s", what, strerror(errno));
	return PyErr_Format(errno == EINVAL ? PyExc_ValueError : PyExc_OSError, "%s: %s", what,
			    strerror(errno));
}

static PyObject *wrap(PyTypeObject *type, void *addr, size_t size)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
	SharedBlock *self = (SharedBlock *)alloc(type, 0);
	if (!self) {
		hp_shared_free(addr);
		return NULL;
	}
	self->addr = addr;
	self->size = size;
	return (PyObject *)self;
}

/* SharedBlock(size, pagesize=0): a new block. */
static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = {"size", "pagesize", NULL};
	Py_ssize_t size;
	unsigned long long pagesize = 0;
	void *addr;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|K", kwlist, &size, &pagesize))
		return NULL;
	if (size <= 0)
		return PyErr_Format(PyExc_ValueError, "size must be positive, got %zd", size);
	Py_BEGIN_ALLOW_THREADS
	addr = hp_shared_alloc((size_t)size, (size_t)pagesize, NULL);
	Py_END_ALLOW_THREADS
	if (!addr)
		return error_from_errno("hpalloc shared block");
	struct hp_shared_info info;
	hp_shared_info(addr, &info);
	return wrap(type, addr, info.size);
}

/* SharedBlock.from_fd(fd): map a block another process made (fd stays the
 * caller's). */
static PyObject *block_from_fd(PyObject *cls, PyObject *arg)
{
	int fd = PyObject_AsFileDescriptor(arg);
	size_t size = 0;
	void *addr;

	if (fd < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	addr = hp_shared_map(fd, &size);
	Py_END_ALLOW_THREADS
	if (!addr && errno == EINVAL)
		return PyErr_Format(PyExc_ValueError,
				    "descriptor %d is not an hpalloc shared block (a memfd sealed "
				    "against shrinking and growing): not mapped", fd);
	if (!addr)
		return error_from_errno("mapping an hpalloc shared block");
	return wrap((PyTypeObject *)cls, addr, size);
}

/* The last array, view or name of the block is gone: now it may go.  An
 * instance of a heap type holds a reference to its type. */
static void block_dealloc(SharedBlock *self)
{
	PyTypeObject *type = Py_TYPE(self);
	if (self->addr)
		hp_shared_free(self->addr);
	((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
	Py_DECREF(type);
}

static PyObject *closed_error(void)
{
	PyErr_SetString(PyExc_ValueError, "shared block is closed");
	return NULL;
}

/* The buffer holds a reference to self (PyBuffer_FillInfo): the mapping
 * outlives it. */
static int block_getbuffer(SharedBlock *self, Py_buffer *view, int flags)
{
	if (self->closed) {
		closed_error();
		return -1;
	}
	return PyBuffer_FillInfo(view, (PyObject *)self, self->addr, (Py_ssize_t)self->size, 0, flags);
}

static int info_of(SharedBlock *self, struct hp_shared_info *info)
{
	if (hp_shared_info(self->addr, info) != 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	return 0;
}

/* What sending the block takes: refused once closed. */
static PyObject *block_fd(SharedBlock *self, void *closure)
{
	struct hp_shared_info info;
	(void)closure;
	if (self->closed)
		return closed_error();
	return info_of(self, &info) ? NULL : PyLong_FromLong(info.fd);
}

/* A report of the mapping while it lasts (closed: fd -1, no longer ours
 * to use). */
static PyObject *block_info(SharedBlock *self, PyObject *unused)
{
	struct hp_shared_info info;
	(void)unused;
	if (info_of(self, &info))
		return NULL;
	return Py_BuildValue("{s:K,s:n,s:i,s:s,s:n}", "address", (unsigned long long)(uintptr_t)info.addr,
			     "size", (Py_ssize_t)info.size, "fd", self->closed ? -1 : info.fd, "backend",
			     hp_backend_name(info.backend), "page_size", (Py_ssize_t)info.page_size);
}

/* No new use; the unmap waits for the last reference (see the top). */
static PyObject *block_close(SharedBlock *self, PyObject *unused)
{
	(void)unused;
	self->closed = true;
	Py_RETURN_NONE;
}

static PyObject *block_address(SharedBlock *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->addr);
}

static PyObject *block_size(SharedBlock *self, void *closure)
{
	(void)closure;
	return PyLong_FromSize_t(self->size);
}

static PyMethodDef block_methods[] = {
	{"from_fd", (PyCFunction)block_from_fd, METH_O | METH_CLASS,
	 "from_fd(fd) -> SharedBlock mapping the block behind fd (fd stays yours)"},
	{"info", (PyCFunction)block_info, METH_NOARGS,
	 "info() -> {address, size, fd, backend, page_size}"},
	{"close", (PyCFunction)block_close, METH_NOARGS,
	 "close(): no new arrays on the block, no sending it; it is unmapped when "
	 "the last array on it goes"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef block_getset[] = {
	{"fd", (getter)block_fd, NULL, "the block's descriptor (owned by the block; ValueError once closed)", NULL},
	{"address", (getter)block_address, NULL, "start address in this process", NULL},
	{"size", (getter)block_size, NULL, "length in bytes", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot block_slots[] = {
	{Py_tp_dealloc, (void *)block_dealloc},
	{HP_PY_BF_GETBUFFER, (void *)block_getbuffer},
	{Py_tp_doc, (void *)"SharedBlock(size, pagesize=0): huge pages other processes can map by descriptor"},
	{Py_tp_methods, block_methods},
	{Py_tp_getset, block_getset},
	{Py_tp_new, (void *)block_new},
	{0, NULL},
};

static PyType_Spec block_spec = {
	.name = "hpalloc._shared.SharedBlock",
	.basicsize = sizeof(SharedBlock),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
	.slots = block_slots,
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "hpalloc._shared",
	"Shared hpalloc blocks for NumPy arrays across processes.", -1,
	NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__shared(void);

PyMODINIT_FUNC PyInit__shared(void)
{
	if (SharedBlockType == NULL && (SharedBlockType = PyType_FromSpec(&block_spec)) == NULL)
		return NULL;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	Py_INCREF(SharedBlockType);
	if (PyModule_AddObject(m, "SharedBlock", SharedBlockType) < 0) {
		Py_DECREF(SharedBlockType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
