"""Compiles a MessageSpec into classes and one decode and one encode function per version.

Like asyncpg's codec binding, all decisions that depend on the version are taken here, once:
the generated functions contain no `if version >= n` and no loop over field descriptions.
Consecutive fixed-size fields are read and written with a single `struct.Struct`.

Decoders have the shape `(buf, pos) -> (message, new_pos)` and raise only `DecodeError`.
Encoders have the shape `(message, out, parts) -> None`: they append to the bytearray `out`, and
large records fields are handed over as separate entries of `parts` (zero copy, see
`primitives.write_records_body`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from kafka_ext.protocol import primitives
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.schema import FieldSpec, MessageSpec, StructSpec

Decoder = Callable[[Any, int], tuple[Any, int]]
Encoder = Callable[[Any, bytearray, list | None], None]

_FIXED_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "float64": "d", "uuid": "16s",
}
_FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
                "int64": 8, "float64": 8, "uuid": 16}
ZERO_UUID = uuid.UUID(int=0)
_MISSING: Any = object()
# Compared against (never mutated) when testing whether a struct still holds its defaults.
_EMPTY: list[Any] = []


class Message:
    """Base of every generated class: slots, keyword construction, equality, repr."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Any:
        values = {f: getattr(self, f) for f in self._fields}
        values.update(changes)
        return type(self)(**values)


def field_default(f: FieldSpec, version: int | None = None) -> Any:
    """The value a field takes when the version lacks it or the sender left it out."""
    text = f.default
    if f.is_array:
        return None if text == "null" else _MISSING  # _MISSING: a fresh list
    if f.struct is not None:
        return None if text == "null" else _MISSING  # _MISSING: a fresh struct
    t = f.type
    if t == "bool":
        return text == "true"
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(text, 0) if text not in (None, "") else 0
    if t == "float64":
        return float(text) if text else 0.0
    if t == "string":
        if text == "null":
            return None
        return text or ""
    if t == "bytes":
        return None if text == "null" else b""
    if t == "records":
        return None
    if t == "uuid":
        return ZERO_UUID
    raise ValueError(f"no default for type {t}")


class _Source:
    """Collects generated lines and the constants they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self._counter = 0

    def const(self, value: Any, prefix: str = "_c") -> str:
        for name, existing in self.consts.items():
            if existing is value:
                return name
        self._counter += 1
        name = f"{prefix}{self._counter}"
        self.consts[name] = value
        return name

    def struct(self, fmt: str) -> str:
        key = f"_S_{fmt.replace('?', 'B_')}"
        if key not in self.consts:
            self.consts[key] = struct.Struct(">" + fmt)
        return key

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


class MessageCompiler:
    """Builds the classes of one message and its per-version codecs."""

    def __init__(self, spec: MessageSpec) -> None:
        self.spec = spec
        self.classes: dict[str, type] = {}
        for s in spec.all_structs():
            self.classes[s.name] = self._make_class(s)
        for s in spec.all_structs():
            for f in s.fields:
                if f.struct is not None:  # reachable as Parent.Child and as Message.Child
                    child = self.classes[f.struct.name]
                    setattr(self.classes[s.name], f.struct.name, child)
                    setattr(self.classes[spec.struct.name], f.struct.name, child)
        self.message_class = self.classes[spec.struct.name]

    # -- classes -----------------------------------------------------------------------------

    def _make_class(self, s: StructSpec) -> type:
        names = tuple(f.attr for f in s.fields)
        src = _Source()
        params = []
        body = []
        for f in s.fields:
            default = field_default(f)
            if default is _MISSING:
                params.append(f"{f.attr}=_MISSING")
                make = "[]" if f.is_array else f"_cls_{f.struct.name}()"  # type: ignore[union-attr]
                body.append(f"    self.{f.attr} = {make} if {f.attr} is _MISSING else {f.attr}")
            else:
                params.append(f"{f.attr}={src.const(default)}")
                body.append(f"    self.{f.attr} = {f.attr}")
        params.append("unknown_tagged_fields=None")
        body.append("    self.unknown_tagged_fields = unknown_tagged_fields")
        code = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
        namespace: dict[str, Any] = {"_MISSING": _MISSING, **src.consts}
        # Struct-typed defaults refer to classes made later: resolve them lazily by name.
        for f in s.fields:
            if f.struct is not None and not f.is_array:
                namespace[f"_cls_{f.struct.name}"] = _LazyClass(self.classes, f.struct.name)
        exec(code, namespace)  # noqa: S102 - generated from the schema, not from input
        cls = type(s.name, (Message,), {
            "__slots__": names + ("unknown_tagged_fields",),
            "__init__": namespace["__init__"],
            "_fields": names,
            "__hash__": None,
        })
        return cls

    # -- codecs ------------------------------------------------------------------------------

    def compile_version(self, version: int) -> tuple[Decoder, Encoder]:
        src = self._generate(version)
        namespace: dict[str, Any] = {
            "DecodeError": DecodeError, "_p": primitives, "_UUID": uuid.UUID,
            "_uvar": primitives.read_uvarint, "_wuvar": primitives.write_uvarint,
            "_new": object.__new__, "_mv": memoryview, "_EMPTY": _EMPTY,
            **{f"_cls_{n}": c for n, c in self.classes.items()},
            **src.consts,
        }
        exec("\n".join(src.lines), namespace)  # noqa: S102 - generated from the schema
        top = self.spec.struct.name
        return namespace[f"_dec_{top}"], namespace[f"_enc_{top}"]

    def source(self, version: int) -> str:
        """The generated decoders and encoders of one version, for reading and debugging."""
        return "\n".join(self._generate(version).lines)

    def _generate(self, version: int) -> _Source:
        flexible = version in self.spec.flexible_versions
        src = _Source()
        for s in reversed(self.spec.all_structs()):  # children first: parents call them
            self._gen_decoder(src, s, version, flexible)
            self._gen_encoder(src, s, version, flexible)
        return src

    @staticmethod
    def _present(fields: list[FieldSpec], version: int) -> list[FieldSpec]:
        return [f for f in fields if version in f.versions]

    # -- decoders ----------------------------------------------------------------------------
    #
    # Generated decoders are straight-line code: Python function calls are the main cost, so
    # the common cases (one-byte varints, array count checks, an empty tagged-field section)
    # are inlined, and helpers are called only for the rare ones. Anything malformed raises
    # DecodeError here, or IndexError/struct.error, which MessageType.decode converts.

    def _gen_decoder(self, src: _Source, s: StructSpec, version: int, flexible: bool) -> None:
        src.emit(0, f"def _dec_{s.name}(buf, pos):")
        # object.__new__ plus slot stores is faster than calling the keyword __init__.
        src.emit(1, f"obj = _new(_cls_{s.name})")
        present = self._present(s.fields, version)
        regular = [f for f in present if not (flexible and version in f.tagged_versions)]
        tagged = [f for f in present if flexible and version in f.tagged_versions]
        absent = [f for f in s.fields if f not in regular]
        for f in absent:  # defaults first; tagged fields may overwrite them below
            default = field_default(f)
            if default is _MISSING:
                value = "[]" if f.is_array else f"_cls_{f.struct.name}()"  # type: ignore[union-attr]
            else:
                value = src.const(default)
            src.emit(1, f"obj.{f.attr} = {value}")
        self._gen_decode_fields(src, regular, version, flexible, 1)
        src.emit(1, "obj.unknown_tagged_fields = None")
        if flexible:
            # Nearly every struct arrives with no tagged fields: one byte test skips the loop.
            src.emit(1, "if buf[pos] == 0:")
            src.emit(2, "pos += 1")
            src.emit(1, "else:")
            self._gen_decode_tagged_loop(src, tagged, version, 2)
        src.emit(1, "return obj, pos")
        src.emit(0, "")

    def _gen_decode_tagged_loop(self, src: _Source, tagged: list[FieldSpec], version: int,
                                indent: int) -> None:
        src.emit(indent, "ntags, pos = _uvar(buf, pos)")
        src.emit(indent, "for _ in range(ntags):")
        body = indent + 1
        src.emit(body, "tag, pos = _uvar(buf, pos)")
        src.emit(body, "size, pos = _uvar(buf, pos)")
        src.emit(body, "end = pos + size")
        src.emit(body, "if end > len(buf): raise DecodeError('tagged field past the end')")
        keyword = "if"
        for f in tagged:
            src.emit(body, f"{keyword} tag == {f.tag}:")
            self._gen_decode_field(src, f, version, True, body + 1, tagged=True)
            src.emit(body + 1, "if pos != end: raise DecodeError('tagged field size mismatch')")
            keyword = "elif"
        if tagged:
            src.emit(body, "else:")
            inner = body + 1
        else:
            inner = body
        src.emit(inner, "if obj.unknown_tagged_fields is None: obj.unknown_tagged_fields = []")
        src.emit(inner, "obj.unknown_tagged_fields.append((tag, bytes(buf[pos:end])))")
        src.emit(inner, "pos = end")

    def _gen_decode_fields(self, src: _Source, fields: list[FieldSpec], version: int,
                           flexible: bool, indent: int) -> None:
        run: list[FieldSpec] = []
        for f in fields:
            if self._is_fixed(f, version):
                run.append(f)
                continue
            self._flush_fixed_decode(src, run, indent)
            run = []
            self._gen_decode_field(src, f, version, flexible, indent)
        self._flush_fixed_decode(src, run, indent)

    def _is_fixed(self, f: FieldSpec, version: int) -> bool:
        return not f.is_array and f.type in _FIXED_FORMATS

    def _flush_fixed_decode(self, src: _Source, run: list[FieldSpec], indent: int) -> None:
        if not run:
            return
        fmt = "".join(_FIXED_FORMATS[f.type] for f in run)
        size = sum(_FIXED_SIZES[f.type] for f in run)
        targets = [f"obj.{f.attr}" if f.type != "uuid" else f"_u{i}" for i, f in enumerate(run)]
        src.emit(indent, f"{', '.join(targets)}, = {src.struct(fmt)}.unpack_from(buf, pos)")
        for i, f in enumerate(run):
            if f.type == "uuid":
                src.emit(indent, f"obj.{f.attr} = _UUID(bytes=_u{i})")
        src.emit(indent, f"pos += {size}")

    @staticmethod
    def _emit_read_uvarint(src: _Source, target: str, indent: int) -> None:
        """Inline the one-byte case (values below 128) of an unsigned varint; call for longer."""
        src.emit(indent, f"{target} = buf[pos]; pos += 1")
        src.emit(indent, f"if {target} >= 0x80: {target}, pos = _uvar(buf, pos - 1)")

    def _gen_decode_field(self, src: _Source, f: FieldSpec, version: int, flexible: bool,
                          indent: int, tagged: bool = False) -> None:
        nullable = version in f.nullable_versions
        flexible = _field_flexible(f, version, flexible)
        target = f"obj.{f.attr}"
        if f.is_array:
            self._gen_decode_array(src, f, version, flexible, nullable, target, indent)
        elif f.struct is not None:
            if nullable and tagged:
                # Inside a tagged field Kafka marks presence with an unsigned varint: 0 = null.
                self._emit_read_uvarint(src, "marker", indent)
                src.emit(indent, "if marker == 0:")
            elif nullable:
                # Elsewhere the marker is an int8: -1 = null, 1 = present.
                src.emit(indent, "marker = buf[pos]; pos += 1")
                src.emit(indent, "if marker >= 0x80:  # negative int8")
            if nullable:
                src.emit(indent + 1, f"{target} = None")
                src.emit(indent, "else:")
                src.emit(indent + 1, f"{target}, pos = _dec_{f.struct.name}(buf, pos)")
            else:
                src.emit(indent, f"{target}, pos = _dec_{f.struct.name}(buf, pos)")
        elif f.type in _FIXED_FORMATS:
            self._flush_fixed_decode_single(src, f, target, indent)
        elif f.type == "records" and flexible:
            # Inlined: one records field per partition in Produce and Fetch. (Own names: the
            # tagged-field loop around it may be using `size` and `end`.)
            self._emit_read_uvarint(src, "rsize", indent)
            src.emit(indent, "if rsize == 0:")
            src.emit(indent + 1, f"{target} = None")
            src.emit(indent, "else:")
            src.emit(indent + 1, "rend = pos + rsize - 1")
            src.emit(indent + 1, "if rend > len(buf): raise DecodeError('records past the end')")
            src.emit(indent + 1, f"{target} = _mv(buf)[pos:rend]")
            src.emit(indent + 1, "pos = rend")
        else:
            reader = _reader_name(f.type, flexible, nullable)
            src.emit(indent, f"{target}, pos = _p.{reader}(buf, pos)")

    def _flush_fixed_decode_single(self, src: _Source, f: FieldSpec, target: str,
                                   indent: int) -> None:
        fmt = _FIXED_FORMATS[f.type]
        if f.type == "uuid":
            src.emit(indent, f"{target} = _UUID(bytes={src.struct(fmt)}.unpack_from(buf, pos)[0])")
        else:
            src.emit(indent, f"({target},) = {src.struct(fmt)}.unpack_from(buf, pos)")
        src.emit(indent, f"pos += {_FIXED_SIZES[f.type]}")

    def _gen_decode_array(self, src: _Source, f: FieldSpec, version: int, flexible: bool,
                          nullable: bool, target: str, indent: int) -> None:
        if flexible:
            self._emit_read_uvarint(src, "n", indent)
            src.emit(indent, "n -= 1")
        else:
            src.emit(indent, "(n,) = _p.I32.unpack_from(buf, pos); pos += 4")
        src.emit(indent, "if n < 0:")
        if nullable:
            src.emit(indent + 1, f"{target} = None")
        else:
            src.emit(indent + 1, f"raise DecodeError('null array for non-nullable {f.name}')")
        src.emit(indent, "else:")
        inner = indent + 1
        # Every element takes at least one byte: a count beyond the bytes left is a lie, caught
        # before anything is allocated for it.
        src.emit(inner, "if n > len(buf) - pos:")
        src.emit(inner + 1, "raise DecodeError(f'array of {n} elements in {len(buf) - pos} "
                            "remaining bytes')")
        element = f.element_type
        if f.struct is not None:
            src.emit(inner, "items = []")
            src.emit(inner, "append = items.append")
            src.emit(inner, "for _ in range(n):")
            src.emit(inner + 1, f"item, pos = _dec_{f.struct.name}(buf, pos)")
            src.emit(inner + 1, "append(item)")
            src.emit(inner, f"{target} = items")
        elif element in _FIXED_FORMATS and element != "uuid":
            values = f"{self._array_struct(src, element)}.unpack_from(buf, pos)"
            src.emit(inner, f"{target} = [*{values}]")
            src.emit(inner, f"pos += n * {_FIXED_SIZES[element]}")
        else:
            src.emit(inner, "items = []")
            src.emit(inner, "for _ in range(n):")
            if element == "uuid":
                src.emit(inner + 1, f"(raw,) = {src.struct('16s')}.unpack_from(buf, pos)")
                src.emit(inner + 1, "items.append(_UUID(bytes=raw))")
                src.emit(inner + 1, "pos += 16")
            else:
                reader = _reader_name(element, flexible, False)
                src.emit(inner + 1, f"item, pos = _p.{reader}(buf, pos)")
                src.emit(inner + 1, "items.append(item)")
            src.emit(inner, f"{target} = items")

    @staticmethod
    def _array_struct(src: _Source, element: str) -> str:
        """Expression for the Struct of `n` values: a tuple index for short arrays."""
        code = _FIXED_FORMATS[element]
        cached = src.const(primitives.ARRAY_STRUCTS[code], "_A")
        return (f"({cached}[n] if n < {primitives.ARRAY_STRUCTS_CACHED} "
                f"else _p.array_struct('{code}', n))")

    # -- encoders ----------------------------------------------------------------------------

    def _gen_encoder(self, src: _Source, s: StructSpec, version: int, flexible: bool) -> None:
        src.emit(0, f"def _enc_{s.name}(obj, out, parts):")
        present = self._present(s.fields, version)
        regular = [f for f in present if not (flexible and version in f.tagged_versions)]
        tagged = [f for f in present if flexible and version in f.tagged_versions]
        run: list[FieldSpec] = []
        for f in regular:
            if self._is_fixed(f, version):
                run.append(f)
                continue
            self._flush_fixed_encode(src, run)
            run = []
            self._gen_encode_field(src, f, version, flexible, f"obj.{f.attr}", "out", "parts", 1)
        self._flush_fixed_encode(src, run)
        if flexible:
            if not tagged:
                src.emit(1, "if obj.unknown_tagged_fields:")
                src.emit(2, "_p.write_tagged_fields(out, list(obj.unknown_tagged_fields))")
                src.emit(1, "else:")
                src.emit(2, "out.append(0)")
            else:
                self._gen_encode_tagged(src, tagged, version)
        src.emit(1, "return None")
        src.emit(0, "")

    def _gen_encode_tagged(self, src: _Source, tagged: list[FieldSpec], version: int) -> None:
        tests: list[tuple[str, str]] = []
        for i, f in enumerate(tagged):
            value = f"obj.{f.attr}"
            if f.struct is not None and not f.is_array:
                src.emit(1, f"tv{i} = {value}")  # read once, tested field by field below
                value = f"tv{i}"
            tests.append(self._tagged_is_default(src, f, value))
        # The common case, every tagged field at its default: one zero byte, no list to sort.
        all_default = " and ".join(is_default for is_default, _ in tests)
        src.emit(1, f"if not obj.unknown_tagged_fields and {all_default}:")
        src.emit(2, "out.append(0)")
        src.emit(2, "return None")
        src.emit(1, "tagged = list(obj.unknown_tagged_fields or ())")
        for f, (_, must_write) in zip(tagged, tests, strict=True):
            src.emit(1, f"if {must_write}:")
            src.emit(2, "t = bytearray()")
            self._gen_encode_field(src, f, version, True, f"obj.{f.attr}", "t", "None", 2,
                                   tagged=True)
            src.emit(2, f"tagged.append(({f.tag}, t))")
        src.emit(1, "_p.write_tagged_fields(out, tagged)")

    def _tagged_is_default(self, src: _Source, f: FieldSpec, value: str) -> tuple[str, str]:
        """Expressions (holds its default, must be written) for tagged field `f`.

        Generated per field instead of comparing with a freshly built default instance through
        Message.__eq__, which cost ~0.6 µs per struct field.
        """
        default = field_default(f)
        if f.is_array and default is _MISSING:
            return f"not {value}", value  # an empty (or null) array is not written
        if f.struct is not None and default is _MISSING:
            # A default-valued struct carrying unknown tags still goes out (Kafka's equals()).
            test = (f"({self._struct_is_default(src, f.struct, value)} "
                    f"and not {value}.unknown_tagged_fields)")
            return test, f"not {test}"
        if default is None:
            return f"{value} is None", f"{value} is not None"
        constant = src.const(default)
        return f"{value} == {constant}", f"{value} != {constant}"

    def _struct_is_default(self, src: _Source, s: StructSpec, value: str) -> str:
        """Field-by-field `value == StructClass()`, without building the default instance.

        Mirrors Message.__eq__: same class, every field (of every version) equal, unknown tags
        of nested structs not compared.
        """
        tests = [f"type({value}) is _cls_{s.name}"]
        for f in s.fields:
            attr = f"{value}.{f.attr}"
            default = field_default(f)
            if default is _MISSING and f.is_array:
                tests.append(f"{attr} == _EMPTY")
            elif default is _MISSING:
                tests.append(self._struct_is_default(src, f.struct, attr))  # type: ignore[arg-type]
            else:
                tests.append(f"{attr} == {src.const(default)}")
        return " and ".join(tests)

    def _flush_fixed_encode(self, src: _Source, run: list[FieldSpec]) -> None:
        if not run:
            return
        fmt = "".join(_FIXED_FORMATS[f.type] for f in run)
        values = [f"obj.{f.attr}.bytes" if f.type == "uuid" else f"obj.{f.attr}" for f in run]
        src.emit(1, f"out += {src.struct(fmt)}.pack({', '.join(values)})")

    @staticmethod
    def _emit_write_uvarint(src: _Source, out: str, value: str, indent: int) -> None:
        """Inline the one-byte case (values below 128) of an unsigned varint; call for longer."""
        src.emit(indent, f"if {value} < 0x80: {out}.append({value})")
        src.emit(indent, f"else: _wuvar({out}, {value})")

    def _gen_encode_field(self, src: _Source, f: FieldSpec, version: int, flexible: bool,
                          value: str, out: str, parts: str, indent: int,
                          tagged: bool = False) -> None:
        nullable = version in f.nullable_versions
        flexible = _field_flexible(f, version, flexible)
        if f.is_array:
            src.emit(indent, f"items = {value}")
            src.emit(indent, "if items is None:")
            if flexible:
                src.emit(indent + 1, f"{out}.append(0)")
            else:
                src.emit(indent + 1, f"{out} += b'\\xff\\xff\\xff\\xff'")
            src.emit(indent, "else:")
            inner = indent + 1
            element = f.element_type
            fixed_array = element in _FIXED_FORMATS and element != "uuid"
            if fixed_array:
                src.emit(inner, "n = len(items)")
            if flexible:
                count = "n + 1" if fixed_array else "len(items) + 1"
                src.emit(inner, f"count = {count}")
                self._emit_write_uvarint(src, out, "count", inner)
            else:
                src.emit(inner, f"{out} += _p.I32.pack({'n' if fixed_array else 'len(items)'})")
            if f.struct is not None:
                src.emit(inner, "for item in items:")
                src.emit(inner + 1, f"_enc_{f.struct.name}(item, {out}, {parts})")
            elif fixed_array:
                src.emit(inner, f"{out} += {self._array_struct(src, element)}.pack(*items)")
            elif element == "uuid":
                src.emit(inner, "for item in items:")
                src.emit(inner + 1, f"{out} += item.bytes")
            else:
                writer = _writer_name(element, flexible)
                src.emit(inner, "for item in items:")
                src.emit(inner + 1, f"_p.{writer}({out}, item)")
        elif f.struct is not None:
            if nullable:
                # Presence marker: an unsigned varint inside a tagged field (0 = null, 1 =
                # present), an int8 elsewhere (-1 = null, 1 = present).
                src.emit(indent, f"if {value} is None:")
                src.emit(indent + 1, f"{out}.append({'0' if tagged else '0xff'})")
                src.emit(indent, "else:")
                src.emit(indent + 1, f"{out}.append(1)")
                src.emit(indent + 1, f"_enc_{f.struct.name}({value}, {out}, {parts})")
            else:
                src.emit(indent, f"_enc_{f.struct.name}({value}, {out}, {parts})")
        elif f.type in _FIXED_FORMATS:
            attr = f"{value}.bytes" if f.type == "uuid" else value
            src.emit(indent, f"{out} += {src.struct(_FIXED_FORMATS[f.type])}.pack({attr})")
        elif f.type == "records":
            writer = "write_compact_records" if flexible else "write_records"
            src.emit(indent, f"_p.{writer}({out}, {parts}, {value})")
        else:
            src.emit(indent, f"_p.{_writer_name(f.type, flexible)}({out}, {value})")


class _LazyClass:
    """Calls a generated class by name once it exists (struct defaults of earlier classes)."""

    __slots__ = ("_classes", "_name")

    def __init__(self, classes: dict[str, type], name: str) -> None:
        self._classes = classes
        self._name = name

    def __call__(self) -> Any:
        return self._classes[self._name]()


def _field_flexible(f: FieldSpec, version: int, message_flexible: bool) -> bool:
    if f.flexible_versions is None:
        return message_flexible
    return message_flexible and version in f.flexible_versions


def _reader_name(type_name: str, flexible: bool, nullable: bool) -> str:
    base = {"string": "string", "bytes": "bytes", "records": "records"}[type_name]
    if type_name == "records":
        return "read_compact_records" if flexible else "read_records"
    prefix = "read_compact_" if flexible else "read_"
    return f"{prefix}{'nullable_' if nullable else ''}{base}"


def _writer_name(type_name: str, flexible: bool) -> str:
    base = {"string": "string", "bytes": "bytes"}[type_name]
    return f"write_compact_{base}" if flexible else f"write_{base}"
