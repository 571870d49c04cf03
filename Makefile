# The two commands a fresh machine needs (see README):
#   make run   installs what the app needs and serves it on http://127.0.0.1:7860
#   make test  installs what the tests need and runs the whole suite
.PHONY: run test setup setup-dev

run: setup
	.venv/bin/python app.py

test: setup-dev
	bash scripts/test.sh

setup:
	bash scripts/setup.sh run

setup-dev:
	bash scripts/setup.sh dev
