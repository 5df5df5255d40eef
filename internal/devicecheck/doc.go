// Package devicecheck holds the device check (issue 26): device-check.sh,
// one prepared script that proves on a lent GPU machine what CPU runs
// cannot — the elastic runtime's tests under that machine's torch 2.x,
// on CPU and with CUDA tensors; bftrainer-bench rescale for the elastic
// runtime and torchrun under it; a Trainer holding GPU memory reclaimed
// by the real node prolog, timed until its process is gone and the
// memory back — and skips each GPU part elsewhere, saying why. Its test
// runs the script on the CI machine (every CPU part, with Debian's torch)
// and rehearses the GPU reclaim with stand-ins for the GPU, so neither
// rots between lent machines. README.md, "The device check", says how to
// run it there.
package devicecheck
