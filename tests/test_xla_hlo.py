"""The one HLO text parser: its element widths against JAX's and XLA's, its pieces.

The widths table follows XLA's ``primitive_util::BitWidth`` (``pred`` 1 bit,
``s1``/``u1`` up to ``c128``; ``ceil(bits / 8)`` bytes an element unless the
layout packs it). Each width is pinned against the ``ml_dtypes`` / NumPy dtype
JAX uses for it, and the byte size of each type's shape, as XLA:CPU prints it,
against XLA's own ``memory_analysis`` of the same one-parameter program.
"""

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from nnx_introspect._xla.hlo import (
    ELEMENT_BITS,
    HloTextError,
    arrays,
    definition,
    element_bits,
    instruction,
    memory_space,
    metadata,
    operand_shapes,
    parse_module,
    parse_shape,
    shape_bytes,
    source_stack,
    stack_frames,
    tuple_elements,
)

# XLA's element type name -> the dtype JAX uses for it
JAX_DTYPES = {
    "pred": np.dtype(bool),
    "s1": np.dtype(ml_dtypes.int1),
    "u1": np.dtype(ml_dtypes.uint1),
    "s2": np.dtype(ml_dtypes.int2),
    "u2": np.dtype(ml_dtypes.uint2),
    "s4": np.dtype(ml_dtypes.int4),
    "u4": np.dtype(ml_dtypes.uint4),
    "s8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "s16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16),
    "s32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "s64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "f6e2m3fn": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6e3m2fn": np.dtype(ml_dtypes.float6_e3m2fn),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(jnp.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
}


def test_every_array_type_has_a_dtype_here() -> None:
    assert set(ELEMENT_BITS) - {"token"} == set(JAX_DTYPES)


@pytest.mark.parametrize("name", sorted(JAX_DTYPES))
def test_width_matches_jax_dtype(name: str) -> None:
    dtype = JAX_DTYPES[name]
    bits = element_bits(name)
    assert bits is not None
    assert math.ceil(bits / 8) == dtype.itemsize  # primitive_util::ByteWidth
    if name == "pred":
        assert bits == 1  # std::numeric_limits<bool>::digits
    elif dtype.kind in "iu" or name[0] in "su":
        assert bits == ml_dtypes.iinfo(dtype).bits  # type: ignore[no-untyped-call]
    elif dtype.kind == "c":
        assert bits == 8 * dtype.itemsize
    elif name in ("f4e2m1fn", "f6e2m3fn", "f6e3m2fn"):
        assert bits == ml_dtypes.finfo(dtype).bits  # type: ignore[no-untyped-call]
    else:  # XLA: the native type's size, in bits
        assert bits == 8 * dtype.itemsize


# the dtypes XLA:CPU compiles (the 6-bit floats it refuses; s1/u1 JAX lowers as pred)
COMPILED = sorted(set(JAX_DTYPES) - {"f6e2m3fn", "f6e3m2fn", "s1", "u1"})


@pytest.mark.parametrize("name", COMPILED)
def test_shape_bytes_matches_xlas_memory_analysis(name: str) -> None:
    with jax.enable_x64(True):
        compiled = (
            jax.jit(lambda x: x)
            .lower(jax.ShapeDtypeStruct((5, 3), JAX_DTYPES[name]))
            .compile()
        )
        text = compiled.as_text()
    assert text is not None
    line = next(line for line in text.splitlines() if "parameter(0)" in line)
    found = definition(line)
    assert found is not None
    _, shape = found
    assert parse_shape(shape) == (name, (5, 3))
    memory = compiled.memory_analysis()
    assert memory is not None
    expected = memory.argument_size_in_bytes
    assert shape_bytes(shape) == expected
    assert arrays(shape) == [(name, (5, 3), expected)]


def test_bytes_of_packed_tuples_and_memory_spaces() -> None:
    # a sub-byte type takes a byte an element unless the layout packs it
    assert shape_bytes("s4[5]{0}") == 5
    assert shape_bytes("s4[5]{0:E(4)}") == 3
    assert shape_bytes("u1[9]{0:E(1)}") == 2
    # a tuple is its index table: 8 bytes per element, nested tuples one each
    text = "(s32[]{:T(128)}, f32[16,512]{1,0:T(8,128)}, /*index=2*/(pred[], u8[4]))"
    assert shape_bytes(text) == 24
    assert tuple_elements(text)[2] == "(pred[], u8[4])"
    assert [a[2] for a in arrays(text)] == [4, 16 * 512 * 4, 1, 4]
    assert shape_bytes("token[]") == 0
    assert arrays("(f32[2]{0}, token[])") == [("f32", (2,), 8)]
    assert memory_space("bf16[4,64]{1,0:T(8,128)(2,1)S(1)}") == 1
    assert memory_space("(f32[2]{0:S(1)})") == 0


def test_unknown_element_type_names_it() -> None:
    with pytest.raises(HloTextError) as error:
        shape_bytes("q7[4]{0}")
    assert error.value.dtype == "q7"
    assert element_bits("f8e9m9xyz") == 8  # a new 8-bit float still has a width
    assert element_bits("opaque") is None


def test_instruction_pieces() -> None:
    line = (
        "  ROOT %fusion.3 = (f32[8]{0}, bf16[2,2]{1,0}) fusion(f32[8]{0} %p.1, "
        '%p.2), kind=kLoop, calls=%fused_computation, backend_config={"a":"x, y=z"},'
        ' metadata={op_name="jit(f)/mul" source_file="/s.py" source_line=12}'
    )
    found = instruction(line, "main")
    assert (found.name, found.opcode, found.root) == ("fusion.3", "fusion", True)
    assert found.operands == ("p.1", "p.2")
    assert operand_shapes(found) == [("f32[8]{0}", "p.1"), (None, "p.2")]
    assert found.attributes["backend_config"] == '{"a":"x, y=z"}'
    assert found.attributes["calls"] == "%fused_computation"
    items = metadata(line)
    assert source_stack(items, {})[0].line == 12
    with pytest.raises(HloTextError, match="stack frame 4"):
        source_stack({"stack_frame_id": "4"}, {})


def test_stack_frames_read_parents_as_id_plus_one() -> None:
    frames = stack_frames(
        {
            "FileNames": ['1 "/a.py"'],
            "FunctionNames": ['1 "f"', '2 "g"'],
            "FileLocations": [
                "1 {file_name_id=1 function_name_id=1 line=3 end_line=3}",
                "2 {file_name_id=1 function_name_id=2 line=7 end_line=7}",
            ],
            "StackFrames": [
                "1 {file_location_id=2}",
                "2 {file_location_id=1 parent_frame_id=2}",
            ],
        }
    )
    assert [(s.function, s.line) for s in frames[2]] == [("f", 3), ("g", 7)]
    with pytest.raises(HloTextError) as error:
        stack_frames({"StackFrames": ["1 {file_location_id=9}"]})
    assert error.value.what == "a stack frame"


def test_parse_module_of_a_compiled_program() -> None:
    compiled = jax.jit(lambda x: jnp.sin(x) @ x).lower(jnp.ones((4, 4))).compile()
    text = compiled.as_text()
    assert text is not None
    module = parse_module(text)
    assert module.name.startswith("jit_")
    entry = module.computations[module.entry]
    root = module.root(module.entry)
    assert root is not None and root in entry
    parameter = next(i for i in entry if i.opcode == "parameter")
    assert module.users[parameter.name]
    with pytest.raises(HloTextError, match="HloModule"):
        parse_module("not a module")


def test_a_computation_on_another_thread_closes_with_its_name() -> None:
    """XLA:TPU's 7B program on v5p-4096 runs computations on the sparsecore."""
    module = parse_module(
        "\n".join(
            [
                "HloModule jit_f, num_partitions=1",
                "",
                "%sc (p: f32[8]) -> f32[8] {",
                "  %p = f32[8]{0} parameter(0)",
                "  ROOT %n = f32[8]{0} negate(%p)",
                '}, execution_thread="sparsecore"',
                "",
                "ENTRY %main (a: f32[8]) -> f32[8] {",
                "  %a = f32[8]{0} parameter(0)",
                "  ROOT %c = f32[8]{0} call(%a), to_apply=%sc",
                "} // main",
            ]
        )
    )
    assert module.entry == "main"
    assert [c.name for c in module.callers["sc"]] == ["c"]
