"""SpecViz: autoregressive, Sequoia and Lookahead decoding racing side by side (Gradio app).

Run locally with `python app.py` (http://127.0.0.1:7860) or, from an installed package, `specviz app`;
on a Hugging Face Space `demo` is picked up at module level. `specviz.serve.make_demo` takes ZeroGPU's
path only on ZeroGPU (models on `cuda` at start-up, each race under `spaces.GPU` for the seconds it
needs); elsewhere the GPU is used when present, else the CPU.
"""

import os

from specviz.runtime.worker import keep_server_off
from specviz.serve import choose_hosted, make_demo
from specviz.ui import launch_kwargs

# A server others can reach (a Space, GRADIO_SERVER_NAME=0.0.0.0, GRADIO_SHARE) runs the hosted limits
# unless SPECVIZ_HOSTED=0 says otherwise: decided before the app is built, since the app reads them.
HOST = os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1")
SHARE = os.environ.get("GRADIO_SHARE", "").strip().lower() in ("1", "true", "yes", "on")
choose_hosted(HOST, SHARE)
demo = make_demo()

if __name__ == "__main__":
    keep_server_off(demo.specviz_worker_slot)   # locally, the decoding worker has its CPUs to itself
    demo.launch(server_name=HOST, server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), share=SHARE,
                **launch_kwargs())
