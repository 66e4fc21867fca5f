"""kvshrink: LLM inference with a compressible KV cache.

    import kvshrink
    model = kvshrink.Model("testbed/models/v7s1/model-f16.gguf")
    ctx = model.compress(open("eval/examples/needle_context.txt").read(), press="snapkv", keep=0.25)
    print(ctx.ask("What is the special magic number?"))
    ctx.kept_positions(layer=0, head=0)   # numpy int32 array of the positions that head kept
    ctx.save("ctx.kvc"); ctx2 = kvshrink.load("ctx.kvc", model)

Errors are kvshrink.Error (a RuntimeError) with the engine's message. See docs/python.md.
"""
from ._kvshrink import (  # noqa: F401
    AllocatorDescription,
    Answer,
    Context,
    Error,
    Model,
    PressDescription,
    PressParam,
    __version__,
    allocators,
    load,
    presses,
)

__all__ = ["Model", "Context", "Answer", "Error", "PressDescription", "PressParam", "AllocatorDescription",
           "presses", "allocators", "load", "__version__"]
