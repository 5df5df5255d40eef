// Package slurm holds bftrainer's Slurm integration: the sysadmin guide
// (README.md), the systemd unit of the reconciler service, the lab that
// starts a real Slurm cluster on one machine (lab/) and the end-to-end
// tests that run bftrainer as the hooks of such a cluster
// (slurm_test.go, with the harness in slurmlab/).
//
// There is no Go API here; run the tests as root with Slurm, munge and
// python3-torch installed:
//
//	go test -v -timeout 30m ./contrib/slurm/
package slurm
