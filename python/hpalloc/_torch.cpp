/* hpalloc._torch — PyTorch's CPU allocator (c10) on hpalloc.
 *
 * CPU tensors get their storage from c10::GetCPUAllocator(); install()
 * replaces it with an allocator whose blocks come from hp_ctx_malloc()
 * with the torch origin's context (64-byte aligned below the threshold,
 * like c10's own; huge pages above it) and whose deleter is hp_free().
 * A tensor's DataPtr carries its deleter, so storage made here is freed by
 * hpalloc whatever happens to the allocator slot later (uninstall(), a
 * third allocator) and in whichever thread drops the last reference;
 * storage made before install() keeps c10's deleter.
 *
 * Allocations are reported to c10's ProfiledCPUMemoryReporter as c10's
 * DefaultCPUAllocator does, so torch.profiler(profile_memory=True) keeps
 * seeing CPU memory.
 *
 * c10::Allocator is not a stable interface: PyTorch 2 made allocate()
 * non-const and added copy_data() (pure virtual, used by clone()).  The
 * declarations this is compiled against say which they have (the templates
 * below); the vtable is that release's, so the module records the release
 * (built_for) and hpalloc.torch refuses to load it under another one.
 * Two builds (configure --with-torch):
 *   - against libtorch's headers (HP_TORCH_ABI unset): linked with libc10,
 *     for the release whose headers these are;
 *   - against the declared ABI of one release (HP_TORCH_ABI,
 *     abi/c10.h): links nothing of PyTorch; bind() looks c10's functions
 *     up in the libc10 PyTorch loaded, once hpalloc.torch has checked the
 *     release.  Until then install() & co refuse.
 *
 * Kept to one small translation unit: c10's headers are slow to compile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "hpalloc.h"

#ifdef HP_TORCH_ABI
#include <dlfcn.h>

#include "abi/c10.h"
namespace c10x = hp_c10;
#define HP_TORCH_BUILT_FOR hp_c10::release
#else
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/api/include/torch/version.h>
namespace c10x = c10;
#define HP_TORCH_BUILT_FOR TORCH_VERSION
#endif

namespace {

/* ---- c10's functions: called directly, or through what bind() found ---- */
#ifdef HP_TORCH_ABI
hp_c10::Functions c10fn;
bool bound;

/* Look c10's functions up in the libc10.so at path, which must be loaded
 * already (PyTorch's own: RTLD_NOLOAD).  nullptr, or why not. */
const char *bind_c10(const char *path, char *why, size_t len)
{
	if (bound)
		return nullptr;
	void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (lib == nullptr) {
		snprintf(why, len, "%s is not loaded (import torch first): %s", path, dlerror());
		return why;
	}
	/* kept open: c10 keeps our allocator, we keep its functions */
	hp_c10::Functions found;
	for (size_t i = 0; i < sizeof(hp_c10::symbols) / sizeof(hp_c10::symbols[0]); i++) {
		void *sym = dlsym(lib, hp_c10::symbols[i]);
		if (sym == nullptr) {
			snprintf(why, len, "%s has no %s: not PyTorch %s's libc10", path,
				 hp_c10::symbols[i], hp_c10::release);
			return why;
		}
		std::memcpy(reinterpret_cast<char *>(&found) + i * sizeof(sym), &sym, sizeof(sym));
	}
	c10fn = found;
	bound = true;
	return nullptr;
}

c10x::Allocator *get_cpu_allocator() { return c10fn.GetCPUAllocator(); }
void set_cpu_allocator(c10x::Allocator *a, uint8_t priority) { c10fn.SetCPUAllocator(a, priority); }
void report_new(void *p, size_t n) { c10fn.reporter_New(c10fn.profiledCPUMemoryReporter(), p, n); }
void report_delete(void *p) { c10fn.reporter_Delete(c10fn.profiledCPUMemoryReporter(), p); }

[[noreturn]] void out_of_memory(size_t nbytes)
{
	char msg[128];
	c10fn.reporter_OutOfMemory(c10fn.profiledCPUMemoryReporter(), nbytes);
	snprintf(msg, sizeof(msg), "hpalloc: not enough memory: you tried to allocate %zu bytes.",
		 nbytes);
	c10fn.torchCheckFail(__func__, __FILE__, __LINE__, msg);
	__builtin_unreachable();
}
#else
const char *bind_c10(const char *, char *, size_t) { return nullptr; } /* linked */
constexpr bool bound = true;

c10x::Allocator *get_cpu_allocator() { return c10::GetCPUAllocator(); }
void set_cpu_allocator(c10x::Allocator *a, uint8_t priority) { c10::SetCPUAllocator(a, priority); }
void report_new(void *p, size_t n) { c10::profiledCPUMemoryReporter().New(p, n); }
void report_delete(void *p) { c10::profiledCPUMemoryReporter().Delete(p); }

[[noreturn]] void out_of_memory(size_t nbytes)
{
	c10::profiledCPUMemoryReporter().OutOfMemory(nbytes);
	/* c10::Error: Python sees RuntimeError, as with c10's allocator */
	TORCH_CHECK(false, "hpalloc: not enough memory: you tried to allocate ", nbytes, " bytes.");
	__builtin_unreachable();
}
#endif

void *torch_ctx; /* hp_ctx(HP_ORIGIN_TORCH, 0), set before first use */

void hp_delete(void *ptr)
{
	if (ptr == nullptr)
		return;
	report_delete(ptr);
	hp_free(ptr);
}

c10x::DataPtr hp_allocate(size_t nbytes)
{
	const c10x::Device cpu(c10x::DeviceType::CPU);
	if (nbytes == 0) /* as c10's: no memory, a null DataPtr */
		return {nullptr, nullptr, &hp_delete, cpu};
	void *p = hp_ctx_malloc(torch_ctx, nbytes);
	if (p == nullptr)
		out_of_memory(nbytes);
	report_new(p, nbytes);
	return {p, p, &hp_delete, cpu};
}

/* What this c10's Allocator declares, read from its header.  The override
 * lives in a partial specialisation on a dependent base, so only the one
 * matching the header is instantiated (and checked against it). */
template <typename A>
using const_allocate = std::is_same<decltype(&A::allocate), c10x::DataPtr (A::*)(size_t) const>;

template <typename A, typename = void>
struct has_copy_data : std::false_type {};
template <typename A>
struct has_copy_data<A, std::void_t<decltype(&A::copy_data)>> : std::true_type {};

template <typename Base, bool = const_allocate<Base>::value>
struct Allocate;
template <typename Base>
struct Allocate<Base, true> : Base { /* PyTorch 1.x */
	c10x::DataPtr allocate(size_t nbytes) const override { return hp_allocate(nbytes); }
};
template <typename Base>
struct Allocate<Base, false> : Base { /* PyTorch 2.x */
	c10x::DataPtr allocate(size_t nbytes) override { return hp_allocate(nbytes); }
};

template <typename Base, bool = has_copy_data<Base>::value>
struct CopyData : Base {};
template <typename Base>
struct CopyData<Base, true> : Base { /* clone(): both blocks are plain memory */
	void copy_data(void *dest, const void *src, size_t count) const override
	{
		std::memcpy(dest, src, count);
	}
};

struct HpAllocator final : CopyData<Allocate<c10x::Allocator>> {
	c10x::DeleterFnPtr raw_deleter() const override
	{
		return &hp_delete;
	}
};

/* Static: c10 keeps a raw pointer to the allocator forever. */
HpAllocator allocator;
c10x::Allocator *previous;      /* what install() replaced */
bool installed;
/* c10 remembers the priority of the last SetAllocator: once we gave the
 * slot back to `previous` at our priority, retaking it needs as much. */
c10x::Allocator *handed_back;   /* what uninstall() put in the slot */
uint8_t slot_priority;          /* the priority we last set the slot with */

/* Before anything touches c10 (declared ABI: its functions are found). */
bool require_bound()
{
	if (!bound)
		PyErr_SetString(PyExc_RuntimeError, "hpalloc._torch is not bound to PyTorch's "
				"libc10 yet: use it through hpalloc.torch");
	return bound;
}

PyObject *py_bind(PyObject *, PyObject *args)
{
	const char *path;
	char why[512];
	if (!PyArg_ParseTuple(args, "s:bind", &path))
		return nullptr;
	if (bind_c10(path, why, sizeof(why)) != nullptr) {
		PyErr_SetString(PyExc_ImportError, why);
		return nullptr;
	}
	Py_RETURN_NONE;
}

PyObject *py_install(PyObject *, PyObject *args)
{
	int priority = 1;
	if (!PyArg_ParseTuple(args, "|i:install", &priority))
		return nullptr;
	if (priority < 0 || priority > 255) {
		PyErr_Format(PyExc_ValueError, "priority must be 0..255, not %d", priority);
		return nullptr;
	}
	if (torch_ctx == nullptr && (torch_ctx = hp_ctx(HP_ORIGIN_TORCH, 0)) == nullptr)
		return PyErr_SetFromErrno(PyExc_OSError);
	if (!require_bound())
		return nullptr;
	c10x::Allocator *current = get_cpu_allocator();
	if (current == &allocator) {
		installed = true;
		Py_RETURN_NONE;
	}
	uint8_t effective = static_cast<uint8_t>(priority);
	if (current == handed_back && slot_priority > effective)
		effective = slot_priority; /* the slot is as we left it */
	/* c10 ignores a priority below the slot's: check that we got it */
	set_cpu_allocator(&allocator, effective);
	if (get_cpu_allocator() != &allocator) {
		PyErr_Format(PyExc_RuntimeError,
			     "c10 kept its CPU allocator: one was set with a priority above %d "
			     "(pass a higher priority to install())", priority);
		return nullptr;
	}
	previous = current;
	slot_priority = effective;
	handed_back = nullptr;
	installed = true;
	Py_RETURN_NONE;
}

/* Give the slot back to what install() replaced, unless someone replaced
 * hpalloc in turn (theirs stays).  Storage made by hpalloc keeps hp_delete. */
PyObject *py_uninstall(PyObject *, PyObject *)
{
	if (!installed)
		Py_RETURN_NONE;
	if (get_cpu_allocator() == &allocator) {
		set_cpu_allocator(previous, slot_priority);
		handed_back = previous;
	}
	installed = false;
	Py_RETURN_NONE;
}

/* True while c10's CPU allocator is hpalloc's (also if set by others). */
PyObject *py_installed(PyObject *, PyObject *)
{
	if (!require_bound())
		return nullptr;
	return PyBool_FromLong(get_cpu_allocator() == &allocator);
}

/* The deleter of storage this allocator made, to recognise it. */
PyObject *py_deleter_address(PyObject *, PyObject *)
{
	return PyLong_FromVoidPtr(reinterpret_cast<void *>(&hp_delete));
}

PyMethodDef methods[] = {
	{"bind", py_bind, METH_VARARGS,
	 "bind(libc10_path): find c10's functions in PyTorch's loaded libc10 (declared ABI; "
	 "a no-op when linked)"},
	{"install", py_install, METH_VARARGS,
	 "install(priority=1): c10's CPU allocator becomes hpalloc's"},
	{"uninstall", py_uninstall, METH_NOARGS,
	 "uninstall(): the allocator install() replaced comes back"},
	{"installed", py_installed, METH_NOARGS,
	 "installed() -> True while c10's CPU allocator is hpalloc's"},
	{"deleter_address", py_deleter_address, METH_NOARGS,
	 "deleter_address() -> address of the deleter of hpalloc's storage"},
	{nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"hpalloc._torch",
	"PyTorch's CPU allocator on hpalloc (use hpalloc.torch).",
	-1,
	methods,
	nullptr,
	nullptr,
	nullptr,
	nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__torch(void);

PyMODINIT_FUNC PyInit__torch(void)
{
	PyObject *m = PyModule_Create(&module);
	/* The release whose interface this was compiled for (its headers, or
	 * the declared ABI: declared_abi): hpalloc.torch compares it with the
	 * torch it runs under before using anything else here. */
#ifdef HP_TORCH_ABI
	const bool declared = true;
#else
	const bool declared = false;
#endif
	if (m != nullptr && (PyModule_AddStringConstant(m, "built_for", HP_TORCH_BUILT_FOR) != 0 ||
			     PyModule_AddIntConstant(m, "declared_abi", declared) != 0)) {
		Py_DECREF(m);
		return nullptr;
	}
	return m;
}
