"""One module per CLI command, each with ``register(app)``.  Keep them thin: parse options,
call the library, print.  Library errors (advisor.errors.InputError) become one line + exit 2."""
