/* _hp_rawhammer — test helper (built for `make check` only): CPython's raw
 * memory domain driven from C threads that hold no GIL and have no Python
 * thread state, as NRT's and other extensions' worker threads do.
 *
 *   hammer(threads, rounds, min_size, max_size, seed) -> errors
 *       each thread: PyMem_RawMalloc or PyMem_RawCalloc a block of a
 *       random size, fill it with a pattern, PyMem_RawRealloc it to
 *       another random size (crossing the threshold both ways), check the
 *       kept prefix, free it.  errors = NULL results + corrupted bytes +
 *       calloc blocks not zero.  The GIL is released while the threads run.
 *   alloc(count, size) -> [address, ...]    PyMem_RawMalloc'd in this thread
 *   free_in_threads(addresses, threads)     PyMem_RawFree'd by C threads
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

struct job {
	long rounds;
	size_t min_size, max_size;
	uint64_t seed;
	long errors;
};

static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t random_size(struct job *j)
{
	return j->min_size + next_random(&j->seed) % (j->max_size - j->min_size + 1);
}

/* The pattern depends on the block's identity so a block handed to two
 * owners (a double allocation) shows up as corruption. */
static unsigned char pattern_byte(uintptr_t tag, size_t i)
{
	return (unsigned char)((tag >> 4) + i * 31);
}

/* Writes one byte per 4 KiB page and the last bytes: every page touched,
 * at a fraction of a full memset. */
static void fill(unsigned char *p, size_t n, uintptr_t tag)
{
	for (size_t i = 0; i < n; i += 4096)
		p[i] = pattern_byte(tag, i);
	if (n)
		p[n - 1] = pattern_byte(tag, n - 1);
}

static long check(const unsigned char *p, size_t n, size_t filled, uintptr_t tag)
{
	long bad = 0;
	for (size_t i = 0; i < n; i += 4096)
		bad += p[i] != pattern_byte(tag, i);
	if (n && n == filled)
		bad += p[n - 1] != pattern_byte(tag, n - 1);
	return bad;
}

static long zero_errors(const unsigned char *p, size_t n)
{
	long bad = 0;
	for (size_t i = 0; i < n; i += 4096)
		bad += p[i] != 0;
	return bad + (n && p[n - 1] != 0);
}

static void one_round(struct job *j)
{
	size_t a = random_size(j), b = random_size(j);
	int use_calloc = next_random(&j->seed) & 1;
	unsigned char *p = use_calloc ? PyMem_RawCalloc(1, a) : PyMem_RawMalloc(a);
	if (p == NULL) {
		j->errors++;
		return;
	}
	if (use_calloc)
		j->errors += zero_errors(p, a);
	uintptr_t tag = (uintptr_t)p;
	fill(p, a, tag);
	unsigned char *q = PyMem_RawRealloc(p, b);
	if (q == NULL) {
		j->errors++;
		PyMem_RawFree(p);
		return;
	}
	/* what was written before the resize, up to the length kept */
	j->errors += check(q, a < b ? a : b, a, tag);
	PyMem_RawFree(q);
}

static void *run_job(void *arg)
{
	struct job *j = arg;
	for (long r = 0; r < j->rounds; r++)
		one_round(j);
	return NULL;
}

static PyObject *py_hammer(PyObject *self, PyObject *args)
{
	int threads;
	long rounds;
	Py_ssize_t min_size, max_size;
	unsigned long long seed;
	(void)self;
	if (!PyArg_ParseTuple(args, "ilnnK:hammer", &threads, &rounds, &min_size,
			      &max_size, &seed))
		return NULL;
	if (threads < 1 || threads > 64 || rounds < 0 || min_size < 1 || max_size < min_size) {
		PyErr_SetString(PyExc_ValueError, "bad hammer() arguments");
		return NULL;
	}
	struct job jobs[64];
	pthread_t tids[64];
	int started = 0, err = 0;
	long errors = 0;
	Py_BEGIN_ALLOW_THREADS
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){rounds, (size_t)min_size, (size_t)max_size,
				       seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1, 0};
		if ((err = pthread_create(&tids[i], NULL, run_job, &jobs[i])) != 0)
			break;
		started++;
	}
	for (int i = 0; i < started; i++) {
		pthread_join(tids[i], NULL);
		errors += jobs[i].errors;
	}
	Py_END_ALLOW_THREADS
	if (err != 0) {
		errno = err;
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	return PyLong_FromLong(errors);
}

static PyObject *py_alloc(PyObject *self, PyObject *args)
{
	Py_ssize_t count, size;
	(void)self;
	if (!PyArg_ParseTuple(args, "nn:alloc", &count, &size))
		return NULL;
	PyObject *list = PyList_New(0);
	for (Py_ssize_t i = 0; list != NULL && i < count; i++) {
		void *p = PyMem_RawMalloc((size_t)size);
		PyObject *addr = p ? PyLong_FromVoidPtr(p) : NULL;
		if (p == NULL)
			PyErr_NoMemory();
		if (addr == NULL || PyList_Append(list, addr) != 0) {
			PyMem_RawFree(p);
			Py_XDECREF(addr);
			Py_CLEAR(list);
			break;
		}
		memset(p, 0x5A, (size_t)size);
		Py_DECREF(addr);
	}
	return list;
}

struct free_job {
	void **ptrs;
	Py_ssize_t begin, end;
};

static void *run_free(void *arg)
{
	struct free_job *f = arg;
	for (Py_ssize_t i = f->begin; i < f->end; i++)
		PyMem_RawFree(f->ptrs[i]);
	return NULL;
}

static PyObject *py_free_in_threads(PyObject *self, PyObject *args)
{
	PyObject *seq;
	int threads;
	(void)self;
	if (!PyArg_ParseTuple(args, "Oi:free_in_threads", &seq, &threads))
		return NULL;
	if (threads < 1 || threads > 64) {
		PyErr_SetString(PyExc_ValueError, "threads must be 1..64");
		return NULL;
	}
	PyObject *fast = PySequence_Fast(seq, "addresses must be a sequence");
	if (fast == NULL)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	void **ptrs = PyMem_Malloc(sizeof(void *) * (size_t)(n ? n : 1));
	if (ptrs == NULL) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		ptrs[i] = PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(fast, i));
		if (PyErr_Occurred()) {
			PyMem_Free(ptrs);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	struct free_job jobs[64];
	pthread_t tids[64];
	int started = 0, err = 0;
	Py_BEGIN_ALLOW_THREADS
	for (int t = 0; t < threads; t++) {
		jobs[t] = (struct free_job){ptrs, n * t / threads, n * (t + 1) / threads};
		if ((err = pthread_create(&tids[t], NULL, run_free, &jobs[t])) != 0)
			break;
		started++;
	}
	for (int t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	/* a thread that could not start: free its share here */
	for (int t = started; err != 0 && t < threads; t++) {
		jobs[t] = (struct free_job){ptrs, n * t / threads, n * (t + 1) / threads};
		run_free(&jobs[t]);
	}
	Py_END_ALLOW_THREADS
	PyMem_Free(ptrs);
	if (err != 0) {
		errno = err;
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"hammer", py_hammer, METH_VARARGS, "hammer(threads, rounds, min, max, seed) -> errors"},
	{"alloc", py_alloc, METH_VARARGS, "alloc(count, size) -> [address]"},
	{"free_in_threads", py_free_in_threads, METH_VARARGS,
	 "free_in_threads(addresses, threads)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_hp_rawhammer", NULL, -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hp_rawhammer(void);

PyMODINIT_FUNC PyInit__hp_rawhammer(void)
{
	return PyModule_Create(&module);
}
