import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hearthnet.contracts.embed import decode_embeddings, pack_vectors, unpack_vectors
from hearthnet.errors import BadRequest

finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(
    st.integers(0, 20).flatmap(
        lambda n: st.integers(1, 40).flatmap(lambda d: arrays(np.float32, (n, d), elements=finite_f32))
    )
)
def test_pack_unpack_round_trip(matrix: np.ndarray) -> None:
    data = pack_vectors(matrix)
    assert isinstance(data, bytes)
    assert len(data) == matrix.size * 4
    back = unpack_vectors(data, matrix.shape[1], matrix.shape[0])
    assert back.dtype == np.float32
    assert back.shape == matrix.shape
    np.testing.assert_array_equal(back, matrix)
    back[...] = 0  # the caller owns a writable copy


def test_bytes_are_little_endian_row_major() -> None:
    m = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float64)
    assert pack_vectors(m) == np.array([1, 2, 3, 4], dtype="<f4").tobytes()


@given(st.integers(1, 64), st.integers(1, 300))
def test_wrong_length_is_bad_request(dim: int, size: int) -> None:
    data = b"\x00" * size
    if size % (dim * 4) == 0:
        unpack_vectors(data, dim)
        return
    with pytest.raises(BadRequest, match="whole number"):
        unpack_vectors(data, dim)


def test_count_and_dim_checked() -> None:
    data = pack_vectors(np.ones((3, 4), dtype=np.float32))
    with pytest.raises(BadRequest, match="expected 2"):
        unpack_vectors(data, 4, 2)
    for bad_dim in (0, -1, True, 10**9):
        with pytest.raises(BadRequest, match="dim"):
            unpack_vectors(data, bad_dim)
    with pytest.raises(BadRequest, match="2-d"):
        pack_vectors(np.ones(4, dtype=np.float32))


def test_decode_embeddings_output_map() -> None:
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = {"embeddings": pack_vectors(m), "dim": 4, "count": 3, "encoding": "f32le"}
    np.testing.assert_array_equal(decode_embeddings(out), m)
    with pytest.raises(BadRequest, match="encoding"):
        decode_embeddings({**out, "encoding": "f16"})
    with pytest.raises(BadRequest, match="bytes"):
        decode_embeddings({**out, "embeddings": m.tolist()})
    with pytest.raises(BadRequest, match="expected 4"):
        decode_embeddings({**out, "count": 4})
