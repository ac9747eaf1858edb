"""Reading files without running code. Every file this project loads comes through here or is JSON/text
(or a flat token file, read with np.memmap).

A pickle can name any importable callable and run it while loading. torch.load(weights_only=True) only
rebuilds tensors and plain containers, so single-file checkpoints and every torch.load go through
`torch_load`. torch.distributed.checkpoint (DCP) reads its `.metadata` with plain pickle.load and its
non-tensor values (the optimizer's param_groups) with torch.load and weights_only off: `dcp_reader` and
`dcp_planner` replace both with readers that cannot run code — the metadata through an unpickler that
knows only the classes DCP metadata holds (ALLOWED), the values through weights_only. A file naming
anything else is refused with UnsafeFile before any of it is used.
"""

import io
import pickle

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

from nlq.common.errors import UserError

# (module, name) of every global a DCP .metadata of this PyTorch refers to; dtypes are checked by type.
ALLOWED = {
    ("torch.distributed.checkpoint.metadata", name)
    for name in (
        "Metadata",
        "StorageMeta",
        "MetadataIndex",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),  # TensorProperties' layout, rebuilt from its name
    ("torch", "Size"),
    ("pathlib", "PosixPath"),  # StorageMeta.checkpoint_id
    ("pathlib", "PurePosixPath"),
}


class UnsafeFile(UserError):
    """A file that would run code, or is not what it claims to be."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, which DCP metadata never holds")


def read_dcp_metadata(path):
    """A DCP .metadata file's Metadata object, read with the allowlist."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    except OSError as e:
        raise UnsafeFile(f"{path} cannot be read ({e.strerror})") from None
    except Exception as e:  # UnpicklingError, EOFError, a refused global, a malformed stream
        raise UnsafeFile(f"{path} is not a checkpoint's metadata, or is damaged ({e}); nothing was loaded") from None
    if not isinstance(metadata, Metadata):
        raise UnsafeFile(f"{path} holds a {type(metadata).__name__}, not checkpoint metadata; nothing was loaded")
    return metadata


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args, **kwargs):
        from torch.distributed.checkpoint.metadata import StorageMeta

        metadata = read_dcp_metadata(self._get_metadata_path(kwargs.get("rank")))
        metadata.storage_meta = metadata.storage_meta or StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except Exception as e:
            raise UnsafeFile(f"the checkpoint's value {fqn} cannot be loaded safely ({e})") from None
        set_element(self.original_state_dict, self.mappings[fqn], loaded)  # flattened: DCP's default, ours


def dcp_reader(directory) -> FileSystemReader:
    return _SafeReader(str(directory))


def dcp_planner() -> DefaultLoadPlanner:
    return _SafePlanner()


def torch_load(path, **kwargs):
    """torch.load that rebuilds only tensors and plain containers (never code), onto the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True, **kwargs)


def numpy_array(path):
    """A .npy array memory-mapped, its object arrays (the pickled kind) refused; an empty or truncated file is
    a ValueError, as any other unreadable one."""
    import numpy as np

    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except EOFError:  # numpy's word for a file shorter than its header
        raise ValueError(f"{path} ends before its header does (an empty or truncated .npy file)") from None
