#!/bin/sh
# Installs a bftrainer .deb in a Debian chroot and shows what it made and
# what removing and purging leave: the group and the directories' modes, a
# controller hook run as a SlurmUser in the bftrainer group (its record in
# the journal), a reconcile that records it, then `dpkg -r` (configuration
# and database kept), a reinstall (the edited configuration kept), `dpkg
# --purge` (configuration gone, database kept) and a purge with
# BFTRAINER_PURGE_DATABASE=yes (database gone). A manual check, not a
# test: it needs root and a chroot, e.g.
#
#   debootstrap --variant=minbase bookworm /srv/bookworm http://deb.debian.org/debian
#   make packages && contrib/packaging/check-in-chroot.sh /srv/bookworm bin/packages/bftrainer_*.deb
#
# Run it in a throwaway chroot: it adds a slurm user and the bftrainer group.
set -u
if [ $# -ne 2 ]; then
	echo "usage: $0 CHROOT DEB" >&2
	exit 2
fi
R=$1
cp "$2" "$R/tmp/bftrainer.deb"
mounted=
if mount -t proc proc "$R/proc" 2>/dev/null; then mounted=1; fi
c() {
	echo "# $*"
	chroot "$R" sh -c "$*" 2>&1
	echo "  -> exit $?"
}
c 'useradd --system slurm'
c 'dpkg -i /tmp/bftrainer.deb'
c 'getent group bftrainer'
c 'usermod -aG bftrainer slurm && id slurm'
c 'stat -c "%A %U:%G %n" /usr/bin/bftrainer /etc/bftrainer/bftrainer.toml /var/lib/bftrainer /var/lib/bftrainer/journal /var/log/bftrainer /var/spool/bftrainer /usr/lib/tmpfiles.d/bftrainer.conf'
c 'ls /usr/share/man/man8 | wc -l; zcat /usr/share/man/man8/bftrainer-hook.8.gz | grep -c /usr/bin/bftrainer'
c 'grep -n "ExecStart" /usr/lib/systemd/system/bftrainer-*.service'
c 'bftrainer --version; bftrainer config | grep -n "^database\|^spool\|pythonpath"'
c 'bftrainer node join n1 n2 --no-reconcile && bftrainer reconcile --no-scheduler && bftrainer status'
c 'su -s /bin/sh slurm -c "env -i SLURM_SCRIPT_CONTEXT=prolog_slurmctld SLURM_JOB_ID=42 SLURM_JOB_NODELIST=n1 /usr/bin/bftrainer"; ls -la /var/lib/bftrainer/journal'
c 'bftrainer reconcile --no-scheduler && bftrainer history --job 42 && bftrainer status'
c 'stat -c "%A %U:%G %n" /var/lib/bftrainer/bftrainer.db'
c 'echo "# site edit" >> /etc/bftrainer/bftrainer.toml; dpkg -r bftrainer'
c 'ls -la /etc/bftrainer /var/lib/bftrainer; tail -1 /etc/bftrainer/bftrainer.toml; dpkg -l bftrainer | tail -1'
c 'dpkg -i /tmp/bftrainer.deb && tail -1 /etc/bftrainer/bftrainer.toml && bftrainer history --job 42 | head -3'
c 'dpkg --purge bftrainer'
c 'ls -la /etc/bftrainer /var/log/bftrainer /var/spool/bftrainer; ls -la /var/lib/bftrainer'
c 'dpkg -i /tmp/bftrainer.deb >/dev/null && BFTRAINER_PURGE_DATABASE=yes dpkg --purge bftrainer; ls -la /var/lib/bftrainer; getent group bftrainer'
[ -n "$mounted" ] && umount "$R/proc"
exit 0
