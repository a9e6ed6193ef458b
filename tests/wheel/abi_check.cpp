/* The declared ABIs of python/hpalloc/abi/ against the real headers of the
 * releases they name (tests/wheel/abi-declarations.sh compiles this with the
 * headers of the venv's PyTorch and pyarrow): every layout the adapters rely
 * on and every vtable slot they call or override, compared.  Prints one
 * "ok ..." line per comparison; exits 1 at the first difference.
 *
 * A virtual function's slot is read from its pointer to member (Itanium
 * C++ ABI: 1 + its byte offset in the vtable); a probe class deriving from
 * each base declares one more virtual function, whose slot says how many
 * slots the base has (a release that added one at the end would give the
 * real class more).
 */
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include <arrow/memory_pool.h>
#include <arrow/status.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "abi/arrow.h"
#include "abi/c10.h"
#include "abi/vtable.h"

static int failures;

using hp_vtable::slot_of;
template <typename F>
static long slot(F f)
{
	return slot_of(f);
}

static void same(const char *what, long real, long declared)
{
	if (real == declared) {
		std::printf("ok %s: %ld\n", what, real);
	} else {
		std::printf("DIFFERENT %s: real %ld, declared %ld\n", what, real, declared);
		failures++;
	}
}

struct C10Probe : c10::Allocator {
	virtual void hp_probe();
};
struct HpC10Probe : hp_c10::Allocator {
	virtual void hp_probe();
};
struct ArrowProbe : arrow::MemoryPool {
	virtual void hp_probe();
};
struct HpArrowProbe : hp_arrow::MemoryPool {
	virtual void hp_probe();
};

static void keep(void *) {}

static void c10_layouts()
{
	same("c10 Allocator::allocate slot", slot(&c10::Allocator::allocate), slot(&hp_c10::Allocator::allocate));
	same("c10 Allocator::is_simple_data_ptr slot", slot(&c10::Allocator::is_simple_data_ptr),
	     slot(&hp_c10::Allocator::is_simple_data_ptr));
	same("c10 Allocator::raw_deleter slot", slot(&c10::Allocator::raw_deleter),
	     slot(&hp_c10::Allocator::raw_deleter));
	same("c10 Allocator::copy_data slot", slot(&c10::Allocator::copy_data), slot(&hp_c10::Allocator::copy_data));
	same("c10 Allocator slots", slot(&C10Probe::hp_probe), slot(&HpC10Probe::hp_probe));
	same("c10 DataPtr size", sizeof(c10::DataPtr), sizeof(hp_c10::DataPtr));
	same("c10 DataPtr alignment", alignof(c10::DataPtr), alignof(hp_c10::DataPtr));
	same("c10 Device size", sizeof(c10::Device), sizeof(hp_c10::Device));
	same("c10 DeviceType::CPU", (long)c10::DeviceType::CPU, (long)hp_c10::DeviceType::CPU);
	same("c10 DeleterFnPtr", sizeof(c10::DeleterFnPtr), sizeof(hp_c10::DeleterFnPtr));

	/* the same bytes for the same DataPtr (member order, Device's place;
	 * padding zeroed in both) */
	alignas(c10::DataPtr) unsigned char real[sizeof(c10::DataPtr)] = {};
	alignas(hp_c10::DataPtr) unsigned char declared[sizeof(hp_c10::DataPtr)] = {};
	static int block;
	auto *r = new (real) c10::DataPtr(&block, &block, &keep, c10::Device(c10::DeviceType::CPU));
	auto *d = new (declared) hp_c10::DataPtr(&block, &block, &keep, hp_c10::Device(hp_c10::DeviceType::CPU));
	same("c10 DataPtr bytes differing", std::memcmp(real, declared, sizeof(real)), 0);
	same("c10 DataPtr get/get_context", r->get() == d->get() && r->get_context() == d->get_context(), 1);
	r->~DataPtr();
	d->~DataPtr();
}

static void arrow_layouts()
{
	using Pool = arrow::MemoryPool;
	using Hp = hp_arrow::MemoryPool;
	same("arrow MemoryPool::Allocate slot",
	     slot(static_cast<arrow::Status (Pool::*)(int64_t, int64_t, uint8_t **)>(&Pool::Allocate)),
	     slot(&Hp::Allocate));
	same("arrow MemoryPool::Reallocate slot",
	     slot(static_cast<arrow::Status (Pool::*)(int64_t, int64_t, int64_t, uint8_t **)>(&Pool::Reallocate)),
	     slot(&Hp::Reallocate));
	same("arrow MemoryPool::Free slot",
	     slot(static_cast<void (Pool::*)(uint8_t *, int64_t, int64_t)>(&Pool::Free)), slot(&Hp::Free));
	same("arrow MemoryPool::ReleaseUnused slot", slot(&Pool::ReleaseUnused), slot(&Hp::ReleaseUnused));
	same("arrow MemoryPool::PrintStats slot", slot(&Pool::PrintStats), slot(&Hp::PrintStats));
	same("arrow MemoryPool::bytes_allocated slot", slot(&Pool::bytes_allocated), slot(&Hp::bytes_allocated));
	same("arrow MemoryPool::max_memory slot", slot(&Pool::max_memory), slot(&Hp::max_memory));
	same("arrow MemoryPool::total_bytes_allocated slot", slot(&Pool::total_bytes_allocated),
	     slot(&Hp::total_bytes_allocated));
	same("arrow MemoryPool::num_allocations slot", slot(&Pool::num_allocations), slot(&Hp::num_allocations));
	same("arrow MemoryPool::backend_name slot", slot(&Pool::backend_name), slot(&Hp::backend_name));
	same("arrow MemoryPool slots", slot(&ArrowProbe::hp_probe), slot(&HpArrowProbe::hp_probe));
	same("arrow Status size", sizeof(arrow::Status), sizeof(hp_arrow::Status));
	same("arrow StatusCode::OutOfMemory", (long)arrow::StatusCode::OutOfMemory,
	     (long)hp_arrow::StatusCode::OutOfMemory);
	same("arrow StatusCode::Invalid", (long)arrow::StatusCode::Invalid, (long)hp_arrow::StatusCode::Invalid);

	/* a real error Status read through the declared State */
	arrow::Status st = arrow::Status::OutOfMemory("hpalloc abi check");
	const auto *declared = reinterpret_cast<const hp_arrow::Status *>(&st);
	same("arrow Status state code", (long)declared->state()->code, (long)hp_arrow::StatusCode::OutOfMemory);
	same("arrow Status state message", declared->state()->msg == "hpalloc abi check", 1);
	same("arrow Status state is_constant", declared->state()->is_constant, 0);
}

int main()
{
	c10_layouts();
	arrow_layouts();
	std::printf("%d difference(s)\n", failures);
	return failures != 0;
}
