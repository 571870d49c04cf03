"""SpecViz: autoregressive, Sequoia and Lookahead decoding racing side by side (Gradio app).

Run locally with `python app.py` (http://127.0.0.1:7860) or, from an installed package, `specviz app`;
on a Hugging Face Space `demo` is picked up at module level. `specviz.serve.make_demo` takes ZeroGPU's
path only on ZeroGPU (models on `cuda` at start-up, each race under `spaces.GPU` for the seconds it
needs); elsewhere the GPU is used when present, else the CPU.
"""

import os

from specviz.serve import make_demo
from specviz.ui import launch_kwargs

demo = make_demo()

if __name__ == "__main__":
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **launch_kwargs())
