/* hpalloc._arrow — Arrow's memory pool (pyarrow) on hpalloc.
 *
 * pyarrow allocates every buffer (pa.array, pandas' Arrow-backed columns,
 * compute results) from a memory pool, by default a jemalloc or mimalloc
 * built into the wheel, which neither the NumPy handler nor the preload
 * library sees.  install() makes pyarrow's default pool (the one
 * pa.default_memory_pool() returns, and every pyarrow call without a
 * memory_pool= uses) a pool whose large requests go to hpalloc's huge
 * path (hp_huge_alloc: threshold, mode, fallback are the library's) and
 * whose others go to the pool it replaced, so small buffers keep
 * jemalloc/mimalloc's speed.  Blocks are routed by address on free and
 * realloc (hp_owns), so each goes back where it came from whatever
 * happens to the default pool later; the pool is static (pyarrow keeps a
 * raw pointer to it).
 *
 * Arrow's C++ classes are one release's (libarrow.so.<major>00).  This is
 * built against the declaration of that release's ABI in abi/arrow.h, with
 * no Arrow headers or libraries: it links nothing of Arrow, and bind()
 * looks Arrow's functions up in the libraries pyarrow loaded, once
 * hpalloc.arrow has checked the release (built_for), and checks the
 * running libarrow's arrow::MemoryPool vtable against the declaration
 * (check_layout: whatever the version says); until then install() & co
 * refuse.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "abi/arrow.h"
#include "abi/vtable.h"
#include "hpalloc.h"

namespace {

void *arrow_ctx; /* hp_ctx(HP_ORIGIN_API, 0), set before first use */

/* ---- Arrow's functions, found by bind() ----------------------------------- */
hp_arrow::Functions arrowfn;
PyObject *(*box_memory_pool)(hp_arrow::MemoryPool *);
bool bound;

void *loaded(const char *path, char *why, size_t len)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (lib == nullptr)
		snprintf(why, len, "%s is not loaded (import pyarrow first): %s", path, dlerror());
	return lib; /* kept open: pyarrow keeps our pool, we keep its functions */
}

/* pyarrow.lib's box_memory_pool from its C-API capsule, or nullptr after
 * saying why in why. */
PyObject *(*find_box_memory_pool(char *why, size_t len))(hp_arrow::MemoryPool *)
{
	PyObject *lib = PyImport_ImportModule("pyarrow.lib");
	PyObject *api = lib ? PyObject_GetAttrString(lib, "__pyx_capi__") : nullptr;
	PyObject *capsule = api ? PyDict_GetItemString(api, hp_arrow::box_memory_pool_capsule) : nullptr;
	void *fn = nullptr;
	if (capsule != nullptr && PyCapsule_CheckExact(capsule))
		fn = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
	Py_XDECREF(api);
	Py_XDECREF(lib);
	PyErr_Clear();
	if (fn == nullptr)
		snprintf(why, len, "pyarrow.lib exports no %s", hp_arrow::box_memory_pool_capsule);
	return reinterpret_cast<PyObject *(*)(hp_arrow::MemoryPool *)>(fn);
}

/* ---- the running libarrow's layout ----------------------------------------- */

/* The declared slots, in the order of hp_arrow::logging_pool_functions. */
using Pool = hp_arrow::MemoryPool;
using hp_vtable::slot_of;
const long declared_slots[] = {
	slot_of(&Pool::Allocate), slot_of(&Pool::Reallocate), slot_of(&Pool::Free),
	slot_of(&Pool::ReleaseUnused), slot_of(&Pool::PrintStats), slot_of(&Pool::bytes_allocated),
	slot_of(&Pool::max_memory), slot_of(&Pool::total_bytes_allocated),
	slot_of(&Pool::num_allocations), slot_of(&Pool::backend_name),
};
static_assert(sizeof(declared_slots) / sizeof(declared_slots[0]) ==
		      sizeof(hp_arrow::logging_pool_functions) / sizeof(hp_arrow::logging_pool_functions[0]),
	      "one declared slot per function");

/* Whether entry is the start of a member function of LoggingMemoryPool
 * (by the exported name the dynamic linker finds there). */
bool is_pool_function(void *entry)
{
	Dl_info info;
	if (entry == nullptr || dladdr(entry, &info) == 0 || info.dli_saddr != entry ||
	    info.dli_sname == nullptr)
		return false;
	for (const char *prefix : hp_arrow::logging_pool_members)
		if (std::strncmp(info.dli_sname, prefix, std::strlen(prefix)) == 0)
			return true;
	return false;
}

/* arrow::MemoryPool's vtable in lib (libarrow, at path) against the
 * declaration, through a LoggingMemoryPool (abi/arrow.h): nullptr, or why
 * not.  The pool is made in a buffer of ours and only read. */
const char *check_layout(void *lib, const char *path, char *why, size_t len)
{
	auto construct = reinterpret_cast<void (*)(void *, Pool *)>(
		dlsym(lib, hp_arrow::logging_pool_constructor));
	if (construct == nullptr) {
		snprintf(why, len, "%s has no %s to check arrow::MemoryPool's layout with", path,
			 hp_arrow::logging_pool_constructor);
		return why;
	}
	alignas(64) static unsigned char probe[256]; /* sizeof: a vtable pointer and a pool */
	construct(probe, nullptr);
	void *const *vtable = *reinterpret_cast<void *const *const *>(probe);
	long last = 0;
	for (size_t i = 0; i < sizeof(declared_slots) / sizeof(declared_slots[0]); i++) {
		const char *name = hp_arrow::logging_pool_functions[i];
		void *want = dlsym(lib, name);
		if (want == nullptr || vtable[declared_slots[i]] != want) {
			snprintf(why, len, "arrow::MemoryPool's slot %ld in %s is not %s (%s): another "
				 "layout", declared_slots[i], path, name,
				 want ? "another function is there" : "not exported");
			return why;
		}
		last = std::max(last, declared_slots[i]);
	}
	if (is_pool_function(vtable[last + 1])) {
		snprintf(why, len, "arrow::MemoryPool in %s has a virtual function after slot %ld, "
			 "which the one hpalloc was built for has not: another layout", path, last);
		return why;
	}
	return nullptr;
}

/* Look Arrow's functions up in pyarrow's loaded libarrow and
 * libarrow_python, and check the layout.  nullptr, or why not. */
const char *bind_arrow(const char *libarrow, const char *libarrow_python, char *why, size_t len)
{
	if (bound)
		return nullptr;
	void *a = loaded(libarrow, why, len), *p = a ? loaded(libarrow_python, why, len) : nullptr;
	if (p == nullptr)
		return why;
	hp_arrow::Functions found;
	for (size_t i = 0; i < sizeof(hp_arrow::symbols) / sizeof(hp_arrow::symbols[0]); i++) {
		const hp_arrow::Symbol &s = hp_arrow::symbols[i];
		void *sym = dlsym(s.library == 'a' ? a : p, s.name);
		if (sym == nullptr) {
			snprintf(why, len, "%s has no %s: not Arrow %s's",
				 s.library == 'a' ? libarrow : libarrow_python, s.name, hp_arrow::release);
			return why;
		}
		std::memcpy(reinterpret_cast<char *>(&found) + i * sizeof(sym), &sym, sizeof(sym));
	}
	if (check_layout(a, libarrow, why, len) != nullptr)
		return why;
	PyObject *(*box)(hp_arrow::MemoryPool *) = find_box_memory_pool(why, len);
	if (box == nullptr)
		return why;
	arrowfn = found;
	box_memory_pool = box;
	bound = true;
	return nullptr;
}

hp_arrow::Status error(hp_arrow::StatusCode code, const std::string &msg)
{
	hp_arrow::Status st;
	arrowfn.Status_new(&st, code, msg);
	return st;
}

hp_arrow::Status out_of_memory(int64_t size)
{
	return error(hp_arrow::StatusCode::OutOfMemory,
		     "hpalloc: not enough memory for " + std::to_string(size) + " bytes");
}

class HpPool final : public hp_arrow::MemoryPool {
public:
	/* Requests below the huge path go to `small` (set once, before use). */
	hp_arrow::MemoryPool *small = nullptr;

	hp_arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t **out) override
	{
		if (size < 0)
			return error(hp_arrow::StatusCode::Invalid, "negative malloc size");
		void *p;
		switch (hp_huge_alloc(arrow_ctx, static_cast<size_t>(size),
				      static_cast<size_t>(alignment), 0, &p)) {
		case 0:
			*out = static_cast<uint8_t *>(p);
			count(size, size);
			return hp_arrow::Status();
		case 1: {
			hp_arrow::Status st = small->Allocate(size, alignment, out);
			if (st.ok())
				count(size, size);
			return st;
		}
		default:
			return out_of_memory(size);
		}
	}

	hp_arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
				 uint8_t **ptr) override
	{
		if (new_size < 0)
			return error(hp_arrow::StatusCode::Invalid, "negative realloc size");
		if (hp_owns(*ptr)) {
			void *p;
			switch (hp_huge_realloc(arrow_ctx, *ptr, static_cast<size_t>(new_size), &p)) {
			case 0:
				*ptr = static_cast<uint8_t *>(p);
				count(new_size - old_size, std::max<int64_t>(new_size - old_size, 0));
				return hp_arrow::Status();
			case 1:
				return move(old_size, new_size, alignment, ptr);
			default:
				return out_of_memory(new_size);
			}
		}
		/* the small pool's block: growing past the threshold moves it here */
		void *p;
		int rc = hp_huge_alloc(arrow_ctx, static_cast<size_t>(new_size),
				       static_cast<size_t>(alignment), 0, &p);
		if (rc == 1) {
			hp_arrow::Status st = small->Reallocate(old_size, new_size, alignment, ptr);
			if (st.ok())
				count(new_size - old_size, std::max<int64_t>(new_size - old_size, 0));
			return st;
		}
		if (rc != 0)
			return out_of_memory(new_size);
		std::memcpy(p, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
		small->Free(*ptr, old_size, alignment);
		*ptr = static_cast<uint8_t *>(p);
		count(new_size - old_size, std::max<int64_t>(new_size - old_size, 0));
		return hp_arrow::Status();
	}

	void Free(uint8_t *buffer, int64_t size, int64_t alignment) override
	{
		if (hp_owns(buffer))
			hp_free(buffer);
		else
			small->Free(buffer, size, alignment);
		bytes_.fetch_sub(size, std::memory_order_relaxed);
	}

	void ReleaseUnused() override
	{
		small->ReleaseUnused();
	}

	int64_t bytes_allocated() const override
	{
		return bytes_.load(std::memory_order_relaxed);
	}
	int64_t max_memory() const override
	{
		return max_.load(std::memory_order_relaxed);
	}
	int64_t total_bytes_allocated() const override
	{
		return total_.load(std::memory_order_relaxed);
	}
	int64_t num_allocations() const override
	{
		return allocations_.load(std::memory_order_relaxed);
	}
	std::string backend_name() const override
	{
		return "hpalloc";
	}

private:
	std::atomic<int64_t> bytes_{0}, max_{0}, total_{0}, allocations_{0};

	/* Arrow's own pools' statistics: live bytes, their peak, bytes ever
	 * asked (growth only), allocations and reallocations. */
	void count(int64_t delta, int64_t asked)
	{
		int64_t now = bytes_.fetch_add(delta, std::memory_order_relaxed) + delta;
		int64_t peak = max_.load(std::memory_order_relaxed);
		while (now > peak && !max_.compare_exchange_weak(peak, now, std::memory_order_relaxed))
			;
		total_.fetch_add(asked, std::memory_order_relaxed);
		allocations_.fetch_add(1, std::memory_order_relaxed);
	}

	/* A huge block the huge path no longer takes (the knobs changed):
	 * allocate anew, copy, give the old one back. */
	hp_arrow::Status move(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t **ptr)
	{
		uint8_t *fresh;
		hp_arrow::Status st = Allocate(new_size, alignment, &fresh);
		if (!st.ok())
			return st;
		std::memcpy(fresh, *ptr, static_cast<size_t>(std::min(old_size, new_size)));
		Free(*ptr, old_size, alignment);
		*ptr = fresh;
		return hp_arrow::Status();
	}
};

/* Static: pyarrow keeps a raw pointer to the default pool forever. */
HpPool pool;

int ready()
{
	if (!bound) {
		PyErr_SetString(PyExc_RuntimeError, "hpalloc._arrow is not bound to pyarrow's "
				"libraries yet: use it through hpalloc.arrow");
		return -1;
	}
	if (arrow_ctx == nullptr && (arrow_ctx = hp_ctx(HP_ORIGIN_API, 0)) == nullptr) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	return 0;
}

PyObject *py_bind(PyObject *, PyObject *args)
{
	const char *libarrow, *libarrow_python;
	char why[512];
	if (!PyArg_ParseTuple(args, "ss:bind", &libarrow, &libarrow_python))
		return nullptr;
	if (bind_arrow(libarrow, libarrow_python, why, sizeof(why)) != nullptr) {
		PyErr_SetString(PyExc_ImportError, why);
		return nullptr;
	}
	Py_RETURN_NONE;
}

/* The default pool becomes hpalloc's, over the one there now (the first
 * install() decides which: later ones find hpalloc's, or put it back). */
PyObject *py_install(PyObject *, PyObject *)
{
	if (ready() != 0)
		return nullptr;
	hp_arrow::MemoryPool *current = arrowfn.get_memory_pool();
	if (current == &pool)
		Py_RETURN_NONE;
	if (pool.small == nullptr)
		pool.small = current;
	else if (current != pool.small) {
		PyErr_SetString(PyExc_RuntimeError,
				"pyarrow's default memory pool was changed since hpalloc.arrow "
				"was first installed: hpalloc keeps sending small buffers to the "
				"first one (set it back with pyarrow.set_memory_pool())");
		return nullptr;
	}
	arrowfn.set_default_memory_pool(&pool);
	Py_RETURN_NONE;
}

/* The pool install() replaced comes back, unless another replaced
 * hpalloc's since (that one stays).  Buffers on hpalloc stay valid. */
PyObject *py_uninstall(PyObject *, PyObject *)
{
	if (ready() != 0)
		return nullptr;
	if (arrowfn.get_memory_pool() == &pool)
		arrowfn.set_default_memory_pool(pool.small);
	Py_RETURN_NONE;
}

PyObject *py_installed(PyObject *, PyObject *)
{
	if (ready() != 0)
		return nullptr;
	return PyBool_FromLong(arrowfn.get_memory_pool() == &pool);
}

/* hpalloc's pool as a pyarrow.MemoryPool, for memory_pool= arguments. */
PyObject *py_pool(PyObject *, PyObject *)
{
	if (ready() != 0)
		return nullptr;
	if (pool.small == nullptr)
		pool.small = arrowfn.get_memory_pool();
	return box_memory_pool(&pool);
}

PyMethodDef methods[] = {
	{"bind", py_bind, METH_VARARGS,
	 "bind(libarrow_path, libarrow_python_path): find Arrow's functions in the "
	 "libraries pyarrow loaded"},
	{"install", py_install, METH_NOARGS,
	 "install(): pyarrow's default memory pool becomes hpalloc's"},
	{"uninstall", py_uninstall, METH_NOARGS,
	 "uninstall(): the pool install() replaced comes back"},
	{"installed", py_installed, METH_NOARGS,
	 "installed() -> True while pyarrow's default pool is hpalloc's"},
	{"pool", py_pool, METH_NOARGS, "pool() -> hpalloc's pool as a pyarrow.MemoryPool"},
	{nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"hpalloc._arrow",
	"pyarrow's memory pool on hpalloc (use hpalloc.arrow).",
	-1,
	methods,
	nullptr,
	nullptr,
	nullptr,
	nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__arrow(void);

PyMODINIT_FUNC PyInit__arrow(void)
{
	PyObject *m = PyModule_Create(&module);
	/* The release whose ABI this was compiled for: hpalloc.arrow
	 * compares it with pyarrow's before binding anything here. */
	if (m != nullptr && PyModule_AddStringConstant(m, "built_for", hp_arrow::release) != 0) {
		Py_DECREF(m);
		return nullptr;
	}
	return m;
}
