"""neuralbake's version, in a module that imports nothing.

It sits on the lowest layer beside :mod:`neuralbake.errors`, so that a report's version record
(:func:`neuralbake.core.device.versions`) reads it without importing the package's top, which
stands above every layer. ``neuralbake.__version__`` is the same string.
"""

__version__ = "0.1.0"
