/* The part of Arrow 26 (libarrow.so.2600, pyarrow 26.x) that
 * hpalloc._arrow uses, declared here so the adapter builds with no Arrow
 * headers or libraries (pyarrow may be installed after hpalloc).
 *
 * Two kinds of things, both one release's:
 *   - layouts the compiler must reproduce: the vtable of arrow::MemoryPool
 *     (virtual functions in declaration order; the non-virtual overloads
 *     take no slot) and arrow::Status with its State.  Copied from
 *     arrow/memory_pool.h and arrow/status.h of Arrow 26.0.1;
 *   - functions of libarrow.so.2600 and libarrow_python.so.2600, looked up
 *     by their mangled names in the copies pyarrow has loaded, and
 *     pyarrow.lib's box_memory_pool, from its Cython C-API capsule (bind(),
 *     when hpalloc.arrow is imported).
 * hpalloc.arrow loads the module only under pyarrow `release` (the major:
 * the SONAME's 2600), and the module checks the running libarrow's
 * MemoryPool vtable (below) before using it.  tests/wheel/abi-declarations.sh compiles this file
 * next to the real headers of the pyarrow it finds and compares every
 * layout and vtable slot; a new release is served by updating this file
 * until that test passes for it, and `release`.
 *
 * Nothing here is in arrow's namespace: a definition of ours must never be
 * mistaken for libarrow's (or the reverse) by the dynamic linker.
 */
#ifndef HPALLOC_ABI_ARROW_H
#define HPALLOC_ABI_ARROW_H

#include <cstdint>
#include <memory>
#include <string>

/* Arrow's wheels use libstdc++'s C++11 std::string (in its mangled names
 * below); a build with the old one would pass strings of another layout. */
#if !defined(_GLIBCXX_USE_CXX11_ABI) || !_GLIBCXX_USE_CXX11_ABI
#error "Arrow's C++ ABI uses libstdc++'s C++11 std::string: build with _GLIBCXX_USE_CXX11_ABI=1"
#endif

namespace hp_arrow {

constexpr const char *release = "26";

enum class StatusCode : char { OK = 0, OutOfMemory = 1, Invalid = 4 };

/* arrow::Status: a pointer to its State, null when OK.  Its destructor is
 * not trivial (so, like arrow's, it is returned through a hidden pointer),
 * and frees a State that is not one of Arrow's constants, as arrow's does. */
class Status {
public:
	struct State {
		StatusCode code;
		bool is_constant;
		std::string msg;
		std::shared_ptr<void> detail; /* shared_ptr<StatusDetail> */
	};

	Status() noexcept : state_(nullptr) {}
	Status(Status &&other) noexcept : state_(other.state_) { other.state_ = nullptr; }
	Status &operator=(Status &&other) noexcept
	{
		std::swap(state_, other.state_);
		return *this;
	}
	Status(const Status &) = delete;
	Status &operator=(const Status &) = delete;
	~Status() noexcept
	{
		if (state_ != nullptr && !state_->is_constant)
			delete state_;
	}

	bool ok() const { return state_ == nullptr; }
	const State *state() const { return state_; }

private:
	State *state_;
};

/* arrow::MemoryPool's virtual functions, in its order.  max_memory is
 * defined in libarrow (not inline there); hpalloc's pool overrides it. */
class MemoryPool {
public:
	virtual ~MemoryPool() = default;
	virtual Status Allocate(int64_t size, int64_t alignment, uint8_t **out) = 0;
	virtual Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
				  uint8_t **ptr) = 0;
	virtual void Free(uint8_t *buffer, int64_t size, int64_t alignment) = 0;
	virtual void ReleaseUnused() {}
	virtual void PrintStats() {}
	virtual int64_t bytes_allocated() const = 0;
	virtual int64_t max_memory() const = 0;
	virtual int64_t total_bytes_allocated() const = 0;
	virtual int64_t num_allocations() const = 0;
	virtual std::string backend_name() const = 0;

protected:
	MemoryPool() = default;
};

/* The functions hpalloc._arrow calls; a constructor is called with the
 * object it constructs first (the Itanium C++ ABI's `this`). */
struct Functions {
	/* arrow::Status::Status(StatusCode, const std::string &), libarrow */
	void (*Status_new)(Status *self, StatusCode code, const std::string &msg);
	/* arrow::py::get_memory_pool(), set_default_memory_pool(), libarrow_python */
	MemoryPool *(*get_memory_pool)();
	void (*set_default_memory_pool)(MemoryPool *pool);
};

/* Where each is found, in the order of Functions: 'a' libarrow, 'p'
 * libarrow_python. */
struct Symbol {
	char library;
	const char *name;
};
constexpr Symbol symbols[] = {
	{'a', "_ZN5arrow6StatusC1ENS_10StatusCodeERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"},
	{'p', "_ZN5arrow2py15get_memory_poolEv"},
	{'p', "_ZN5arrow2py23set_default_memory_poolEPNS_10MemoryPoolE"},
};
static_assert(sizeof(symbols) / sizeof(symbols[0]) * sizeof(void (*)()) == sizeof(Functions),
	      "one symbol per function");

/* The layout check (hpalloc._arrow's bind(), before any pool is swapped):
 * libarrow exports no vtable, but arrow::LoggingMemoryPool overrides every
 * virtual function of arrow::MemoryPool and exports them and its
 * constructor.  A LoggingMemoryPool made in a buffer of ours (never used
 * otherwise) shows the vtable: each function must sit in the slot this
 * declaration gives it, and the slot after the last must hold none of
 * them.  In the order of MemoryPool's virtual functions above. */
constexpr const char *logging_pool_constructor = "_ZN5arrow17LoggingMemoryPoolC1EPNS_10MemoryPoolE";
constexpr const char *logging_pool_functions[] = {
	"_ZN5arrow17LoggingMemoryPool8AllocateEllPPh",
	"_ZN5arrow17LoggingMemoryPool10ReallocateElllPPh",
	"_ZN5arrow17LoggingMemoryPool4FreeEPhll",
	"_ZN5arrow17LoggingMemoryPool13ReleaseUnusedEv",
	"_ZN5arrow17LoggingMemoryPool10PrintStatsEv",
	"_ZNK5arrow17LoggingMemoryPool15bytes_allocatedEv",
	"_ZNK5arrow17LoggingMemoryPool10max_memoryEv",
	"_ZNK5arrow17LoggingMemoryPool21total_bytes_allocatedEv",
	"_ZNK5arrow17LoggingMemoryPool15num_allocationsEv",
	"_ZNK5arrow17LoggingMemoryPool12backend_nameB5cxx11Ev",
};

/* The mangled names of LoggingMemoryPool's member functions begin so. */
constexpr const char *logging_pool_members[] = {
	"_ZN5arrow17LoggingMemoryPool",
	"_ZNK5arrow17LoggingMemoryPool",
};

/* pyarrow.lib's C-API capsule (Cython's __pyx_capi__) for wrapping a pool
 * as a pyarrow.MemoryPool. */
constexpr const char *box_memory_pool_capsule = "box_memory_pool";

} // namespace hp_arrow

#endif
