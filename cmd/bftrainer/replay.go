package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/bftrainer/bftrainer/alloc"
)

// replayCommand is a placeholder; the replay command is being written.
func replayCommand() *cli.Command {
	return &cli.Command{Name: "replay", Usage: "replay a scheduler trace (placeholder)"}
}

// solverByName maps an allocator name to a solver.
func solverByName(name string, limit time.Duration) (alloc.Solver, error) {
	switch name {
	case "exact", "":
		return alloc.Exact{}, nil
	case "heuristic":
		return alloc.EqualShare{}, nil
	case "greedy":
		return alloc.Greedy{}, nil
	}
	return nil, fmt.Errorf("unknown allocator %q", name)
}
