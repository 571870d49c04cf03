"""`python -m specviz bench`: our decoders against transformers' own, with suites, tuning and reports.

- `runner.py`: running every prompt through every method, interleaved, and summarising;
- `report.py`: the Markdown / HTML / PNG report;
- `cli.py`: the command's arguments.
"""
