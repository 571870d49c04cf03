"""The shared engine: model pairs, the lean forward, sampling, profiling, the decoder interface, the race.

Nothing here imports a method's folder by name (the registry in `methods.py`
names decoders as strings) and nothing imports the UI.
"""
