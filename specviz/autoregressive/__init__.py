"""Plain autoregressive decoding: the baseline every speedup is measured against (`decoder.py`; its record in `method.py`)."""
