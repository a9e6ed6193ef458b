/* The part of PyTorch's c10 that hpalloc._torch uses, declared here so the
 * adapter builds with no PyTorch at all (configure --with-torch=abi: the
 * wheel's build, where PyTorch may be installed after hpalloc).  One
 * declaration serves the releases in `releases`: c10::Allocator,
 * c10::DataPtr and c10::Device are the same in each.
 *
 * Two kinds of things, both one release's:
 *   - layouts the compiler must reproduce: the vtable of c10::Allocator
 *     (virtual functions in declaration order), c10::DataPtr (returned by
 *     value from Allocator::allocate) and c10::Device.  Copied from
 *     c10/core/Allocator.h, c10/util/UniqueVoidPtr.h, c10/core/Device.h and
 *     torch/headeronly/core/DeviceType.h of PyTorch 2.13.0 (2.14.1's and
 *     2.15.0's differ only in [[nodiscard]], an inline std::move and
 *     std::hash<DeviceType>, none of them layout);
 *   - functions of libc10.so, looked up by their mangled names in the libc10
 *     PyTorch has loaded (bind(), when hpalloc.torch is imported), so the
 *     module links nothing of PyTorch.
 * hpalloc.torch loads the module only under one of `releases` (their
 * major.minor: c10 keeps the interface within a release), and the module
 * checks the running libc10's vtables (their sizes in its dynamic symbol
 * table) before using it, whatever the version says.
 * tests/wheel/abi-declarations.sh compiles this file next to the real
 * headers of each release it is given and compares every layout and
 * vtable slot; a new release is served by adding it to `releases` once
 * that test passes for it (or updating this file until it does).
 *
 * Nothing here is c10's namespace: a definition of ours must never be
 * mistaken for libc10's (or the reverse) by the dynamic linker.
 */
#ifndef HPALLOC_ABI_C10_H
#define HPALLOC_ABI_C10_H

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hp_c10 {

/* The releases served, oldest first, space separated. */
constexpr const char *releases = "2.13 2.14 2.15";

using DeleterFnPtr = void (*)(void *);

enum class DeviceType : int8_t { CPU = 0 };
using DeviceIndex = int8_t;

struct Device {
	DeviceType type_;
	DeviceIndex index_ = -1;
	explicit Device(DeviceType type) : type_(type) {}
};

/* c10::detail::UniqueVoidPtr and c10::DataPtr, member for member.  The
 * unique_ptr makes it non-trivial for calls, as c10's: returned through a
 * hidden pointer, never in registers. */
struct UniqueVoidPtr {
	void *data_;
	std::unique_ptr<void, DeleterFnPtr> ctx_;
	UniqueVoidPtr(void *data, void *ctx, DeleterFnPtr deleter) : data_(data), ctx_(ctx, deleter) {}
};

class DataPtr {
public:
	DataPtr(void *data, void *ctx, DeleterFnPtr deleter, Device device)
		: ptr_(data, ctx, deleter), device_(device)
	{
	}
	void *get() const { return ptr_.data_; }
	void *get_context() const { return ptr_.ctx_.get(); }

private:
	UniqueVoidPtr ptr_;
	Device device_;
};

/* c10::Allocator's virtual functions, in its order.  is_simple_data_ptr is
 * defined in libc10 (not inline there): this is its definition. */
struct Allocator {
	virtual ~Allocator() = default;
	virtual DataPtr allocate(size_t n) = 0;
	virtual bool is_simple_data_ptr(const DataPtr &data_ptr) const
	{
		return data_ptr.get() == data_ptr.get_context();
	}
	virtual DeleterFnPtr raw_deleter() const { return nullptr; }
	virtual void copy_data(void *dest, const void *src, size_t count) const = 0;
};

/* libc10's functions hpalloc._torch calls; a member function is called
 * with its object first (the Itanium C++ ABI's `this`). */
struct Functions {
	Allocator *(*GetCPUAllocator)();
	void (*SetCPUAllocator)(Allocator *alloc, uint8_t priority);
	void *(*profiledCPUMemoryReporter)(); /* ProfiledCPUMemoryReporter & */
	void (*reporter_New)(void *reporter, void *ptr, size_t nbytes);
	void (*reporter_OutOfMemory)(void *reporter, size_t nbytes);
	void (*reporter_Delete)(void *reporter, void *ptr);
	/* throws c10::Error (Python: RuntimeError), as TORCH_CHECK does:
	 * never returns */
	void (*torchCheckFail)(const char *func, const char *file, uint32_t line, const char *msg);
};

/* Where each is found in libc10.so, in the order of Functions. */
constexpr const char *symbols[] = {
	"_ZN3c1015GetCPUAllocatorEv",
	"_ZN3c1015SetCPUAllocatorEPNS_9AllocatorEh",
	"_ZN3c1025profiledCPUMemoryReporterEv",
	"_ZN3c1025ProfiledCPUMemoryReporter3NewEPvm",
	"_ZN3c1025ProfiledCPUMemoryReporter11OutOfMemoryEm",
	"_ZN3c1025ProfiledCPUMemoryReporter6DeleteEPv",
	"_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
};
static_assert(sizeof(symbols) / sizeof(symbols[0]) * sizeof(void (*)()) == sizeof(Functions),
	      "one symbol per function");

} // namespace hp_c10

#endif
