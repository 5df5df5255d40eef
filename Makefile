# bftrainer — see README.md.
PREFIX  ?= /usr/local
DESTDIR ?=
GO      ?= go
CONFIG  ?= /etc/bftrainer/bftrainer.toml
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION) -X main.defaultConfig=$(CONFIG)
# urfave_cli_no_docs: leaves out urfave/cli's man-page generator, whose
# package initialisation every hook call would otherwise pay.
TAGS    := urfave_cli_no_docs

.PHONY: build test test-short test-python bench demo install clean

build:
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/bftrainer ./cmd/bftrainer
	$(GO) build -o bin/bftrainer-bench ./cmd/bftrainer-bench

# Every test: real SQLite, real cbc, real sshd, real Slurm, real torchrun
# where installed (.ci/run installs them; tests that need a missing one
# say so and skip).
test:
	$(GO) vet ./...
	$(GO) test -race -timeout 60m ./...
	$(PYTHON) -m unittest discover -s python/tests

# The elastic runtime's Python tests (python/tests): real worker processes on
# loopback with Debian's torch; without torch they skip and say why.
PYTHON  ?= /usr/bin/python3
test-python:
	$(PYTHON) -m unittest discover -s python/tests -v

# The fast subset, for a quick edit-test loop.
test-short:
	$(GO) test -short ./...

# Figures: exact solver vs CBC, hooks, replay, rescale and reclaim, Slurm.
bench: build
	./bin/bftrainer-bench all

# The main job on embedded defaults: a generated heavy-tailed idle-node
# trace, a generated Trainer workload, the exact allocator; prints the
# summary and writes demo-out/ (timeline.svg, steps.csv, summary.json).
demo:
	$(GO) run ./cmd/bftrainer replay --out demo-out

install: build
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)/etc/bftrainer
	install -m 0755 bin/bftrainer $(DESTDIR)$(PREFIX)/sbin/bftrainer
	# The elastic runtime (trainer.launcher.elastic's pythonpath): on the
	# controller and on every node, or on a filesystem they share.
	install -d $(DESTDIR)$(PREFIX)/lib/bftrainer/python/bftrainer_elastic
	install -m 0644 python/bftrainer_elastic/*.py $(DESTDIR)$(PREFIX)/lib/bftrainer/python/bftrainer_elastic/
	test -e $(DESTDIR)$(CONFIG) || install -m 0644 etc/bftrainer.toml $(DESTDIR)$(CONFIG)
	install -d -m 0755 $(DESTDIR)/var/lib/bftrainer $(DESTDIR)/var/log/bftrainer
	install -d -m 1733 $(DESTDIR)/var/spool/bftrainer

clean:
	rm -rf bin demo-out
