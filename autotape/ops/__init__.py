"""The op table's Python tier: one module per family (elementwise, reduce, indexing,
linalg), each op declared once with its forwards, its create_graph rule and its
recorder; recording.py is what the recorders share, subscript.py is ``x[index]``.
The compiled tier of each family is the module of the same name in kernels/."""
