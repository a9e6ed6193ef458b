"""SharedBlock.from_fd() of a descriptor that is not a sealed hpalloc block
(a file, an unsealed memfd): a ValueError saying so, nothing mapped.  On
main both were mapped, and whoever held the descriptor could shrink them
under every mapper (tests/c/shared_truncate, shared_map_unsealed)."""

import os

import pytest

import hpalloc


def test_from_fd_refuses_what_is_not_a_block(tmp_path):
    from hpalloc._shared import SharedBlock
    path = tmp_path / "plain"
    path.write_bytes(b"\0" * 4096)
    fd = os.open(path, os.O_RDWR)
    try:
        live = hpalloc.stats()["shared_live_blocks"]
        with pytest.raises(ValueError, match="is not an hpalloc shared block"):
            SharedBlock.from_fd(fd)
        assert hpalloc.stats()["shared_live_blocks"] == live
    finally:
        os.close(fd)
    mfd = os.memfd_create("unsealed", os.MFD_CLOEXEC)
    try:
        os.ftruncate(mfd, 2 << 20)
        with pytest.raises(ValueError, match="sealed against shrinking"):
            SharedBlock.from_fd(mfd)
    finally:
        os.close(mfd)
