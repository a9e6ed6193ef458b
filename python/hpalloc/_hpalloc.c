/* hpalloc._hpalloc — the thin adapter between Python/NumPy and libhpalloc.
 *
 * No allocation policy lives here: the NumPy handlers are tables of the
 * library's NEP 49 entry points (hp_ctx_*), and every other function only
 * converts between C structs and Python objects.  Policy (knob parsing,
 * page-size validation, routing) stays in the library.
 *
 * NumPy is imported lazily, by the handler functions only, so that
 * `import hpalloc` (stats, knobs) never imports NumPy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Only the public NEP 49 API (NumPy >= 1.22) is used.  With NumPy >= 1.25
 * headers (including 2.x) this keeps the module loadable by NumPy 1.22. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#ifndef NPY_TARGET_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#endif
#include <numpy/arrayobject.h>

#if !defined(NPY_1_22_API_VERSION) || NPY_FEATURE_VERSION < NPY_1_22_API_VERSION
#error "hpalloc needs NumPy >= 1.22 headers (NEP 49 PyDataMem_Handler)"
#endif

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hpalloc.h"

/* NumPy looks a handler up by this capsule name. */
#define MEM_HANDLER_CAPSULE "mem_handler"

/* ---- handlers ----------------------------------------------------------
 * Arrays keep a reference to the handler they were created with and call
 * its free() whenever they die — possibly after uninstall(), in another
 * thread, or at interpreter exit.  So handlers are static structs and their
 * capsules are created once and never released: they are immortal. */

/* The handler's name and version, as NumPy reports them
 * (get_handler_name/_version); exported to hpalloc.numpy as HANDLER_NAME
 * and HANDLER_VERSION. */
#define HANDLER_NAME "hpalloc"
#define HANDLER_VERSION 1

static PyDataMem_Handler knob_handler = {
	HANDLER_NAME,
	HANDLER_VERSION,
	{NULL, hp_ctx_malloc, hp_ctx_calloc, hp_ctx_realloc, hp_ctx_free},
};
static PyObject *knob_capsule;

/* One handler per library context other than the knob-following one (a
 * forced page size, a placement policy, or both).  Same name and version:
 * only the context differs.  The library interns contexts, so the same
 * page size and policy always give the same context, hence the same
 * handler and capsule.  Created under the GIL, never freed. */
struct ctx_handler {
	void *ctx;
	PyDataMem_Handler handler;
	PyObject *capsule;
	struct ctx_handler *next;
};
static struct ctx_handler *ctx_handlers;

static int numpy_ready(void)
{
	if (PyArray_API != NULL)
		return 0;
	return _import_array(); /* sets an exception on failure */
}

static PyObject *make_capsule(PyDataMem_Handler *handler)
{
	/* No destructor: the struct is static. */
	return PyCapsule_New(handler, MEM_HANDLER_CAPSULE, NULL);
}

static PyObject *py_handler(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	if (knob_capsule == NULL) {
		/* the NumPy origin's context: follows the knobs, counted as numpy */
		knob_handler.allocator.ctx = hp_ctx(HP_ORIGIN_NUMPY, 0);
		knob_capsule = make_capsule(&knob_handler);
		if (knob_capsule == NULL)
			return NULL;
	}
	Py_INCREF(knob_capsule);
	return knob_capsule;
}

/* A size from a Python int or a string the library parses ("1G"). */
static int size_from_object(PyObject *obj, uint64_t *out)
{
	if (PyLong_Check(obj)) {
		unsigned long long v = PyLong_AsUnsignedLongLong(obj);
		if (v == (unsigned long long)-1 && PyErr_Occurred()) {
			PyErr_Format(PyExc_ValueError,
				     "invalid size %R: must be >= 0", obj);
			return -1;
		}
		*out = v;
		return 0;
	}
	if (!PyUnicode_Check(obj)) {
		/* the type's name: PyTypeObject is opaque in the limited API */
		PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__name__");
		if (name != NULL)
			PyErr_Format(PyExc_TypeError,
				     "size must be an int or a string like \"2M\", not %.100U",
				     name);
		Py_XDECREF(name);
		return -1;
	}
	const char *text = PyUnicode_AsUTF8AndSize(obj, NULL);
	if (text == NULL)
		return -1;
	if (hp_parse_size(text, out) != 0) {
		PyErr_Format(PyExc_ValueError,
			     "invalid size %R: expected bytes or a number with a K/M/G/T suffix",
			     obj);
		return -1;
	}
	return 0;
}

/* The handler (capsule, new reference) allocating through ctx. */
static PyObject *handler_for_ctx(void *ctx)
{
	struct ctx_handler *h;
	for (h = ctx_handlers; h != NULL; h = h->next)
		if (h->ctx == ctx) {
			Py_INCREF(h->capsule);
			return h->capsule;
		}
	h = PyMem_Calloc(1, sizeof(*h));
	if (h == NULL)
		return PyErr_NoMemory();
	h->ctx = ctx;
	h->handler = knob_handler;
	h->handler.allocator.ctx = ctx;
	h->capsule = make_capsule(&h->handler);
	if (h->capsule == NULL) {
		PyMem_Free(h);
		return NULL;
	}
	h->next = ctx_handlers;
	ctx_handlers = h;
	Py_INCREF(h->capsule);
	return h->capsule;
}

/* The NumPy origin's context forcing pagesize (0: following the knobs). */
static void *pagesize_ctx(uint64_t pagesize)
{
	errno = 0;
	void *ctx = hp_ctx(HP_ORIGIN_NUMPY, (size_t)pagesize);
	if (ctx == NULL) {
		char text[32];
		if (hp_format_size(pagesize, text, sizeof text) != 0)
			snprintf(text, sizeof text, "%llu", (unsigned long long)pagesize);
		PyErr_Format(PyExc_ValueError,
			     "page size %s is not offered by this kernel (%s)",
			     text, strerror(errno ? errno : EINVAL));
	}
	return ctx;
}

static PyObject *py_pagesize_handler(PyObject *self, PyObject *arg)
{
	(void)self;
	uint64_t pagesize;
	if (size_from_object(arg, &pagesize) != 0)
		return NULL;
	if (pagesize == 0) { /* not a page size: hp_ctx() would follow the knobs */
		PyErr_Format(PyExc_ValueError, "page size 0 is not offered by this kernel (%s)",
			     strerror(EINVAL));
		return NULL;
	}
	void *ctx = pagesize_ctx(pagesize);
	return ctx ? handler_for_ctx(ctx) : NULL;
}

/* numa_handler(policy, pagesize=None): the handler placing its blocks by
 * policy (a numa knob value), on hugetlb pages of pagesize if given. */
static PyObject *py_numa_handler(PyObject *self, PyObject *args)
{
	(void)self;
	const char *policy;
	PyObject *ps_obj = Py_None;
	uint64_t pagesize = 0;
	char err[HP_KNOB_ERROR_MAX] = "";
	if (!PyArg_ParseTuple(args, "s|O:numa_handler", &policy, &ps_obj))
		return NULL;
	if (ps_obj != Py_None && size_from_object(ps_obj, &pagesize) != 0)
		return NULL;
	/* the library's message (policy, why, what is accepted) */
	if (hp_knob_parse("numa", policy, NULL, 0, err, sizeof err) != 0) {
		PyErr_SetString(PyExc_ValueError, err[0] ? err : "invalid numa policy");
		return NULL;
	}
	if (ps_obj != Py_None && pagesize == 0) {
		PyErr_Format(PyExc_ValueError, "page size 0 is not offered by this kernel (%s)",
			     strerror(EINVAL));
		return NULL;
	}
	void *base = pagesize_ctx(pagesize);
	if (base == NULL)
		return NULL;
	void *ctx = hp_ctx_numa(base, policy);
	if (ctx == NULL)
		return PyErr_SetFromErrno(errno == EINVAL ? PyExc_ValueError : PyExc_OSError);
	return handler_for_ctx(ctx);
}

/* NumPy's current handler lives in a ContextVar: this sets it in the
 * calling context only and returns the one it replaces. */
static PyObject *py_set_handler(PyObject *self, PyObject *capsule)
{
	(void)self;
	if (numpy_ready() != 0)
		return NULL;
	if (!PyCapsule_IsValid(capsule, MEM_HANDLER_CAPSULE)) {
		PyErr_SetString(PyExc_TypeError,
				"expected a NumPy mem_handler capsule");
		return NULL;
	}
	return PyDataMem_SetHandler(capsule);
}

static PyObject *py_get_handler(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	if (numpy_ready() != 0)
		return NULL;
	return PyDataMem_GetHandler();
}

/* ---- backing -------------------------------------------------------------- */

static int add_size(PyObject *dict, const char *key, size_t value)
{
	PyObject *v = PyLong_FromSize_t(value);
	if (v == NULL)
		return -1;
	int rc = PyDict_SetItemString(dict, key, v);
	Py_DECREF(v);
	return rc;
}

static int add_kernel_fields(PyObject *dict, const struct hp_kernel_backing *k)
{
	if (add_size(dict, "kernel_page_size", k->kernel_page_size) ||
	    add_size(dict, "rss_bytes", k->rss_bytes) ||
	    add_size(dict, "anon_huge_bytes", k->anon_huge_bytes) ||
	    add_size(dict, "hugetlb_bytes", k->hugetlb_bytes) ||
	    add_size(dict, "huge_bytes", k->huge_bytes))
		return -1;
	return PyDict_SetItemString(dict, "thp_eligible",
				    k->thp_eligible ? Py_True : Py_False);
}

static int add_str(PyObject *dict, const char *key, const char *value);

/* numa_policy (hpalloc's placement of the block, None for other memory),
 * numa_kernel_policy and numa_node_pages {node: pages} as numa_maps says,
 * numa_page_size (the size of those pages).  None where numa_maps cannot
 * be read (a kernel without NUMA). */
static int add_numa_fields(PyObject *dict, const char *policy, const struct hp_kernel_numa *k)
{
	PyObject *pages = NULL;
	int rc;
	if (k != NULL) {
		pages = PyDict_New();
		for (int n = 0; pages != NULL && n < HP_NUMA_NODES; n++) {
			PyObject *key, *v;
			if (k->node_pages[n] == 0)
				continue;
			key = PyLong_FromLong(n);
			v = PyLong_FromUnsignedLongLong(k->node_pages[n]);
			if (key == NULL || v == NULL || PyDict_SetItem(pages, key, v) != 0)
				Py_CLEAR(pages);
			Py_XDECREF(key);
			Py_XDECREF(v);
		}
		if (pages == NULL)
			return -1;
	}
	rc = add_str(dict, "numa_policy", policy && policy[0] ? policy : NULL) ||
	     add_str(dict, "numa_kernel_policy", k ? k->policy : NULL) ||
	     PyDict_SetItemString(dict, "numa_node_pages", pages ? pages : Py_None) ||
	     (k ? add_size(dict, "numa_page_size", k->page_size)
		: PyDict_SetItemString(dict, "numa_page_size", Py_None));
	Py_XDECREF(pages);
	return rc ? -1 : 0;
}

static int address_from_object(PyObject *obj, void **out)
{
	void *p = PyLong_AsVoidPtr(obj);
	if (p == NULL && PyErr_Occurred())
		return -1;
	*out = p;
	return 0;
}

/* backing(address) for an address inside a block hpalloc handed out. */
static PyObject *py_backing(PyObject *self, PyObject *arg)
{
	(void)self;
	void *ptr;
	struct hp_backing b;
	if (address_from_object(arg, &ptr) != 0)
		return NULL;
	if (hp_backing(ptr, &b) != 0)
		return PyErr_SetFromErrno(errno == EINVAL ? PyExc_ValueError
							  : PyExc_OSError);
	struct hp_backing_numa bn;
	int have_numa = hp_backing_numa(ptr, &bn) == 0;
	PyObject *dict = PyDict_New();
	if (dict == NULL)
		return NULL;
	const char *backend = hp_backend_name(b.backend);
	PyObject *name = PyUnicode_FromString(backend ? backend : "unknown");
	if (name == NULL || PyDict_SetItemString(dict, "backend", name) ||
	    add_size(dict, "usable_size", b.usable_size) ||
	    add_size(dict, "mapping_size", b.mapping_size) ||
	    add_size(dict, "requested_page_size", b.requested_page_size) ||
	    add_kernel_fields(dict, &b.kernel) ||
	    add_numa_fields(dict, have_numa ? bn.policy : NULL, have_numa ? &bn.kernel : NULL)) {
		Py_XDECREF(name);
		Py_DECREF(dict);
		return NULL;
	}
	Py_DECREF(name);
	return dict;
}

/* kernel_backing(address, length): smaps for any range, hpalloc's or not. */
static PyObject *py_kernel_backing(PyObject *self, PyObject *args)
{
	(void)self;
	PyObject *addr_obj;
	Py_ssize_t length;
	void *addr;
	struct hp_kernel_backing k;
	if (!PyArg_ParseTuple(args, "On:kernel_backing", &addr_obj, &length))
		return NULL;
	if (address_from_object(addr_obj, &addr) != 0)
		return NULL;
	if (length < 0) {
		PyErr_SetString(PyExc_ValueError, "length must be >= 0");
		return NULL;
	}
	if (hp_kernel_backing(addr, (size_t)length, &k) != 0)
		return PyErr_SetFromErrno(errno == EINVAL ? PyExc_ValueError
							  : PyExc_OSError);
	struct hp_kernel_numa kn;
	int have_numa = hp_kernel_numa(addr, (size_t)length, &kn) == 0;
	PyObject *dict = PyDict_New();
	if (dict == NULL)
		return NULL;
	if (add_kernel_fields(dict, &k) != 0 ||
	    add_numa_fields(dict, NULL, have_numa ? &kn : NULL) != 0) {
		Py_DECREF(dict);
		return NULL;
	}
	return dict;
}

/* ---- statistics and knobs ------------------------------------------------ */

static PyObject *py_stats(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	struct hp_stats s;
	if (hp_stats_get(&s) != 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	PyObject *dict = PyDict_New();
	if (dict == NULL)
		return NULL;
	for (int i = 0; i < HP_STAT_COUNT; i++) {
		const char *name = hp_stat_name(i);
		PyObject *v = PyLong_FromUnsignedLongLong(s.v[i]);
		if (name == NULL || v == NULL ||
		    PyDict_SetItemString(dict, name, v) != 0) {
			Py_XDECREF(v);
			Py_DECREF(dict);
			if (!PyErr_Occurred())
				PyErr_Format(PyExc_RuntimeError,
					     "statistic %d has no name", i);
			return NULL;
		}
		Py_DECREF(v);
	}
	return dict;
}

static int add_str(PyObject *dict, const char *key, const char *value)
{
	if (value == NULL)
		return PyDict_SetItemString(dict, key, Py_None);
	PyObject *v = PyUnicode_FromString(value);
	if (v == NULL)
		return -1;
	int rc = PyDict_SetItemString(dict, key, v);
	Py_DECREF(v);
	return rc;
}

static PyObject *knob_dict(const struct hp_knob_info *info)
{
	PyObject *d = PyDict_New();
	if (d == NULL)
		return NULL;
	if (add_str(d, "value", info->value) ||
	    add_str(d, "source", hp_source_name(info->source)) ||
	    add_str(d, "default", info->default_value) ||
	    add_str(d, "help", info->help) ||
	    add_str(d, "type", info->type) ||
	    add_str(d, "accepted", info->accepted) ||
	    add_str(d, "choices", info->choices) ||
	    add_str(d, "rejected", info->rejected)) {
		Py_DECREF(d);
		return NULL;
	}
	return d;
}

static PyObject *py_config(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	PyObject *dict = PyDict_New();
	if (dict == NULL)
		return NULL;
	int count = hp_knob_count();
	for (int i = 0; i < count; i++) {
		struct hp_knob_info info;
		PyObject *knob = NULL;
		if (hp_knob_info(i, &info) != 0) {
			PyErr_SetFromErrno(PyExc_OSError);
		} else if ((knob = knob_dict(&info)) != NULL &&
			   PyDict_SetItemString(dict, info.name, knob) == 0) {
			Py_DECREF(knob);
			continue;
		}
		Py_XDECREF(knob);
		Py_DECREF(dict);
		return NULL;
	}
	return dict;
}

/* Validate first so a refusal carries the library's own message (knob,
 * bad value, what is accepted); only then apply. */
static PyObject *py_set(PyObject *self, PyObject *args)
{
	(void)self;
	const char *name, *text;
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX] = "";
	if (!PyArg_ParseTuple(args, "ss:set", &name, &text))
		return NULL;
	if (hp_knob_parse(name, text, canon, sizeof canon, err, sizeof err) != 0) {
		PyErr_SetString(PyExc_ValueError,
				err[0] ? err : "invalid knob or value");
		return NULL;
	}
	if (hp_knob_set(name, text) != 0) {
		if (errno == EINVAL || errno == ENOENT) {
			PyErr_Format(PyExc_ValueError, "%s=%s refused: %s",
				     name, text, strerror(errno));
			return NULL;
		}
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	Py_RETURN_NONE;
}

/* Validate only: the canonical value, or ValueError with the library's
 * message (knob, bad value, what is accepted).  Changes nothing. */
static PyObject *py_parse_knob(PyObject *self, PyObject *args)
{
	(void)self;
	const char *name, *text;
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX] = "";
	if (!PyArg_ParseTuple(args, "ss:parse_knob", &name, &text))
		return NULL;
	if (hp_knob_parse(name, text, canon, sizeof canon, err, sizeof err) != 0) {
		PyErr_SetString(PyExc_ValueError,
				err[0] ? err : "invalid knob or value");
		return NULL;
	}
	return PyUnicode_FromString(canon);
}

static PyObject *py_parse_assignment(PyObject *self, PyObject *arg)
{
	(void)self;
	const char *word = PyUnicode_AsUTF8AndSize(arg, NULL);
	char canon[HP_KNOB_VALUE_MAX], err[HP_KNOB_ERROR_MAX] = "";
	struct hp_knob_info ki;
	if (word == NULL)
		return NULL;
	int k = hp_knob_parse_assignment(word, canon, sizeof canon, err, sizeof err);
	if (k < 0 || hp_knob_info(k, &ki) != 0) {
		PyErr_SetString(PyExc_ValueError, err[0] ? err : "invalid KNOB=VALUE");
		return NULL;
	}
	return Py_BuildValue("(ss)", ki.name, canon);
}

static PyObject *py_unset(PyObject *self, PyObject *args)
{
	(void)self;
	const char *name = NULL;
	if (!PyArg_ParseTuple(args, "|z:unset", &name))
		return NULL;
	if (name != NULL && hp_knob_index(name) < 0) {
		PyErr_Format(PyExc_ValueError, "unknown knob '%s'", name);
		return NULL;
	}
	if (hp_knob_unset(name) != 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	Py_RETURN_NONE;
}

/* ---- processes using hpalloc (the library reads their entries) ----------- */

static int add_ull(PyObject *dict, const char *key, unsigned long long value)
{
	PyObject *v = PyLong_FromUnsignedLongLong(value);
	if (v == NULL)
		return -1;
	int rc = PyDict_SetItemString(dict, key, v);
	Py_DECREF(v);
	return rc;
}

static PyObject *proc_stats_dict(const struct hp_proc *p)
{
	PyObject *d = PyDict_New();
	if (d == NULL)
		return NULL;
	for (int s = 0; s < HP_STAT_COUNT; s++)
		if ((p->stat_mask & ((uint64_t)1 << s)) &&
		    add_ull(d, hp_stat_name(s), p->stats.v[s]) != 0) {
			Py_DECREF(d);
			return NULL;
		}
	return d;
}

static PyObject *proc_knobs_dict(const struct hp_proc *p)
{
	PyObject *d = PyDict_New();
	if (d == NULL)
		return NULL;
	for (int k = 0; k < p->nknobs; k++) {
		const struct hp_proc_knob *kn = &p->knobs[k];
		PyObject *one = PyDict_New();
		if (one == NULL || add_str(one, "value", kn->value) ||
		    add_str(one, "source", hp_source_name(kn->source)) ||
		    add_str(one, "rejected", kn->rejected) ||
		    PyDict_SetItemString(d, kn->name, one) != 0) {
			Py_XDECREF(one);
			Py_DECREF(d);
			return NULL;
		}
		Py_DECREF(one);
	}
	return d;
}

/* The same fields as `hpctl --json stats`, plus "alive". */
static PyObject *proc_dict(const struct hp_proc *p)
{
	PyObject *d = PyDict_New(), *stats = NULL, *knobs = NULL;
	if (d == NULL)
		return NULL;
	if (add_ull(d, "pid", (unsigned long long)p->pid) ||
	    add_str(d, "comm", p->comm) ||
	    add_ull(d, "start_time", p->start_time) ||
	    PyDict_SetItemString(d, "alive", p->alive > 0 ? Py_True : Py_None) ||
	    (stats = proc_stats_dict(p)) == NULL ||
	    PyDict_SetItemString(d, "stats", stats) ||
	    (knobs = proc_knobs_dict(p)) == NULL ||
	    PyDict_SetItemString(d, "knobs", knobs)) {
		Py_XDECREF(stats);
		Py_XDECREF(knobs);
		Py_DECREF(d);
		return NULL;
	}
	Py_DECREF(stats);
	Py_DECREF(knobs);
	return d;
}

static PyObject *py_processes(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	struct hp_proc_list l;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = hp_proc_list(&l);
	Py_END_ALLOW_THREADS
	if (rc != 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	PyObject *list = PyList_New(0);
	for (size_t i = 0; list != NULL && i < l.count; i++) {
		PyObject *d = proc_dict(&l.procs[i]);
		if (d == NULL || PyList_Append(list, d) != 0)
			Py_CLEAR(list);
		Py_XDECREF(d);
	}
	hp_proc_list_free(&l);
	return list;
}

/* The processes started with var set (hp_proc_marked: the library reads
 * their environ and comm), published or not: hpalloc.ray's workers. */
static PyObject *py_marked(PyObject *self, PyObject *args)
{
	(void)self;
	const char *var;
	struct hp_proc_mark *v = NULL;
	size_t n = 0;
	int rc;
	if (!PyArg_ParseTuple(args, "s:marked", &var))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = hp_proc_marked(var, &v, &n);
	Py_END_ALLOW_THREADS
	if (rc != 0 && errno == EINVAL)
		return PyErr_Format(PyExc_ValueError, "not an environment variable's name: '%s'", var);
	if (rc != 0)
		return PyErr_SetFromErrno(PyExc_OSError);
	PyObject *list = PyList_New(0);
	for (size_t i = 0; list != NULL && i < n; i++) {
		PyObject *d = PyDict_New();
		if (d == NULL || add_ull(d, "pid", (unsigned long long)v[i].pid) ||
		    add_str(d, "value", v[i].value) || add_str(d, "comm", v[i].comm) ||
		    PyList_Append(list, d) != 0)
			Py_CLEAR(list);
		Py_XDECREF(d);
	}
	free(v);
	return list;
}

/* The Prometheus text of this process (live) or, with all, of every
 * process publishing in the control directory: the library formats it
 * (hp_proc_prometheus), as it does for `hpctl metrics`. */
static PyObject *py_prometheus(PyObject *self, PyObject *args)
{
	(void)self;
	int all = 0, rc;
	struct hp_proc_list l = {0};
	struct hp_proc me;
	char *text = NULL;
	size_t len = 0;
	if (!PyArg_ParseTuple(args, "|p:prometheus", &all))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = all ? hp_proc_list(&l) : hp_proc_self(&me);
	if (rc == 0)
		text = all ? hp_proc_prometheus(l.procs, l.count, &len)
			   : hp_proc_prometheus(&me, 1, &len);
	hp_proc_list_free(&l);
	Py_END_ALLOW_THREADS
	if (rc != 0 || text == NULL)
		return PyErr_SetFromErrno(PyExc_OSError);
	PyObject *str = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
	free(text);
	return str;
}

/* The file of the shared object that defines symbol (the process's
 * dynamic linker decides which one serves it), or None. */
static PyObject *object_of(void *addr)
{
	Dl_info info;
	if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL)
		Py_RETURN_NONE;
	return PyUnicode_DecodeFSDefault(info.dli_fname);
}

static PyObject *py_library_path(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return object_of((void *)hp_version);
}

static int add_object(struct dl_phdr_info *info, size_t size, void *list)
{
	(void)size;
	if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0')
		return 0; /* the program itself, the vDSO */
	PyObject *name = PyUnicode_DecodeFSDefault(info->dlpi_name);
	int rc = name == NULL || PyList_Append(list, name) != 0;
	Py_XDECREF(name);
	return rc; /* non-zero stops the walk */
}

/* The shared objects loaded in this process, in the dynamic linker's order
 * (LD_PRELOAD's come first, after the program). */
static PyObject *py_loaded_objects(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	PyObject *list = PyList_New(0);
	if (list != NULL && dl_iterate_phdr(add_object, list) != 0)
		Py_CLEAR(list);
	return list;
}

static PyObject *py_parse_size(PyObject *self, PyObject *arg)
{
	(void)self;
	uint64_t v;
	if (size_from_object(arg, &v) != 0)
		return NULL;
	return PyLong_FromUnsignedLongLong(v);
}

static PyObject *py_format_size(PyObject *self, PyObject *arg)
{
	(void)self;
	char buf[32];
	unsigned long long v = PyLong_AsUnsignedLongLong(arg);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (hp_format_size(v, buf, sizeof buf) != 0)
		return PyErr_SetFromErrno(PyExc_ValueError);
	return PyUnicode_FromString(buf);
}

static PyObject *py_version(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyUnicode_FromString(hp_version());
}

static PyObject *py_report_activation(PyObject *self, PyObject *args)
{
	(void)self;
	const char *adapter, *detail = "";
	int ok, rc;
	if (!PyArg_ParseTuple(args, "sp|s:report_activation", &adapter, &ok, &detail))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = hp_report_activation(adapter, ok, detail);
	Py_END_ALLOW_THREADS
	if (rc < 0 && errno == EINVAL) {
		PyErr_Format(PyExc_ValueError, "report_activation: adapter '%s' is not one word", adapter);
		return NULL;
	}
	return PyBool_FromLong(rc == 1);
}

static PyObject *py_secure_execution(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyBool_FromLong(hp_secure_execution());
}

static PyObject *py_cache_flush(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	Py_BEGIN_ALLOW_THREADS
	hp_cache_flush();
	hp_release_drain();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"handler", py_handler, METH_NOARGS,
	 "handler() -> capsule of the 'hpalloc' NumPy handler (follows the knobs)"},
	{"pagesize_handler", py_pagesize_handler, METH_O,
	 "pagesize_handler(size) -> capsule of an 'hpalloc' handler forcing hugetlb pages of size"},
	{"numa_handler", py_numa_handler, METH_VARARGS,
	 "numa_handler(policy, pagesize=None) -> capsule of an 'hpalloc' handler placing its blocks by policy (a numa knob value)"},
	{"set_handler", py_set_handler, METH_O,
	 "set_handler(capsule) -> previous; sets NumPy's handler in the current context"},
	{"get_handler", py_get_handler, METH_NOARGS,
	 "get_handler() -> NumPy's handler capsule of the current context"},
	{"backing", py_backing, METH_O,
	 "backing(address) -> dict: the hpalloc block holding address and what smaps and numa_maps say"},
	{"kernel_backing", py_kernel_backing, METH_VARARGS,
	 "kernel_backing(address, length) -> dict: what /proc/self/smaps and numa_maps say for the range"},
	{"stats", py_stats, METH_NOARGS, "stats() -> dict of the library's counters"},
	{"config", py_config, METH_NOARGS,
	 "config() -> {knob: {value, source, default, help, ...}}"},
	{"set", py_set, METH_VARARGS,
	 "set(knob, value): per-process override; ValueError if refused"},
	{"parse_knob", py_parse_knob, METH_VARARGS,
	 "parse_knob(knob, value) -> canonical value; ValueError if refused (nothing changes)"},
	{"parse_assignment", py_parse_assignment, METH_O,
	 "parse_assignment('KNOB=VALUE') -> (knob, canonical value); ValueError if refused"},
	{"unset", py_unset, METH_VARARGS,
	 "unset(knob=None): drop the per-process override of knob (None: all)"},
	{"parse_size", py_parse_size, METH_O, "parse_size('4M') -> 4194304"},
	{"format_size", py_format_size, METH_O, "format_size(4194304) -> '4M'"},
	{"version", py_version, METH_NOARGS, "version() -> libhpalloc version"},
	{"processes", py_processes, METH_NOARGS,
	 "processes() -> [{pid, comm, start_time, alive, stats, knobs}] of every process publishing hpalloc stats"},
	{"marked", py_marked, METH_VARARGS,
	 "marked(var) -> [{pid, value, comm}] of every process (ours to read) started with var set (hp_proc_marked)"},
	{"report_activation", py_report_activation, METH_VARARGS,
	 "report_activation(adapter, ok, detail='') -> True if the line went to HPALLOC_REPORT's file (hp_report_activation)"},
	{"prometheus", py_prometheus, METH_VARARGS,
	 "prometheus(all=False) -> this process's stats (all: every publishing process's) in Prometheus' text format"},
	{"secure_execution", py_secure_execution, METH_NOARGS,
	 "secure_execution() -> True in secure execution, where no HPALLOC_* variable counts (hp_secure_execution)"},
	{"library_path", py_library_path, METH_NOARGS,
	 "library_path() -> the file of the libhpalloc this module runs on"},
	{"loaded_objects", py_loaded_objects, METH_NOARGS,
	 "loaded_objects() -> the files of the shared objects loaded in this process, in load order"},
	{"cache_flush", py_cache_flush, METH_NOARGS,
	 "cache_flush(): release every cached block and wait for the releases"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	"hpalloc._hpalloc",
	"Adapter between Python/NumPy and libhpalloc (use the hpalloc package).",
	-1,
	methods,
	NULL,
	NULL,
	NULL,
	NULL,
};

PyMODINIT_FUNC PyInit__hpalloc(void); /* the interpreter's entry point */

/* The NumPy it was built for, readable without importing NumPy:
 * hpalloc.numpy compares it with the NumPy at hand and names the package
 * to rebuild, instead of the traceback of a failed import_array().  And
 * the handler's name and version, which hpalloc.numpy re-exports. */
static int add_numpy_build_facts(PyObject *m)
{
	return PyModule_AddIntConstant(m, "NUMPY_ABI_VERSION", (long)NPY_ABI_VERSION) ||
	       PyModule_AddIntConstant(m, "NUMPY_TARGET_VERSION", (long)NPY_FEATURE_VERSION) ||
	       PyModule_AddStringConstant(m, "HANDLER_NAME", HANDLER_NAME) ||
	       PyModule_AddIntConstant(m, "HANDLER_VERSION", HANDLER_VERSION);
}

PyMODINIT_FUNC PyInit__hpalloc(void)
{
	PyObject *m = PyModule_Create(&module);
	if (m != NULL && add_numpy_build_facts(m) != 0)
		Py_CLEAR(m);
	return m;
}
