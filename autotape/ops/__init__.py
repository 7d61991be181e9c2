"""The op table: one module per family, each op declared once with its forward and
its derivative. See codes.py for the index."""
