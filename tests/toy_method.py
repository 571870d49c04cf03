"""A toy method registered from outside the package (`test_a_new_method.py`): autoregressive decoding under
another name, to show a method is its record and one registration line. Import-light, as the package's records
are (`specviz.methods`): the decoder is named by path (`toy_decoder.py`), imported when first built."""

from specviz.methods import Method

METHOD = Method(id="toy", label="Toy", colour="#7c3aed", decoder="toy_decoder:ToyDecoder", raced_by_default=False,
                views="toy_method")


def narrate(trace, run, step, texts) -> str:
    """Its step-through caption (`Method.views`): the page's caption for a toy step is this."""
    return f"The toy wrote {len(run.steps[step].new_token_ids)} token(s) its own way."
