"""What a torch.Tensor is to the C library: dtype enum, memory, bytes.

torch is imported lazily, so the package imports without it (the engine
hook does not need it).
"""
import collections

# enum wst_dtype (status.h): name -> (value, bytes per element)
DTYPES = {
    "bf16": (1, 2), "f16": (2, 2), "f32": (3, 4), "f64": (4, 8),
    "fp8_e4m3": (5, 1), "fp8_e5m2": (6, 1), "i8": (7, 1), "u8": (8, 1),
    "i32": (9, 4), "i64": (10, 8),
}

# torch dtype attribute -> wst dtype name; attributes this torch lacks
# (float8 before 2.1) are skipped.
_TORCH_NAMES = [
    ("bfloat16", "bf16"), ("float16", "f16"), ("float32", "f32"),
    ("float64", "f64"), ("float8_e4m3fn", "fp8_e4m3"),
    ("float8_e5m2", "fp8_e5m2"), ("int8", "i8"), ("uint8", "u8"),
    ("int32", "i32"), ("int64", "i64"),
]

# Other spellings people type for the names above (numpy's, habits).
_OTHER_NAMES = {"half": "f16", "float": "f32", "double": "f64",
                "fp16": "f16", "fp32": "f32", "fp64": "f64"}


def dtype_alias(name):
    """The wst dtype name 'name' is another spelling of ("bfloat16",
    "torch.float32", "BF16", "half" ...), or None."""
    low = name.lower()
    if low.startswith("torch."):
        low = low[len("torch."):]
    if low in DTYPES:
        return low
    return dict(_TORCH_NAMES).get(low) or _OTHER_NAMES.get(low)


TensorInfo = collections.namedtuple(
    "TensorInfo", "dtype dtype_name itemsize mem_type data shape numel")


def torch_dtypes():
    """{torch.dtype: wst dtype name} for this torch."""
    import torch
    return {getattr(torch, attr): name for attr, name in _TORCH_NAMES
            if hasattr(torch, attr)}


def describe(name, tensor, mem_host, mem_cuda):
    """TensorInfo of a tensor the sender may register, or TypeError /
    ValueError saying why it may not."""
    try:
        import torch
    except ImportError:
        raise TypeError("tensor %r: wstream.Sender registers torch.Tensor "
                        "objects and torch is not importable" % name) from None
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor %r must be a torch.Tensor, not %s"
                        % (name, type(tensor).__name__))
    wst = torch_dtypes().get(tensor.dtype)
    if wst is None:
        raise TypeError("tensor %r has dtype %s, which wstream cannot send "
                        "(it sends %s)" % (name, tensor.dtype, ", ".join(
                            str(d) for d in torch_dtypes())))
    if tensor.device.type == "cpu":
        mem = mem_host
    elif tensor.device.type == "cuda":
        mem = mem_cuda
    else:
        raise ValueError("tensor %r is on device %s; wstream sends CPU and "
                         "CUDA tensors" % (name, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError("tensor %r has layout %s; wstream sends dense "
                         "tensors" % (name, tensor.layout))
    if not tensor.is_contiguous():
        raise ValueError("tensor %r is not contiguous (shape %s, strides "
                         "%s): register the contiguous tensor the trainer "
                         "updates in place, not a strided view (a "
                         ".contiguous() copy would never see the updates)"
                         % (name, list(tensor.shape), list(tensor.stride())))
    value, itemsize = DTYPES[wst]
    return TensorInfo(value, wst, itemsize, mem, tensor.data_ptr(),
                      tuple(tensor.shape), tensor.numel())


def event_handle(event):
    """The cudaEvent_t of a torch.cuda.Event (or a raw int handle)."""
    if isinstance(event, bool):
        raise TypeError("cuda_event must be a torch.cuda.Event, not bool")
    if isinstance(event, int):
        handle = event
    elif hasattr(event, "cuda_event") and hasattr(event, "record"):
        handle = event.cuda_event
    else:
        raise TypeError("cuda_event must be a torch.cuda.Event, not %s"
                        % type(event).__name__)
    if not isinstance(handle, int) or handle <= 0:
        raise ValueError("cuda_event has no CUDA event yet: record() it on "
                         "the stream that writes the tensors first")
    return handle
