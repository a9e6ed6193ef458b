/* The Itanium C++ ABI's vtables, as hpalloc's declared-ABI adapters
 * (_torch.cpp, _arrow.cpp) and their checks (tests/wheel/abi_check.cpp)
 * read them: a virtual function's slot from its pointer to member, and
 * the entries before a vtable's address point.  No state, no threads.
 */
#ifndef HPALLOC_ABI_VTABLE_H
#define HPALLOC_ABI_VTABLE_H

#include <cstring>

namespace hp_vtable {

/* A vtable's entries before its address point (where an object's vtable
 * pointer points): the offset to top and the type info. */
constexpr long header = 2;

/* The slot a virtual function's pointer to member names, counted from the
 * address point (the Itanium pointer to member holds 1 + its byte offset
 * there), or -1 for a function that is not virtual. */
template <typename F>
long slot_of(F f)
{
	struct {
		long ptr, adj;
	} rep;
	static_assert(sizeof(f) == sizeof(rep), "Itanium pointer to member");
	std::memcpy(&rep, &f, sizeof(rep));
	if (!(rep.ptr & 1))
		return -1;
	return (rep.ptr - 1) / static_cast<long>(sizeof(void *));
}

} // namespace hp_vtable

#endif
