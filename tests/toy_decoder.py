"""The toy method's decoder (`toy_method.py`): autoregressive decoding under another name."""

from specviz.autoregressive.decoder import AutoregressiveDecoder


class ToyDecoder(AutoregressiveDecoder):
    method = "toy"
