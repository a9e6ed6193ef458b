/* python/hpalloc/abi/cpython.h (what the abi3 extensions declare of
 * CPython's public API beyond the limited API of 3.10) against the full
 * headers of the CPython this is compiled with: tests/wheel/abi-declarations.sh
 * compiles and runs it with every CPython 3.10-3.13 the machine has.
 * Prints one "ok ..." line per comparison, "N difference(s)" last; exits 1
 * on a difference.  Thread rules: none (one thread). */
#include <Python.h>

#include <stddef.h>
#include <stdio.h>

#define HP_CPYTHON_CHECK
#include "abi/cpython.h"

static int failures;

static void same(const char *what, long real, long declared)
{
	if (real == declared) {
		printf("ok %s: %ld\n", what, real);
	} else {
		printf("DIFFERENT %s: real %ld, declared %ld\n", what, real, declared);
		failures++;
	}
}

#define SAME_SIZE(real, ours) same("sizeof " #real, (long)sizeof(real), (long)sizeof(ours))
#define SAME_OFFSET(real, ours, member) \
	same("offsetof " #real "." #member, (long)offsetof(real, member), (long)offsetof(ours, member))

int main(void)
{
	printf("CPython %s\n", PY_VERSION);
	same("PYMEM_DOMAIN_RAW", PYMEM_DOMAIN_RAW, HP_PY_MEM_DOMAIN_RAW);
	same("sizeof PyMemAllocatorDomain (passed as int)", (long)sizeof(PyMemAllocatorDomain),
	     (long)sizeof(int));
	SAME_SIZE(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx);
	SAME_OFFSET(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx, ctx);
	SAME_OFFSET(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx, malloc);
	SAME_OFFSET(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx, calloc);
	SAME_OFFSET(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx, realloc);
	SAME_OFFSET(PyMemAllocatorEx, hp_decl_PyMemAllocatorEx, free);
	same("PyTraceMalloc_Track's type",
	     __builtin_types_compatible_p(__typeof__(&PyTraceMalloc_Track),
					  __typeof__(&hp_decl_PyTraceMalloc_Track)), 1);
	same("PyTraceMalloc_Untrack's type",
	     __builtin_types_compatible_p(__typeof__(&PyTraceMalloc_Untrack),
					  __typeof__(&hp_decl_PyTraceMalloc_Untrack)), 1);
	same("Py_bf_getbuffer", Py_bf_getbuffer, HP_PY_BF_GETBUFFER);
	SAME_SIZE(Py_buffer, hp_decl_Py_buffer);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, buf);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, obj);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, len);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, itemsize);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, readonly);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, ndim);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, format);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, shape);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, strides);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, suboffsets);
	SAME_OFFSET(Py_buffer, hp_decl_Py_buffer, internal);
	printf("%d difference(s)\n", failures);
	return failures != 0;
}
