"""SpecViz: autoregressive, Sequoia and Lookahead decoding racing side by side (Gradio app).

Run locally with `python app.py` (http://127.0.0.1:7860); on a Hugging Face Space
`demo` is picked up at module level. On ZeroGPU the compute generator runs under
`spaces.GPU`; elsewhere the GPU is used when present, else the CPU.
"""

import os

try:  # ZeroGPU: `spaces` must be imported before anything initialises CUDA.
    import spaces
except ImportError:
    spaces = None

from specviz.hosting import zerogpu_duration
from specviz.ui import build_demo, launch_kwargs

if spaces is not None:   # each race asks ZeroGPU for the time a hosted race may take, not its 60 s default
    duration = zerogpu_duration()
    demo = build_demo(gpu=spaces.GPU(duration=duration), gpu_duration=duration)
else:
    demo = build_demo()

if __name__ == "__main__":
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **launch_kwargs())
