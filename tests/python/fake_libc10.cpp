/* A stand-in for PyTorch's libc10.so, built by tests/python/test_torch_layout.py:
 * it exports the functions hpalloc._torch binds (by their mangled names)
 * and c10::Allocator's and c10::DefaultCPUAllocator's vtables, whose
 * layout the test chooses:
 *   (default)     the layout of PyTorch 2.13-2.15 (c10::Allocator: a
 *                 virtual destructor and four virtual functions);
 *   -DHP_EXTRA    one virtual function more, as a release that added one
 *                 would have: both vtables are one entry longer;
 *   -DHP_OTHER    the same vtables, but c10's CPU allocator is an object
 *                 of another class (not c10::DefaultCPUAllocator).
 * Nothing here is ever called through a vtable by a correct hpalloc: the
 * functions count their calls (fake_c10_calls) so the test can say that
 * a refused library was not touched beyond GetCPUAllocator.
 * Thread rules: none (one thread). */
#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int fake_c10_calls(void);
static int set_calls;

namespace c10 {

class Allocator {
public:
	virtual ~Allocator();
	virtual void allocate(size_t n);
	virtual bool is_simple_data_ptr(const void *p) const;
	virtual void *raw_deleter() const;
	virtual void copy_data(void *dest, const void *src, size_t count) const;
#ifdef HP_EXTRA
	virtual void added_in_another_release();
#endif
};
Allocator::~Allocator() {}
void Allocator::allocate(size_t) { std::abort(); }
bool Allocator::is_simple_data_ptr(const void *) const { std::abort(); }
void *Allocator::raw_deleter() const { std::abort(); }
void Allocator::copy_data(void *, const void *, size_t) const { std::abort(); }
#ifdef HP_EXTRA
void Allocator::added_in_another_release() { std::abort(); }
#endif

class DefaultCPUAllocator : public Allocator {
public:
	~DefaultCPUAllocator() override;
};
DefaultCPUAllocator::~DefaultCPUAllocator() {}

namespace {
class Other : public Allocator {
public:
	~Other() override {}
};
#ifdef HP_OTHER
Other first;
#else
DefaultCPUAllocator first;
#endif
Allocator *slot = &first;
} // namespace

Allocator *GetCPUAllocator() { return slot; }
void SetCPUAllocator(Allocator *a, uint8_t) { set_calls++; slot = a; }

struct ProfiledCPUMemoryReporter {
	void New(void *, size_t);
	void OutOfMemory(size_t);
	void Delete(void *);
};
void ProfiledCPUMemoryReporter::New(void *, size_t) {}
void ProfiledCPUMemoryReporter::OutOfMemory(size_t) {}
void ProfiledCPUMemoryReporter::Delete(void *) {}
ProfiledCPUMemoryReporter &profiledCPUMemoryReporter()
{
	static ProfiledCPUMemoryReporter r;
	return r;
}

namespace detail {
[[noreturn]] void torchCheckFail(const char *, const char *, uint32_t, const char *) { std::abort(); }
} // namespace detail

} // namespace c10

/* SetCPUAllocator's calls so far. */
int fake_c10_calls(void) { return set_calls; }
