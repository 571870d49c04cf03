"""SpecViz app (minimal placeholder until the full race UI lands): autoregressive decoding, streamed."""

import gradio as gr

from specviz.decoders import make_decoder
from specviz.errors import SpecVizError
from specviz.models import load_pair

_PAIR = {}


def _pair():
    if "pair" not in _PAIR:
        _PAIR["pair"] = load_pair("default", "self")
    return _PAIR["pair"]


def run(prompt, max_new_tokens):
    try:
        decoder = make_decoder("ar", _pair(), prompt, max_new_tokens=int(max_new_tokens))
    except SpecVizError as exc:
        raise gr.Error(str(exc))
    text = ""
    while not decoder.done:
        text += "".join(decoder.step().new_token_texts)
        yield text


with gr.Blocks(title="SpecViz") as demo:
    gr.Markdown("# SpecViz\nAutoregressive decoding on the offline default model.")
    prompt = gr.Textbox(label="Prompt", value="Write a haiku about trees")
    max_new = gr.Slider(1, 512, value=64, step=1, label="Max new tokens")
    out = gr.Textbox(label="Autoregressive")
    gr.Button("Run").click(run, [prompt, max_new], out)

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=7860)
