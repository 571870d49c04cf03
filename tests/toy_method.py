"""A toy method registered from outside the package (`test_a_new_method.py`): autoregressive decoding under
another name, to show a method is its record and one registration line. Import-light, as the package's records
are (`specviz.methods`): the decoder is named by path (`toy_decoder.py`), imported when first built."""

from specviz.methods import Method

METHOD = Method(id="toy", label="Toy", colour="#7c3aed", decoder="toy_decoder:ToyDecoder", raced_by_default=False)
