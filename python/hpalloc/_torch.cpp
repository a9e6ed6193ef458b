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
 * below); the vtable is theirs, so the module records the releases it
 * serves (serves, built_for) and hpalloc.torch refuses to load it under
 * another one.  Two builds (configure --with-torch):
 *   - against libtorch's headers (HP_TORCH_ABI unset): linked with libc10,
 *     for the release whose headers these are;
 *   - against the declared ABI of the releases abi/c10.h names
 *     (HP_TORCH_ABI): links nothing of PyTorch; bind() looks c10's
 *     functions up in the libc10 PyTorch loaded, once hpalloc.torch has
 *     checked the release.  Until then install() & co refuse.
 * Whatever the version says (a nightly "2.13.0a0" may have changed
 * c10::Allocator), bind() and install() first check the running libc10's
 * layout against the compiled one (check_vtables, check_current below)
 * and refuse on a difference, before anything of c10 is called through a
 * vtable.
 *
 * Kept to one small translation unit: c10's headers are slow to compile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "abi/vtable.h"
#include "hpalloc.h"

#ifdef HP_TORCH_ABI

#include "abi/c10.h"
namespace c10x = hp_c10;
#define HP_TORCH_SERVES hp_c10::releases
#else
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/api/include/torch/version.h>
namespace c10x = c10;
#define HP_TORCH_SERVES TORCH_VERSION
#endif

namespace {

/* ---- c10's functions: called directly, or through what bind() found ---- */
#ifdef HP_TORCH_ABI
hp_c10::Functions c10fn;
bool bound;

/* Look c10's functions up in the libc10.so at path, which must be loaded
 * already (PyTorch's own: RTLD_NOLOAD); its handle in *lib.  nullptr, or
 * why not. */
const char *find_c10(const char *path, void **lib, hp_c10::Functions *found, char *why, size_t len)
{
	*lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	if (*lib == nullptr) {
		snprintf(why, len, "%s is not loaded (import torch first): %s", path, dlerror());
		return why;
	}
	/* kept open: c10 keeps our allocator, we keep its functions */
	for (size_t i = 0; i < sizeof(hp_c10::symbols) / sizeof(hp_c10::symbols[0]); i++) {
		void *sym = dlsym(*lib, hp_c10::symbols[i]);
		if (sym == nullptr) {
			snprintf(why, len, "%s has no %s: not the libc10 of PyTorch %s", path,
				 hp_c10::symbols[i], hp_c10::releases);
			return why;
		}
		std::memcpy(reinterpret_cast<char *>(found) + i * sizeof(sym), &sym, sizeof(sym));
	}
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
bool bound; /* linked: c10's functions are there; bound once its layout is checked */

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

/* ---- the running libc10's layout ---------------------------------------------
 * libc10 exports its vtables with their sizes (the dynamic symbol table's
 * st_size).  c10::DefaultCPUAllocator's (and c10::Allocator's, where it is
 * exported) must have as many entries as the c10::Allocator this module
 * was compiled with: its slots, destructors included, after the offset to
 * top and the type info.  And the allocator in c10's slot must be one whose
 * layout that says: c10's default one (its vtable pointer is that vtable's
 * address point), hpalloc's, or the one hpalloc replaced (checked then). */

/* One virtual function more than c10::Allocator: its slot is the number of
 * c10::Allocator's.  Only named, never defined or made. */
struct SlotProbe : c10x::Allocator {
	virtual void hp_probe();
};

constexpr const char *default_vtable = "_ZTVN3c1019DefaultCPUAllocatorE";
constexpr const char *base_vtable = "_ZTVN3c109AllocatorE";
void *default_vptr; /* c10::DefaultCPUAllocator's address point, once checked */

long compiled_vtable_entries()
{
	return hp_vtable::header + hp_vtable::slot_of(&SlotProbe::hp_probe);
}

/* The entries of the vtable `name` as lib's dynamic symbol table sizes it,
 * or -1 when lib does not export it; its address in *addr. */
long exported_entries(void *lib, const char *name, void **addr)
{
	Dl_info info;
	void *entry = nullptr;
	*addr = dlsym(lib, name);
	if (*addr == nullptr || dladdr1(*addr, &info, &entry, RTLD_DL_SYMENT) == 0 ||
	    entry == nullptr || info.dli_sname == nullptr || std::strcmp(info.dli_sname, name) != 0)
		return -1;
	return static_cast<long>(static_cast<const ElfW(Sym) *>(entry)->st_size / sizeof(void *));
}

/* The vtables of lib (the libc10 at path) against the compiled
 * c10::Allocator: nullptr, or why not. */
const char *check_vtables(void *lib, const char *path, char *why, size_t len)
{
	const long want = compiled_vtable_entries();
	void *vt, *base;
	long got = exported_entries(lib, default_vtable, &vt);
	if (got < 0) {
		snprintf(why, len, "%s exports no vtable of c10::DefaultCPUAllocator (%s) to check "
			 "its layout against", path, default_vtable);
		return why;
	}
	if (got != want) {
		snprintf(why, len, "the vtable of c10::DefaultCPUAllocator in %s has %ld entries, "
			 "the c10::Allocator hpalloc was built for %ld: another layout", path, got, want);
		return why;
	}
	got = exported_entries(lib, base_vtable, &base);
	if (got >= 0 && got != want) {
		snprintf(why, len, "the vtable of c10::Allocator in %s has %ld entries, the one "
			 "hpalloc was built for %ld: another layout", path, got, want);
		return why;
	}
	default_vptr = static_cast<char *>(vt) + hp_vtable::header * sizeof(void *);
	return nullptr;
}

/* c10's CPU allocator is one whose layout was checked: nullptr, or why not. */
const char *check_current(c10x::Allocator *current, char *why, size_t len)
{
	if (current == &allocator || (current != nullptr && current == previous))
		return nullptr;
	void *vptr = current ? *reinterpret_cast<void **>(current) : nullptr;
	if (vptr != nullptr && vptr == default_vptr)
		return nullptr;
	Dl_info info;
	bool named = vptr != nullptr && dladdr(vptr, &info) != 0;
	snprintf(why, len, "c10's CPU allocator is not c10's DefaultCPUAllocator (its vtable "
		 "pointer %p is %s%s%s): a class whose layout hpalloc cannot check", vptr,
		 named && info.dli_sname ? info.dli_sname : "not an exported vtable",
		 named && info.dli_fname ? " in " : "", named && info.dli_fname ? info.dli_fname : "");
	return why;
}

/* The libc10 PyTorch loaded, at path: c10's functions found in it
 * (declared ABI) or the one this module is linked with (whose path
 * replaces path), its layout checked.  nullptr, or why not. */
const char *bind_c10(const char *path, char *why, size_t len)
{
	if (bound)
		return nullptr;
	void *lib = nullptr;
#ifdef HP_TORCH_ABI
	hp_c10::Functions found;
	if (find_c10(path, &lib, &found, why, len) != nullptr)
		return why;
#else
	Dl_info info;
	if (dladdr(reinterpret_cast<void *>(&c10::GetCPUAllocator), &info) != 0 && info.dli_fname) {
		path = info.dli_fname;
		lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	}
	if (lib == nullptr) {
		snprintf(why, len, "the libc10 hpalloc._torch is linked with is not found");
		return why;
	}
#endif
	if (check_vtables(lib, path, why, len) != nullptr)
		return why;
#ifdef HP_TORCH_ABI
	c10fn = found;
#endif
	if (check_current(get_cpu_allocator(), why, len) != nullptr)
		return why;
	bound = true;
	return nullptr;
}

/* What works under any release, said with each refusal. */
#define HP_TORCH_ANY_RELEASE "`hpctl run --preload -- COMMAND` puts tensors on huge pages under any PyTorch release"

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
	char why[512];
	if (check_current(current, why, sizeof(why)) != nullptr) {
		PyErr_Format(PyExc_RuntimeError, "hpalloc.torch: %s; nothing was changed (" HP_TORCH_ANY_RELEASE ")", why);
		return nullptr;
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
	/* The releases whose interface this was compiled for (its headers'
	 * TORCH_VERSION, or those abi/c10.h was checked against, space
	 * separated: declared_abi): hpalloc.torch compares them with the torch
	 * it runs under before using anything else here.  any_release: what
	 * works under every release, for hpalloc.torch's refusals. */
#ifdef HP_TORCH_ABI
	const bool declared = true;
#else
	const bool declared = false;
#endif
	if (m != nullptr && (PyModule_AddStringConstant(m, "built_for", HP_TORCH_SERVES) != 0 ||
			     PyModule_AddStringConstant(m, "any_release", HP_TORCH_ANY_RELEASE) != 0 ||
			     PyModule_AddIntConstant(m, "declared_abi", declared) != 0)) {
		Py_DECREF(m);
		return nullptr;
	}
	return m;
}
