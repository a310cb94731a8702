/* stablejit's optional accelerator: a fast-path record's call function in C.
 *
 * A redefined closure's record (stablejit/_fingerprint/fastpath.py) says what
 * each child of the last function of its code was. Once its checks have been
 * compiled, the record gets a call function (stablejit/_runtime/hot.py). For a
 * record whose every check is an identity test or "an array of a lifted type"
 * (the seed's nested function, a loop body over parameters), this module's
 * Guard is that call function: the same checks, the entry lookup and the call
 * of the entry's jax.jit, with no Python frame between the user's call and
 * JAX's C++ dispatch. Whatever a Guard cannot vouch for goes to the general
 * call function, which decides afresh: a Guard never has to be right about
 * more than the identity tests it was given.
 *
 * Its Maker is stable_jit(fun)'s common case, the wrapper of a redefined
 * closure whose code has such a call function, made without Python bytecode.
 *
 * A trace started below a Guard (new shapes) finds the function being called
 * through current(): the Guard publishes it, with the Python frame it was
 * called from, for the duration of the call.
 *
 * Built where a C compiler is present; without it stablejit runs the same
 * checks as generated Python (STABLEJIT_PURE_PYTHON=1 forces that).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>

#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif

/* The function a Guard is calling on this thread and the frame it was called
 * from (both borrowed: alive for as long as the call runs). */
static THREAD_LOCAL PyObject *current_fn = NULL;
static THREAD_LOCAL PyObject *current_frame = NULL;

static PyObject *str_ready, *str_hits, *str_sinks, *one;

#define SMALL_STACK 16

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    /* The objects it holds: GUARD_FIELDS of them, in the order of guard_offsets
     * (which is that of its keywords). */
    PyObject *code;       /* what fn.__code__ must be */
    PyObject *sinks_ns;   /* the dict holding SINKS (the sinks module's) */
    PyObject *sinks;      /* what SINKS must be */
    PyObject *defaults;   /* what fn.__defaults__, __kwdefaults__ must be */
    PyObject *kwdefaults;
    PyObject *names;      /* tuple of the globals read, in check order */
    PyObject *gslots;     /* tuple: what each of them must be */
    PyObject *cslots;     /* tuple: what each closure cell must hold */
    PyObject *leaf_slot;  /* the slot meaning "an array of a lifted type" */
    PyObject *leaf_types; /* set of those types */
    PyObject *missing;    /* what an unbound name or an empty cell reads as */
    PyObject *dict_mark;  /* first item of a dict's slot: (dict_mark, keys, item slots) */
    PyObject *entries;    /* dict: options -> cache entry */
    PyObject *general;    /* general(fn, opts, *args, **kwargs) */
    PyObject *plainly;    /* plainly(fn, opts, error, args, kwargs) */
    PyObject *mismatch;   /* the exception type that plainly handles */
    void *globals_ptr, *builtins_ptr; /* what fn.__globals__, __builtins__ must be */
    Py_ssize_t max_leaves; /* the most arrays the slots can take */
    Py_ssize_t max_dicts;  /* the number of dict slots (each dict met is numbered) */
} Guard;

#define GUARD_FIELDS 16
static const Py_ssize_t guard_offsets[GUARD_FIELDS] = {
    offsetof(Guard, code),      offsetof(Guard, sinks_ns),   offsetof(Guard, sinks),
    offsetof(Guard, defaults),  offsetof(Guard, kwdefaults), offsetof(Guard, names),
    offsetof(Guard, gslots),    offsetof(Guard, cslots),     offsetof(Guard, leaf_slot),
    offsetof(Guard, leaf_types), offsetof(Guard, missing),   offsetof(Guard, dict_mark),
    offsetof(Guard, entries),   offsetof(Guard, general),    offsetof(Guard, plainly),
    offsetof(Guard, mismatch),
};
#define GUARD_FIELD(g, i) ((PyObject **)((char *)(g) + guard_offsets[i]))

/* Where a match puts what it takes: the arrays (new references) and the dicts
 * it met (borrowed), which the walk numbers: one met twice is a back
 * reference there, so not a match here. */
typedef struct {
    PyObject **leaves;
    Py_ssize_t n, cap;
    PyObject **dicts;
    Py_ssize_t n_dicts, cap_dicts;
} Taken;

static int fits(Guard *g, PyObject *v, PyObject *slot, Taken *t);

/* 1: v is a dict (not a side channel, not met before) with the slot's keys,
 * in order, whose values fit its item slots; 0: it is not. */
static int
dict_fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    PyObject *keys = PyTuple_GET_ITEM(slot, 1), *items = PyTuple_GET_ITEM(slot, 2);
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys) ||
        t->n_dicts >= t->cap_dicts)
        return 0;
    for (Py_ssize_t i = 0; i < t->n_dicts; i++) {
        if (t->dicts[i] == v)
            return 0;
    }
    if (PyDict_GET_SIZE(g->sinks) > 0) {
        PyObject *id = PyLong_FromVoidPtr(v);
        int in = id == NULL ? -1 : PyDict_Contains(g->sinks, id);
        Py_XDECREF(id);
        if (in != 0)
            return 0; /* (an error: the general path meets it again) */
    }
    t->dicts[t->n_dicts++] = v;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *value;
    while (PyDict_Next(v, &pos, &k, &value)) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        /* Literal and attribute names are interned: the very strings come
         * back; equal strings built anew are compared as such. */
        if (k != key && !(PyUnicode_CheckExact(k) && PyUnicode_CheckExact(key) &&
                          PyUnicode_Compare(k, key) == 0))
            return 0;
        if (!fits(g, value, PyTuple_GET_ITEM(items, i), t))
            return 0;
        i++;
    }
    return 1;
}

/* 1: v fits slot (arrays appended to t's leaves), 0: it does not. */
static int
fits(Guard *g, PyObject *v, PyObject *slot, Taken *t)
{
    if (v == slot)
        return 1;
    if (slot == g->leaf_slot) {
        if (t->n >= t->cap)
            return 0;
        int in = PySet_Contains(g->leaf_types, (PyObject *)Py_TYPE(v));
        if (in <= 0) {
            if (in < 0)
                PyErr_Clear();
            return 0;
        }
        Py_INCREF(v); /* the call below may run code that drops its holder's reference */
        t->leaves[t->n++] = v;
        return 1;
    }
    if (PyTuple_CheckExact(slot) && PyTuple_GET_SIZE(slot) == 3 &&
        PyTuple_GET_ITEM(slot, 0) == g->dict_mark)
        return dict_fits(g, v, slot, t);
    return 0;
}

static PyObject *
call_plainly(Guard *g, PyObject *fn, PyObject *opts, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *result = NULL, *pargs = NULL, *kwargs = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    pargs = PyTuple_New(nargs);
    kwargs = PyDict_New();
    if (pargs == NULL || kwargs == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(pargs, i, args[i]);
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto done;
    }
    result = PyObject_CallFunctionObjArgs(g->plainly, fn, opts, value, pargs, kwargs, NULL);
done:
    Py_XDECREF(pargs);
    Py_XDECREF(kwargs);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return result;
}

/* The checks of fn against the record: 1 if they hold (the arrays taken into
 * t), 0 if not. */
static int
matches(Guard *g, PyFunctionObject *f, Taken *t)
{
    if (f->func_code != g->code || (void *)f->func_globals != g->globals_ptr ||
        (void *)f->func_builtins != g->builtins_ptr ||
        (f->func_defaults ? f->func_defaults : Py_None) != g->defaults ||
        (f->func_kwdefaults ? f->func_kwdefaults : Py_None) != g->kwdefaults ||
        (f->func_dict != NULL && PyDict_GET_SIZE(f->func_dict) != 0) ||
        !PyDict_CheckExact(f->func_globals) || !PyDict_CheckExact(f->func_builtins))
        return 0;
    if (PyDict_GetItemWithError(g->sinks_ns, str_sinks) != g->sinks)
        return 0;
    Py_ssize_t n_globals = PyTuple_GET_SIZE(g->names), n_cells = PyTuple_GET_SIZE(g->cslots);
    for (Py_ssize_t i = 0; i < n_globals; i++) {
        PyObject *name = PyTuple_GET_ITEM(g->names, i);
        PyObject *v = PyDict_GetItemWithError(f->func_globals, name);
        if (v == NULL) {
            if (PyErr_Occurred())
                return 0;
            v = PyDict_GetItemWithError(f->func_builtins, name);
            if (v == NULL) {
                if (PyErr_Occurred())
                    return 0;
                v = g->missing;
            }
        }
        if (!fits(g, v, PyTuple_GET_ITEM(g->gslots, i), t))
            return 0;
    }
    if (n_cells) {
        PyObject *closure = f->func_closure;
        if (closure == NULL || PyTuple_GET_SIZE(closure) < n_cells)
            return 0;
        for (Py_ssize_t i = 0; i < n_cells; i++) {
            PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
            if (!fits(g, v == NULL ? g->missing : v, PyTuple_GET_ITEM(g->cslots, i), t))
                return 0;
        }
    }
    return 1;
}

static PyObject *
guard_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Guard *g = (Guard *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *small[SMALL_STACK];
    PyObject *small_dicts[SMALL_STACK];
    Taken t = {small, 0, g->max_leaves, small_dicts, 0, g->max_dicts};
    PyObject *entry, *ready = NULL, *result = NULL;
    Py_ssize_t i;
    int matched;

    if (nargs < 2 || Py_TYPE(args[0]) != &PyFunction_Type)
        return PyObject_Vectorcall(g->general, args, nargsf, kwnames);
    PyObject *fn = args[0], *opts = args[1];
    if (t.cap + nargs - 2 + nkw > SMALL_STACK)
        t.leaves = PyMem_Malloc(sizeof(PyObject *) * (t.cap + nargs - 2 + nkw));
    if (t.cap_dicts > SMALL_STACK)
        t.dicts = PyMem_Malloc(sizeof(PyObject *) * t.cap_dicts);
    if (t.leaves == NULL || t.dicts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    matched = matches(g, (PyFunctionObject *)fn, &t);
    /* Looked up last: nothing between here and its use runs Python code, which
     * could drop the entry from the dict (a borrowed reference). */
    entry = matched ? PyDict_GetItemWithError(g->entries, opts) : NULL;
    ready = entry == NULL ? NULL : PyObject_GetAttr(entry, str_ready);
    if (ready == NULL || ready == Py_None) {
        PyErr_Clear();
        result = PyObject_Vectorcall(g->general, args, nargsf, kwnames);
        goto done;
    }
    /* entry.hits += 1 */
    PyObject *hits = PyObject_GetAttr(entry, str_hits);
    PyObject *more = hits == NULL ? NULL : PyNumber_Add(hits, one);
    Py_XDECREF(hits);
    int set = more == NULL ? -1 : PyObject_SetAttr(entry, str_hits, more);
    Py_XDECREF(more);
    if (set < 0)
        goto done;

    Py_ssize_t n = t.n;
    for (i = 2; i < nargs + nkw; i++)
        t.leaves[n++] = args[i];
    PyObject *fn_before = current_fn, *frame_before = current_frame;
    current_fn = fn;
    current_frame = (PyObject *)PyEval_GetFrame();
    result = PyObject_Vectorcall(ready, t.leaves, n - nkw, kwnames);
    current_fn = fn_before;
    current_frame = frame_before;
    if (result == NULL && PyErr_ExceptionMatches(g->mismatch))
        result = call_plainly(g, fn, opts, args + 2, nargs - 2, kwnames);
done:
    if (t.leaves != NULL) {
        for (i = 0; i < t.n; i++)
            Py_DECREF(t.leaves[i]);
        if (t.leaves != small)
            PyMem_Free(t.leaves);
    }
    if (t.dicts != NULL && t.dicts != small_dicts)
        PyMem_Free(t.dicts);
    Py_XDECREF(ready);
    return result;
}

static int
guard_traverse(Guard *g, visitproc visit, void *arg)
{
    for (int i = 0; i < GUARD_FIELDS; i++)
        Py_VISIT(*GUARD_FIELD(g, i));
    return 0;
}

static int
guard_clear(Guard *g)
{
    for (int i = 0; i < GUARD_FIELDS; i++)
        Py_CLEAR(*GUARD_FIELD(g, i));
    return 0;
}

static void
guard_dealloc(Guard *g)
{
    PyObject_GC_UnTrack(g);
    guard_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *
guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    /* The fields in guard_offsets' order, then what is not held. */
    static char *kwlist[] = {"code",       "sinks_ns", "sinks",   "defaults", "kwdefaults",
                             "names",      "gslots",   "cslots",  "leaf_slot", "leaf_types",
                             "missing",    "dict_mark", "entries", "general",  "plainly",
                             "mismatch",   "g_id",     "b_id",    "max_leaves", "max_dicts",
                             NULL};
    PyObject *o[GUARD_FIELDS], *g_id, *b_id;
    Py_ssize_t max_leaves, max_dicts;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "OO!OOOO!O!O!OO!OOO!OOOO!O!nn", kwlist, &o[0], &PyDict_Type, &o[1],
            &o[2], &o[3], &o[4], &PyTuple_Type, &o[5], &PyTuple_Type, &o[6], &PyTuple_Type,
            &o[7], &o[8], &PySet_Type, &o[9], &o[10], &o[11], &PyDict_Type, &o[12], &o[13],
            &o[14], &o[15], &PyLong_Type, &g_id, &PyLong_Type, &b_id, &max_leaves, &max_dicts))
        return NULL;
    if (PyTuple_GET_SIZE(o[5]) != PyTuple_GET_SIZE(o[6]) || !PyDict_CheckExact(o[2]) ||
        max_leaves < 0 || max_dicts < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "Guard: names and gslots differ in length, sinks is not a dict, or a "
                        "maximum is negative");
        return NULL;
    }
    void *globals_ptr = PyLong_AsVoidPtr(g_id), *builtins_ptr = PyLong_AsVoidPtr(b_id);
    if (PyErr_Occurred())
        return NULL;
    Guard *g = (Guard *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    for (int i = 0; i < GUARD_FIELDS; i++) {
        Py_INCREF(o[i]);
        *GUARD_FIELD(g, i) = o[i];
    }
    g->globals_ptr = globals_ptr;
    g->builtins_ptr = builtins_ptr;
    g->max_leaves = max_leaves;
    g->max_dicts = max_dicts;
    g->vectorcall = guard_vectorcall;
    return (PyObject *)g;
}

static PyTypeObject GuardType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Guard",
    .tp_basicsize = sizeof(Guard),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Guard, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = guard_new,
    .tp_traverse = (traverseproc)guard_traverse,
    .tp_clear = (inquiry)guard_clear,
    .tp_dealloc = (destructor)guard_dealloc,
    .tp_doc = "A fast-path record's call function: its identity checks, its entry lookup "
              "and the call of the entry's jax.jit, in C.",
};

/* Maker: stable_jit(fun)'s common case, a function whose code's fast path
 * has a call function: the StableJitted partial of (call, fun, options). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *info; /* dict: id(code) -> CodeInfo (whose .fast.call is read) */
    PyObject *cls;  /* StableJitted */
    PyObject *opts; /* the default options */
} Maker;

static PyObject *str_fast, *str_call;

static PyObject *
maker_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *m = (Maker *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "Maker takes one function");
        return NULL;
    }
    PyObject *fun = args[0];
    if (Py_TYPE(fun) != &PyFunction_Type)
        Py_RETURN_NONE;
    PyObject *key = PyLong_FromVoidPtr(((PyFunctionObject *)fun)->func_code);
    if (key == NULL)
        return NULL;
    PyObject *info = PyDict_GetItemWithError(m->info, key); /* borrowed */
    Py_DECREF(key);
    if (info == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *fast = PyObject_GetAttr(info, str_fast);
    if (fast == NULL)
        return NULL;
    PyObject *call = PyObject_GetAttr(fast, str_call);
    Py_DECREF(fast);
    if (call == NULL)
        return NULL;
    if (call == Py_None)
        return call;
    PyObject *parts[3] = {call, fun, m->opts};
    PyObject *made = PyObject_Vectorcall(m->cls, parts, 3, NULL);
    Py_DECREF(call);
    if (made == NULL)
        return NULL;
    /* A partial without a __dict__ of its own is unwrapped by a partial
     * made of it (see the runtime's jitted.partial_of). */
    PyObject *d = PyObject_GenericGetDict(made, NULL);
    if (d == NULL) {
        Py_DECREF(made);
        return NULL;
    }
    Py_DECREF(d);
    return made;
}

static int
maker_traverse(Maker *m, visitproc visit, void *arg)
{
    Py_VISIT(m->info);
    Py_VISIT(m->cls);
    Py_VISIT(m->opts);
    return 0;
}

static int
maker_clear(Maker *m)
{
    Py_CLEAR(m->info);
    Py_CLEAR(m->cls);
    Py_CLEAR(m->opts);
    return 0;
}

static void
maker_dealloc(Maker *m)
{
    PyObject_GC_UnTrack(m);
    maker_clear(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
maker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"info", "cls", "opts", NULL};
    PyObject *info, *cls, *opts;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O", kwlist, &PyDict_Type, &info,
                                     &PyType_Type, &cls, &opts))
        return NULL;
    Maker *m = (Maker *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    Py_INCREF(info);
    Py_INCREF(cls);
    Py_INCREF(opts);
    m->info = info;
    m->cls = cls;
    m->opts = opts;
    m->vectorcall = maker_vectorcall;
    return (PyObject *)m;
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stablejit._speedups.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = maker_new,
    .tp_traverse = (traverseproc)maker_traverse,
    .tp_clear = (inquiry)maker_clear,
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_doc = "maker(fun): cls(fun's code's fast call function, fun, opts), or None where "
              "fun is not a function or its code has no call function.",
};

static PyObject *
current(PyObject *module, PyObject *unused)
{
    if (current_fn == NULL)
        return Py_BuildValue("(OO)", Py_None, Py_None);
    return Py_BuildValue("(OO)", current_fn, current_frame ? current_frame : Py_None);
}

static PyObject *str_dict;

/* Numbers keys[0..n) in seen as the walk numbers what it meets first (see the
 * guards' all_fresh): 1 if all were fresh, 0 if not (seen may hold some). */
static int
number_fresh(PyObject **keys, Py_ssize_t n, PyObject *sinks, PyObject *seen)
{
    int check_sinks = sinks != Py_None && PyDict_Check(sinks) && PyDict_GET_SIZE(sinks) > 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int in = PyDict_Contains(seen, keys[k]);
        if (in == 0 && check_sinks)
            in = PyDict_Contains(sinks, keys[k]);
        if (in != 0)
            return in < 0 ? -1 : 0;
    }
    Py_ssize_t base = PyDict_GET_SIZE(seen);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *number = PyLong_FromSsize_t(PyDict_GET_SIZE(seen));
        if (number == NULL || PyDict_SetItem(seen, keys[k], number) < 0) {
            Py_XDECREF(number);
            return -1;
        }
        Py_DECREF(number);
    }
    return PyDict_GET_SIZE(seen) == base + n; /* else: one object twice */
}

/* The guards' _Objects.fit past its check of the classes' kinds: True, False
 * or None, as there. */
static PyObject *
objects_fit(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyTuple_CheckExact(args[2]) || !PyTuple_CheckExact(args[3]) ||
        !PyTuple_CheckExact(args[4]) || !PyDict_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "objects_fit(objs: list, types: list, sizes: tuple, "
                                         "names: tuple, values: tuple, sinks, seen: dict)");
        return NULL;
    }
    PyObject *objs = args[0], *types = args[1], *sizes = args[2], *names = args[3],
             *values = args[4];
    Py_ssize_t n = PyList_GET_SIZE(objs), total = PyTuple_GET_SIZE(names), j = 0;
    if (n != PyList_GET_SIZE(types) || n != PyTuple_GET_SIZE(sizes) ||
        total != PyTuple_GET_SIZE(values))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((PyObject *)Py_TYPE(PyList_GET_ITEM(objs, i)) != PyList_GET_ITEM(types, i))
            Py_RETURN_FALSE;
    }
    PyObject **keys = PyMem_Malloc((2 * n + 1) * sizeof(PyObject *));
    if (keys == NULL)
        return PyErr_NoMemory();
    Py_ssize_t nkeys = 0;
    PyObject *result = Py_None;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyList_GET_ITEM(objs, i);
        /* object.__getattribute__(obj, "__dict__"), as the walk reads it */
        PyObject *d = PyObject_GenericGetAttr(obj, str_dict);
        if (d == NULL) {
            result = NULL;
            goto done;
        }
        Py_ssize_t expected = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != expected ||
            j + expected > total) {
            Py_DECREF(d);
            if (PyErr_Occurred())
                result = NULL;
            goto done; /* None: the item-by-item check decides */
        }
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(d, &pos, &k, &v)) {
            if (k != PyTuple_GET_ITEM(names, j) || v != PyTuple_GET_ITEM(values, j)) {
                Py_DECREF(d);
                goto done;
            }
            j++;
        }
        /* Each object, then its __dict__: the walk's order. */
        keys[nkeys] = PyLong_FromVoidPtr(obj);
        keys[nkeys + 1] = keys[nkeys] == NULL ? NULL : PyLong_FromVoidPtr(d);
        Py_DECREF(d); /* obj holds it */
        if (keys[nkeys + 1] == NULL) {
            Py_XDECREF(keys[nkeys]);
            result = NULL;
            goto done;
        }
        nkeys += 2;
    }
    switch (number_fresh(keys, nkeys, args[5], args[6])) {
    case 1:
        result = Py_True;
        break;
    case 0:
        result = Py_False;
        break;
    default:
        result = NULL;
    }
done:
    for (Py_ssize_t k = 0; k < nkeys; k++)
        Py_DECREF(keys[k]);
    PyMem_Free(keys);
    Py_XINCREF(result);
    return result;
}

static PyMethodDef methods[] = {
    {"current", current, METH_NOARGS,
     "(function, frame): what the innermost Guard running on this thread is calling, and "
     "the Python frame that called it; (None, None) if none is."},
    {"objects_fit", (PyCFunction)(void (*)(void))objects_fit, METH_FASTCALL,
     "objects_fit(objs, types, sizes, names, values, sinks, seen): the guards' "
     "_Objects.fit past its check of kinds (True, False or None), in one C pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stablejit._speedups",
    "stablejit's optional C accelerator (see _speedups.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    str_ready = PyUnicode_InternFromString("ready");
    str_hits = PyUnicode_InternFromString("hits");
    str_sinks = PyUnicode_InternFromString("SINKS");
    str_fast = PyUnicode_InternFromString("fast");
    str_call = PyUnicode_InternFromString("call");
    str_dict = PyUnicode_InternFromString("__dict__");
    one = PyLong_FromLong(1);
    if (str_ready == NULL || str_hits == NULL || str_sinks == NULL || one == NULL ||
        str_fast == NULL || str_call == NULL || str_dict == NULL)
        return NULL;
    if (PyType_Ready(&GuardType) < 0 || PyType_Ready(&MakerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GuardType);
    if (PyModule_AddObject(m, "Guard", (PyObject *)&GuardType) < 0) {
        Py_DECREF(&GuardType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&MakerType);
    if (PyModule_AddObject(m, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(&MakerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
