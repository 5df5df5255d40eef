// Command burn runs a command while every core is kept busy: the loaded
// machine a CI runner shares with other work, on which every wait of the
// suite must still hold (`make test-loaded`). The burners are busy loops
// of this process, so they end with it: when the command exits, after
// -max at the latest, or when burn itself is killed. burn exits with the
// command's status.
//
//	go run ./internal/burn [-n BURNERS] [-max DURATION] -- COMMAND [ARG...]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", runtime.NumCPU(), "busy loops (one core each)")
	limit := flag.Duration("max", 90*time.Minute, "stop burning after this long, whatever the command does")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: burn [-n BURNERS] [-max DURATION] -- COMMAND [ARG...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *n < 0 || *limit <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	code, err := run(*n, *limit, flag.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "burn: %v\n", err)
	}
	os.Exit(code)
}

// run starts n burners, runs argv, stops the burners and returns argv's
// exit code (2 when it could not run; 128+signal when a signal ended it).
func run(n int, limit time.Duration, argv []string) (int, error) {
	if runtime.GOMAXPROCS(0) < n+1 {
		runtime.GOMAXPROCS(n + 1) // the burners, and this goroutine waiting
	}
	var stop atomic.Bool
	for range n {
		go func() {
			runtime.LockOSThread()
			for x := uint64(1); !stop.Load(); x = x*6364136223846793005 + 1 {
			}
		}()
	}
	timer := time.AfterFunc(limit, func() {
		fmt.Fprintf(os.Stderr, "burn: %v passed: the burners stop\n", limit)
		stop.Store(true)
	})
	defer timer.Stop()
	defer stop.Store(true)
	fmt.Fprintf(os.Stderr, "burn: %d busy loop(s) on %d core(s), at most %v, while: %v\n", n, runtime.NumCPU(), limit, argv)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 2, err
	}
	// Forwarded, so that ^C or a CI runner's SIGTERM reaches the tests.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	signal.Stop(sigs)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal()), nil
		}
		return ee.ExitCode(), nil
	default:
		return 2, err
	}
}
