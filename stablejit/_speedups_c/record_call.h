/* A record's call function (record_call.c) and the checks of its guards
 * (guard_kinds.c, with what a match takes in match.h): what they share. */
#ifndef STABLEJIT_RECORD_CALL_H
#define STABLEJIT_RECORD_CALL_H

#include "speedups.h"

/* The most kinds of guard guard_kinds.c may hold. */
#define MAX_GUARD_KINDS 16

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    /* The objects it holds: RECORD_CALL_FIELDS of them, in the order of
     * record_call_held (which is that of its keywords). */
    PyObject *top;        /* the record's own function spec (the "function" kind's, code held) */
    PyObject *sinks;      /* what SINKS must be (sj_sinks_now: the one published last) */
    PyObject *any_array;  /* the guard meaning "an array of a lifted type" */
    PyObject *leaf_types; /* set of those types */
    PyObject *missing;    /* what an unbound name or an empty cell reads as */
    PyObject *kinds;      /* tuple of (name, mark): the marks that lead each kind's specs */
    PyObject *table;      /* dict: class -> kind (an object's kind must not have changed) */
    PyObject *entries;    /* dict: options -> cache entry */
    PyObject *general;    /* general(fn, opts, *args, **kwargs) */
    PyObject *plainly;    /* plainly(fn, opts, error, args, kwargs) */
    PyObject *mismatch;   /* the exception type that plainly handles */
    PyObject *entry_type; /* the cache entries' class (a Counted), whose member ready is read */
    Py_ssize_t ready_offset; /* where its instances keep it */
    Py_ssize_t max_leaves; /* the most arrays the specs can take (counted by sj_valid) */
    Py_ssize_t max_met;    /* the most objects they number (functions, lists, dicts, objects) */
    /* The mark of each kind of guard_kinds.c's table, in the table's order
     * (borrowed from kinds), matched by name when it was made. */
    PyObject *marks[MAX_GUARD_KINDS];
} RecordCall;

/* Where a match puts what it takes: the arrays (new references), and the
 * objects it numbers as the walk numbers them (borrowed, in order; one met
 * twice is a back reference there, so not a match here), with a hash set
 * of them once there are many. */
typedef struct {
    PyObject **leaves;
    Py_ssize_t n, cap;
    PyObject **met;
    Py_ssize_t n_met, cap_met;
    PyObject **set;
    size_t mask;
    /* The user classes whose contents this match is re-checking, innermost
     * last (see guard_kinds.c's class case): a class's own methods read it
     * as one of them. */
    const struct Within *within;
    /* The class state that last held in this match (borrowed): one class's
     * objects in a list re-check it once (a match changes no class). */
    PyObject *held;
} Taken;

struct Within {
    PyObject *cls;
    const struct Within *outer;
};

/* What RecordCall() learns of its specs as it checks their shapes: the
 * marks and the array guard it reads them with, and how many arrays and
 * numbered objects (functions, lists, dicts, objects) a match can take. */
typedef struct {
    PyObject *const *marks;
    PyObject *any_array;
    Py_ssize_t leaves, met;
} Shape;

/* One kind of guard: its name (the Python kind's `native`), how many items
 * its specs have (the mark included), and its two cases: fits (1 if v passes, its arrays taken and what it meets numbered
 * in t; 0 if not, never an error set: what fails goes to the general path,
 * which decides afresh) and valid (1 if the spec is well formed,
 * recursively, its arrays and numbered objects added to s; 0 with a
 * ValueError). */
typedef struct {
    const char *name;
    Py_ssize_t size;
    int (*fits)(RecordCall *g, PyObject *v, PyObject *spec, Taken *t);
    int (*valid)(Shape *s, PyObject *spec);
} GuardKind;

/* guard_kinds.c: the kinds, and how many there are. */
extern const GuardKind sj_guard_kinds[];
extern const int sj_n_guard_kinds;

typedef int (*SjFits)(RecordCall *g, PyObject *v, PyObject *spec, Taken *t);
typedef int (*SjValid)(Shape *s, PyObject *spec, int function);

/* class_checks.c: 1 if the class check in check (from item at: class,
 * state, holds, deep specs) holds, its deep specs checked with fits; 0 if
 * not. Well formed (sj_valid_class_check), with valid for what it holds;
 * the optional one is None or a 4-tuple. */
int sj_class_holds(RecordCall *g, PyObject *check, Py_ssize_t at, Taken *t, SjFits fits);
int sj_valid_class_check(Shape *s, PyObject *check, Py_ssize_t at, SjValid valid);
int sj_valid_optional_class_check(Shape *s, PyObject *check, SjValid valid);

/* class_checks.c: the descriptor case, what it holds checked with fits
 * (valid: the check of its spec's shape). */
int sj_descriptor_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t, SjFits fits);
int sj_descriptor_valid(Shape *s, PyObject *spec, SjValid valid);

/* node_kinds.c: the fields case (a pytree node through its fields, each
 * checked with fits), and the items case (a dict of these very items), a
 * table entry of its own; with the checks of their specs' shapes. */
int sj_fields_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t, SjFits fits);
int sj_fields_valid(Shape *s, PyObject *spec, SjValid valid);
int sj_items_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t);
int sj_items_valid(Shape *s, PyObject *spec);

/* guard_kinds.c: 1 if v fits the guard spec (one of the kinds', or the very
 * object, an equal atom, or any array); 0 if not. */
int sj_fits(RecordCall *g, PyObject *v, PyObject *spec, Taken *t);

/* guard_kinds.c: 1 if fn (a function) passes a "function" spec's checks. */
int sj_function_fits(RecordCall *g, PyObject *fn, PyObject *spec, Taken *t);

/* guard_kinds.c: 1 if spec is well formed (a "function" spec, if
 * function), recursively, counted into s; 0 with a ValueError naming what
 * is not. RecordCall() checks its specs once, so that a match reads them
 * unchecked and its buffers are sized to them. */
int sj_valid(Shape *s, PyObject *spec, int function);

#endif
