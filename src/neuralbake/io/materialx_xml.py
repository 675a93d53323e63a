"""Reading a MaterialX file safely: the XML checked before MaterialX sees it, includes confined,
the standard data libraries attached and the document validated.

A document is untrusted input, and MaterialX's reader would follow any ``<xi:include href>`` (an
absolute path, ``../..``) and quote the included file in its parse errors. So the XML is first
scanned with expat (streaming, no recursion; a ``DOCTYPE`` or entity declaration is refused, so
nothing is expanded), each include is resolved with :func:`neuralbake.io.refs.resolve_reference`
(inside the folder of the file that names it, unless ``--allow-outside-refs``), cycles and nesting
beyond :data:`MAX_INCLUDE_DEPTH` are refused, and MaterialX then reads each file with its own
include processing switched off while neuralbake imports the checked includes itself.
:func:`read_materialx_xml` returns the validated ``MaterialX.Document``;
:mod:`neuralbake.io.materialx` turns it into plain dataclasses.
"""

from __future__ import annotations

import stat
from functools import lru_cache
from pathlib import Path
from typing import Any
from xml.parsers import expat

import MaterialX as mx

from neuralbake.errors import InputError
from neuralbake.io.refs import resolve_reference

__all__ = ["MAX_INCLUDED_FILES", "MAX_INCLUDE_DEPTH", "MAX_XML_BYTES", "MAX_XML_DEPTH", "materialx_error", "read_materialx_xml", "standard_library"]

MAX_XML_BYTES = 64 * 1024 * 1024
"""Largest ``.mtlx`` file read (the document and each file it includes)."""

MAX_XML_DEPTH = 64
"""Deepest element nesting accepted (MaterialX needs four or five levels)."""

MAX_INCLUDE_DEPTH = 8
"""Deepest chain of ``xi:include`` (a document including a library including another...)."""



MAX_INCLUDED_FILES = 256
"""Most distinct documents one MaterialX read includes (directly or through other includes)."""


def materialx_error(path: Path | str, element: str | None, problem: str, fix: str) -> InputError:
    """The :class:`InputError` of a MaterialX document: ``path``, the element's name path (or ``None``), what and the fix."""
    return InputError(problem, path=path, field=element, fix=fix)


@lru_cache(maxsize=1)
def standard_library() -> Any:
    """MaterialX's standard data libraries (nodedefs), loaded once per process."""
    # Loaded once per process (~800 nodedefs, tens of milliseconds); documents only reference it.
    library = mx.createDocument()
    mx.loadLibraries(mx.getDefaultDataLibraryFolders(), mx.getDefaultDataSearchPath(), library)
    return library


def _scan_xml(path: Path, top: Path) -> list[str]:
    """Check ``path``'s XML with expat and return the ``href`` of each top-level ``xi:include``.

    Raises :class:`InputError` for a file that is not a regular file, too large, not well-formed,
    nested too deeply, or that declares a DOCTYPE or entities (no MaterialX document needs them,
    and entity expansion is the classic XML bomb).
    """
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise materialx_error(top, None, f"'{path.name}' is not a regular file.", "pass a .mtlx file.")
        if status.st_size > MAX_XML_BYTES:
            raise materialx_error(
                top, None, f"'{path.name}' is {status.st_size:,} bytes; at most {MAX_XML_BYTES:,} is read.", "pass the right file."
            )
        data = path.read_bytes()
    except OSError as error:
        raise materialx_error(top, None, f"'{path.name}' cannot be read ({error.strerror or error}).", "check the file and its permissions.") from error
    includes: list[str] = []
    depth = 0

    def start(name: str, attributes: dict[str, str]) -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_XML_DEPTH:
            raise materialx_error(top, None, f"'{path.name}' nests XML elements more than {MAX_XML_DEPTH} deep.", "flatten the document.")
        if depth == 2 and name == "xi:include":  # MaterialX follows only the root's includes
            includes.append(attributes.get("href", ""))

    def end(name: str) -> None:
        nonlocal depth
        depth -= 1

    def refuse_dtd(*_: Any) -> None:
        raise materialx_error(
            top,
            None,
            f"'{path.name}' declares a DOCTYPE or entities, which neuralbake does not read.",
            "remove the <!DOCTYPE ...> / <!ENTITY ...> declarations; MaterialX documents need none.",
        )

    parser = expat.ParserCreate()  # no namespace processing: MaterialX files often leave xi: undeclared
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.ExternalEntityRefHandler = lambda *_: 0
    try:
        parser.Parse(data, True)
    except expat.ExpatError as error:
        raise materialx_error(
            top,
            None,
            f"'{path.name}' is not well-formed MaterialX XML ({expat.ErrorString(error.code)} at line {error.lineno}, column {error.offset}).",
            "repair the XML or re-export the document.",
        ) from error
    return includes

def _read_confined(path: Path, top: Path, chain: tuple[Path, ...], seen: set[Path] | None = None) -> Any:
    """Read ``path`` (``top`` or a file it includes, through ``chain``) into a MaterialX document.

    Includes are resolved by :func:`resolve_reference` against the folder of the file naming
    them, checked for cycles and depth, read by this function and imported; MaterialX's own include
    processing is switched off, so it never opens a file neuralbake has not checked. Each file is
    read once however often it is included (``seen``), so a few kB of repeated includes cannot
    fan out into millions of parses; at most :data:`MAX_INCLUDED_FILES` distinct files are read.
    """
    seen = set() if seen is None else seen
    where = " > ".join(p.name for p in chain[1:])
    includes = _scan_xml(path, top)
    options = mx.XmlReadOptions()
    options.readXIncludeFunction = None
    document = mx.createDocument()
    try:
        mx.readFromXmlFile(document, str(path), mx.FileSearchPath(), options)
    except mx.ExceptionParseError as error:
        raise materialx_error(
            top, where or None, f"the file is not well-formed MaterialX XML ({error}).", "repair the XML or re-export the document."
        ) from error
    except (mx.Exception, mx.ExceptionFileMissing) as error:
        raise materialx_error(top, where or None, f"MaterialX could not read the document ({error}).", "check the file.") from error
    for index, href in enumerate(includes):
        field = f"{where + ' > ' if where else ''}xi:include[{index}]/href"
        included = resolve_reference(path, href, field=field, what="MaterialX include")
        if included in chain:
            raise materialx_error(
                top, field, f"the include '{href}' forms a cycle ({' > '.join(p.name for p in (*chain, included))}).", "remove the circular include."
            )
        if len(chain) > MAX_INCLUDE_DEPTH:
            raise materialx_error(top, field, f"includes nest more than {MAX_INCLUDE_DEPTH} deep.", "flatten the chain of included documents.")
        if not included.is_file():
            raise materialx_error(top, field, f"the included document '{href}' does not exist.", "put it beside the document that includes it.")
        if included in seen:
            continue  # already imported: its elements are in the document
        seen.add(included)
        if len(seen) > MAX_INCLUDED_FILES:
            raise materialx_error(top, field, f"more than {MAX_INCLUDED_FILES} documents are included.", "merge the included libraries.")
        document.importLibrary(_read_confined(included, top, (*chain, included), seen))
    return document


def read_materialx_xml(path: Path) -> Any:
    """Read ``path`` (includes confined and checked) into a MaterialX document with the standard libraries attached, validated."""
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise materialx_error(path, None, f"the MaterialX document {what}.", "check the path; MaterialX documents end in .mtlx.")
    document = _read_confined(path, path, (path.resolve(),))
    document.setDataLibrary(standard_library())
    valid, message = document.validate()
    if not valid:
        raise materialx_error(
            path,
            None,
            f"the document fails MaterialX validation: {'; '.join(line.strip() for line in message.splitlines() if line.strip())}.",
            "correct the elements named above (MaterialX's message quotes each one).",
        )
    return document

