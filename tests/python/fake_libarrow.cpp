/* Stand-ins for pyarrow's libarrow.so.2600 (-DHP_LIBARROW) and
 * libarrow_python.so.2600 (-DHP_LIBARROW_PYTHON), built by
 * tests/python/test_arrow_layout.py: they export what hpalloc._arrow binds
 * (by its mangled names) and arrow::LoggingMemoryPool, whose vtable the
 * adapter checks, with the layout the test chooses:
 *   (default)   arrow::MemoryPool's virtual functions as in Arrow 26;
 *   -DHP_SWAP   Free declared before Reallocate (slots moved);
 *   -DHP_EXTRA  one virtual function more after backend_name.
 * Nothing here is ever called by a correct hpalloc but the constructor of
 * LoggingMemoryPool (the adapter reads its vtable) and get_memory_pool;
 * set_default_memory_pool counts its calls (fake_arrow_sets).
 * Thread rules: none (one thread). */
#include <cstdint>
#include <cstdlib>
#include <string>

namespace arrow {
class MemoryPool;
#ifdef HP_LIBARROW
enum class StatusCode : char { OK = 0 };
class Status {
public:
	Status(StatusCode code, const std::string &msg);
	void *state_;
};
Status::Status(StatusCode, const std::string &) : state_(nullptr) { std::abort(); }

class MemoryPool {
public:
	virtual ~MemoryPool();
	virtual void Allocate(int64_t size, int64_t alignment, uint8_t **out) = 0;
#ifdef HP_SWAP
	virtual void Free(uint8_t *buffer, int64_t size, int64_t alignment) = 0;
	virtual void Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t **ptr) = 0;
#else
	virtual void Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t **ptr) = 0;
	virtual void Free(uint8_t *buffer, int64_t size, int64_t alignment) = 0;
#endif
	virtual void ReleaseUnused() {}
	virtual void PrintStats() {}
	virtual int64_t bytes_allocated() const = 0;
	virtual int64_t max_memory() const;
	virtual int64_t total_bytes_allocated() const = 0;
	virtual int64_t num_allocations() const = 0;
	virtual std::string backend_name() const = 0;
#ifdef HP_EXTRA
	virtual void added_in_another_release() {}
#endif
};
MemoryPool::~MemoryPool() {}
int64_t MemoryPool::max_memory() const { std::abort(); }

/* Its members (not their signatures' return types, which do not mangle)
 * are named as Arrow's. */
class LoggingMemoryPool : public MemoryPool {
public:
	explicit LoggingMemoryPool(MemoryPool *pool);
	void Allocate(int64_t size, int64_t alignment, uint8_t **out) override;
	void Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t **ptr) override;
	void Free(uint8_t *buffer, int64_t size, int64_t alignment) override;
	void ReleaseUnused() override;
	void PrintStats() override;
	int64_t bytes_allocated() const override;
	int64_t max_memory() const override;
	int64_t total_bytes_allocated() const override;
	int64_t num_allocations() const override;
	std::string backend_name() const override;
#ifdef HP_EXTRA
	void added_in_another_release() override;
#endif
	MemoryPool *pool_;
};
LoggingMemoryPool::LoggingMemoryPool(MemoryPool *pool) : pool_(pool) {}
void LoggingMemoryPool::Allocate(int64_t, int64_t, uint8_t **) { std::abort(); }
void LoggingMemoryPool::Reallocate(int64_t, int64_t, int64_t, uint8_t **) { std::abort(); }
void LoggingMemoryPool::Free(uint8_t *, int64_t, int64_t) { std::abort(); }
void LoggingMemoryPool::ReleaseUnused() { std::abort(); }
void LoggingMemoryPool::PrintStats() { std::abort(); }
int64_t LoggingMemoryPool::bytes_allocated() const { std::abort(); }
int64_t LoggingMemoryPool::max_memory() const { std::abort(); }
int64_t LoggingMemoryPool::total_bytes_allocated() const { std::abort(); }
int64_t LoggingMemoryPool::num_allocations() const { std::abort(); }
std::string LoggingMemoryPool::backend_name() const { std::abort(); }
#ifdef HP_EXTRA
void LoggingMemoryPool::added_in_another_release() { std::abort(); }
#endif
#endif

#ifdef HP_LIBARROW_PYTHON
static int sets;
namespace py {
MemoryPool *get_memory_pool() { return nullptr; }
void set_default_memory_pool(MemoryPool *) { sets++; }
} // namespace py
#endif
} // namespace arrow

#ifdef HP_LIBARROW_PYTHON
/* set_default_memory_pool's calls so far. */
extern "C" int fake_arrow_sets(void) { return arrow::sets; }
#endif
