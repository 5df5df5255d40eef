# bftrainer — see README.md.
#
# Installation directories (GNU style; DESTDIR stages the whole tree, for
# packages and tests). SYSCONFDIR and LOCALSTATEDIR default to /etc and
# /var whatever PREFIX is: schedulers' hooks read the configuration at the
# path compiled in, and the state belongs on the controller's local disk.
PREFIX        ?= /usr/local
BINDIR        ?= $(PREFIX)/bin
LIBEXECDIR    ?= $(PREFIX)/libexec
SYSCONFDIR    ?= /etc
LOCALSTATEDIR ?= /var
RUNSTATEDIR   ?= /run
MANDIR        ?= $(PREFIX)/share/man
DESTDIR       ?=
CONFIG        ?= $(SYSCONFDIR)/bftrainer/bftrainer.toml
# The scheduler's group (Slurm: SlurmUser's, e.g. slurm): when set, the
# database's directory gets it, and the hooks' journal beside the database
# is made for it (mode 2770); when not, the reconciler makes the journal
# with the database's group on its first round.
GROUP         ?=
HIGHSDIR      := $(LIBEXECDIR)/bftrainer/highs-wasm
# Where the build goes (tests build into their own directory).
OUT     ?= bin
GO      ?= go
NPM     ?= npm
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The paths compiled in: the configuration file, and the defaults of every
# path in it (etc/bftrainer.toml, as installed, states the same).
LDFLAGS := -X main.version=$(VERSION) -X main.defaultConfig=$(CONFIG) -X main.binDir=$(BINDIR) \
	-X main.localStateDir=$(LOCALSTATEDIR) -X main.runStateDir=$(RUNSTATEDIR)
# urfave_cli_no_docs: leaves out urfave/cli's man-page generator, whose
# package initialisation every hook call would otherwise pay.
TAGS    := urfave_cli_no_docs

.PHONY: build test test-loaded test-short test-python bench demo install install-highs install-man man packages clean device-check device-check-build

build: $(OUT)/bftrainer
	$(GO) build -o $(OUT)/bftrainer-bench ./cmd/bftrainer-bench

# Always rebuilt: go's own cache makes that cheap, and the paths compiled
# in follow the variables of this run.
.PHONY: $(OUT)/bftrainer
$(OUT)/bftrainer:
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $@ ./cmd/bftrainer

# Every test: real SQLite, real cbc, real sshd, real Slurm, real torchrun
# where installed (.ci/run installs them; tests that need a missing one
# say so and skip). testsum runs the Go and the Python tests, prints
# go test's usual output, then the counts per package and every skipped
# test with its reason, and exits with the first failure's status;
# TESTJSON=FILE keeps every test's result (go test -json) in FILE. The
# device check's CPU run (internal/devicecheck TestDeviceCheck: the
# script make device-check runs, GPU parts skipped) comes after the other
# packages, alone: it trains real torch Trainers for minutes, and beside
# the other packages' timed Trainer scenarios it would make them slow.
test:
	$(GO) vet ./...
	$(GO) build -o $(OUT)/testsum ./internal/testsum
	$(OUT)/testsum -go '$(GO) test -race -timeout 60m -skip ^TestDeviceCheck$$ ./...' \
		-go '$(GO) test -timeout 30m -run ^TestDeviceCheck$$ ./internal/devicecheck' $(if $(TESTJSON),-save $(TESTJSON)) \
		-unittest '$(PYTHON) -m unittest discover -v -s python/tests'

# The same with every core kept busy meanwhile (bounded busy loops that
# end with the run): a CI machine shares its cores with other work, and
# no wait of the suite may depend on having them.
test-loaded:
	$(GO) build -o $(OUT)/burn ./internal/burn
	$(OUT)/burn -max 90m -- $(MAKE) --no-print-directory test

# The elastic runtime's Python tests (python/tests): real worker processes on
# loopback with Debian's torch; without torch they skip and say why.
PYTHON  ?= /usr/bin/python3
test-python:
	$(PYTHON) -m unittest discover -s python/tests -v

# The fast subset, for a quick edit-test loop.
test-short:
	$(GO) test -short ./...

# Figures: exact solver vs CBC, hooks, replay, rescale and reclaim, Slurm,
# and the pilot (issue 27: a real job log on the Slurm lab, about 25 min).
bench: build
	$(OUT)/bftrainer-bench all

# The device check (README.md, "The device check"): what a lent GPU
# machine proves that CPU runs cannot. device-check-build builds the
# binaries here, into bin/, which travels with the tree; device-check runs
# internal/devicecheck/device-check.sh, which builds nothing (there is no
# Go there): results and logs in $OUT where set, else device-check-out/.
# CI runs the same script through go test (internal/devicecheck).
device-check-build: build

device-check:
	internal/devicecheck/device-check.sh

# The main job on embedded defaults: a generated heavy-tailed idle-node
# trace, a generated Trainer workload, the exact allocator; prints the
# summary and writes demo-out/ (timeline.svg, steps.csv, summary.json).
demo:
	$(GO) run ./cmd/bftrainer replay --out demo-out

# The binary on users' PATH ($(BINDIR)), the elastic runtime's Python
# package, the configuration (never overwritten), and the directories with
# the modes bftrainer checks: the database's (root's, with GROUP), the
# hooks' journal beside it (with GROUP), the hooks' log, and the spool,
# where ordinary users drop requests (sticky and writable by all, listable
# by none: 1733). Then the manual pages ($(MANDIR)/man8), and the HiGHS
# driver, when npm is here.
install: $(OUT)/bftrainer
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/bftrainer
	install -m 0755 $(OUT)/bftrainer $(DESTDIR)$(BINDIR)/bftrainer
	# The elastic runtime (trainer.launcher.elastic's pythonpath): on the
	# controller and on every node, or on a filesystem they share.
	install -d -m 0755 $(DESTDIR)$(PREFIX)/lib/bftrainer/python/bftrainer_elastic
	install -m 0644 python/bftrainer_elastic/*.py $(DESTDIR)$(PREFIX)/lib/bftrainer/python/bftrainer_elastic/
	test -e $(DESTDIR)$(CONFIG) || { \
		sed -e 's,/var/\(lib\|log\|spool\)/bftrainer,$(LOCALSTATEDIR)/\1/bftrainer,g' \
		    -e 's,/run/bftrainer,$(RUNSTATEDIR)/bftrainer,g' \
		    -e 's,/usr/local/lib/bftrainer/python,$(PREFIX)/lib/bftrainer/python,g' \
		    -e 's,/etc/bftrainer/bftrainer.toml,$(CONFIG),g' etc/bftrainer.toml > $(DESTDIR)$(CONFIG).new && \
		chmod 0644 $(DESTDIR)$(CONFIG).new && mv $(DESTDIR)$(CONFIG).new $(DESTDIR)$(CONFIG); }
	install -d -m 0755 $(if $(GROUP),-g $(GROUP)) $(DESTDIR)$(LOCALSTATEDIR)/lib/bftrainer
	$(if $(GROUP),install -d -m 2770 -g $(GROUP) $(DESTDIR)$(LOCALSTATEDIR)/lib/bftrainer/journal)
	install -d -m 0755 $(DESTDIR)$(LOCALSTATEDIR)/log/bftrainer
	install -d -m 1733 $(DESTDIR)$(LOCALSTATEDIR)/spool/bftrainer
	@$(MAKE) --no-print-directory install-man
	@$(MAKE) --no-print-directory install-highs
	@echo "installed $(BINDIR)/bftrainer; configuration: $(CONFIG); next: contrib/slurm/README.md (or lsf/, pbs/)"

# The manual pages (man/, written by make man for the default BINDIR and
# CONFIG), with the paths this installation compiles in.
install-man:
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man8
	for f in man/*.8; do \
		sed -e 's,/usr/local/bin/bftrainer,$(BINDIR)/bftrainer,g' -e 's,/etc/bftrainer/bftrainer.toml,$(CONFIG),g' \
			$$f > $(DESTDIR)$(MANDIR)/man8/$${f#man/} && chmod 0644 $(DESTDIR)$(MANDIR)/man8/$${f#man/} || exit 1; \
	done

# man/: bftrainer(8) and a page per command, from the CLI's own help
# (cmd/bftrainer/man_test.go walks it; make test fails when they differ).
man:
	$(GO) test -count=1 -run '^TestManPages$$' ./cmd/bftrainer -update-man

# The .deb and the .rpm (contrib/packaging/README.md): make install
# stages the tree with PREFIX=/usr (the HiGHS driver left out), then nfpm
# — pinned in contrib/packaging/tools/go.mod, a module of its own so that
# its dependencies stay out of bftrainer's — packs it with the systemd
# units, tmpfiles.d and the maintainer scripts. PKGVERSION: 0.0.N, N the
# commits on this branch (monotonic, as package versions must be).
PKGDIR     ?= $(OUT)/packages
PKGVERSION ?= 0.0.$(shell git rev-list --count HEAD 2>/dev/null || echo 0)
PKGARCH    ?= $(shell $(GO) env GOARCH)
# Whoever builds the packages (a site's own repository): Debian's tools
# want a real address.
PKGMAINTAINER ?= bftrainer maintainers <bftrainer@example.org>
STRIP      ?= strip
PKGSTAGE   := $(abspath $(PKGDIR))/stage
packages:
	rm -rf $(PKGSTAGE) $(PKGDIR)/*.deb $(PKGDIR)/*.rpm && mkdir -p $(PKGSTAGE)/units $(PKGSTAGE)/usr/share/doc/bftrainer
	$(MAKE) --no-print-directory install DESTDIR=$(PKGSTAGE) PREFIX=/usr SYSCONFDIR=/etc LOCALSTATEDIR=/var \
		RUNSTATEDIR=/run MANDIR=/usr/share/man GROUP= NPM=/nonexistent/npm OUT=$(abspath $(OUT))
	gzip -9n $(PKGSTAGE)/usr/share/man/man8/*.8
	$(STRIP) --remove-section=.comment --remove-section=.note --strip-unneeded $(PKGSTAGE)/usr/bin/bftrainer
	# The Slurm guide's units, naming the packaged binary and manual.
	for u in contrib/slurm/*.service contrib/slurm/*.timer contrib/slurm/*.path; do \
		sed -e 's,/usr/local/bin/bftrainer,/usr/bin/bftrainer,g' \
		    -e 's,^Documentation=.*,Documentation=man:bftrainer-reconcile(8) man:bftrainer-sync(8),' \
		    -e 's,^# Install: cp .*,# Installed by the bftrainer package.,' $$u > $(PKGSTAGE)/units/$${u##*/} || exit 1; \
	done
	chmod 0644 $(PKGSTAGE)/units/*
	{ echo 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/'; \
	  echo 'Upstream-Name: bftrainer'; echo; echo 'Files: *'; echo 'Copyright: $(shell git log -1 --format=%ad --date=format:%Y 2>/dev/null || date +%Y) the bftrainer authors'; \
	  echo 'License: Apache-2.0'; echo ' On Debian systems, the full text of the Apache License 2.0 is in'; \
	  echo ' /usr/share/common-licenses/Apache-2.0.'; } > $(PKGSTAGE)/usr/share/doc/bftrainer/copyright
	{ echo 'bftrainer ($(PKGVERSION)) unstable; urgency=medium'; echo; \
	  echo '  * Built from commit $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown).'; echo; \
	  echo ' -- $(PKGMAINTAINER)  $(shell git log -1 --format=%aD 2>/dev/null || date -R)'; } \
		| gzip -9n > $(PKGSTAGE)/usr/share/doc/bftrainer/changelog.gz
	sed -e 's,$${STAGE},$(PKGSTAGE),g' -e 's,$${SRC},$(CURDIR),g' -e 's,$${PKGVERSION},$(PKGVERSION),g' \
	    -e 's,$${PKGARCH},$(PKGARCH),g' -e 's,$${PKGMAINTAINER},$(PKGMAINTAINER),g' contrib/packaging/nfpm.yaml > $(PKGSTAGE)/nfpm.yaml
	cd contrib/packaging/tools && for p in deb rpm; do \
		$(GO) tool nfpm package --config $(PKGSTAGE)/nfpm.yaml --packager $$p --target $(abspath $(PKGDIR))/ || exit 1; \
	done
	@ls -l $(PKGDIR)/*.deb $(PKGDIR)/*.rpm

# HiGHS compiled to WebAssembly, run by node: the "highs" solver where no
# native highs is installed (Debian 12). Its driver goes to
# $(HIGHSDIR) with the npm package pinned in its package-lock.json, and is
# linked onto PATH as bftrainer-highs, where the HiGHS backend looks.
install-highs:
	@if ! command -v $(NPM) >/dev/null 2>&1; then \
		echo "make install: npm not found: the HiGHS driver is not installed (apt install nodejs npm, then make install-highs)"; \
	else \
		set -e; \
		install -d -m 0755 $(DESTDIR)$(HIGHSDIR); \
		install -m 0644 alloc/milp/highs-wasm/package.json alloc/milp/highs-wasm/package-lock.json $(DESTDIR)$(HIGHSDIR)/; \
		install -m 0755 alloc/milp/highs-wasm/bftrainer-highs.mjs $(DESTDIR)$(HIGHSDIR)/bftrainer-highs.mjs; \
		$(NPM) ci --prefix $(DESTDIR)$(HIGHSDIR) --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --no-update-notifier --loglevel=error; \
		ln -sfn $(HIGHSDIR)/bftrainer-highs.mjs $(DESTDIR)$(BINDIR)/bftrainer-highs; \
		echo "installed the HiGHS driver in $(HIGHSDIR), linked as $(BINDIR)/bftrainer-highs (needs node on PATH)"; \
	fi

clean:
	rm -rf $(OUT) demo-out device-check-out
