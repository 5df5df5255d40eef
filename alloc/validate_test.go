package alloc_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bftrainer/bftrainer/alloc"
	"github.com/bftrainer/bftrainer/alloc/alloctest"
)

// Every solver refuses a Problem whose nodes or Trainers are listed
// twice, on a small pool and on one large enough that Adaptive checks it
// beside its sort of the free pool, and then solves a valid one (the
// check's kept map is emptied between calls).
func TestSolversRefuseInvalidProblems(t *testing.T) {
	cases := []struct {
		name, field, reason string
		spoil               func(p *alloc.Problem)
	}{
		{"free twice", "free", "listed twice", func(p *alloc.Problem) { p.Free[1].Name = p.Free[0].Name }},
		{"empty name", "free", "empty name", func(p *alloc.Problem) { p.Free[len(p.Free)-1].Name = "" }},
		{"held and free", "held", "also listed as free", func(p *alloc.Problem) { holding(p, 0).Held[0].Name = p.Free[2].Name }},
		{"held twice", "held", "also held by", func(p *alloc.Problem) { holding(p, 1).Held[0].Name = holding(p, 0).Held[0].Name }},
		{"id twice", "id", "listed twice", func(p *alloc.Problem) { p.Trainers[3].ID = p.Trainers[0].ID }},
	}
	for _, size := range []struct {
		name string
		p    *alloc.Problem
	}{
		{"small", alloctest.Summit(10, 200, 16, 3)},
		{"large", alloctest.Summit(10, 3000, 64, 3)},
	} {
		if size.name == "large" && len(size.p.Free) < 2048 {
			t.Fatalf("the large problem has %d free nodes: too few to check beside the sort", len(size.p.Free))
		}
		for _, sv := range []alloc.Solver{alloc.Adaptive{}, alloc.Exact{}} {
			want, err := sv.Solve(context.Background(), size.p)
			if err != nil {
				t.Fatalf("%s, %s, valid: %v", size.name, sv.Name(), err)
			}
			for _, c := range cases {
				p := spoilable(size.p)
				c.spoil(p)
				pl, err := sv.Solve(context.Background(), p)
				var fe *alloc.FieldError
				if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Reason, c.reason) {
					t.Errorf("%s, %s, %s: plan %v, error %v; want a %q error saying %q", size.name, sv.Name(), c.name, pl != nil, err, c.field, c.reason)
				}
				got, err := sv.Solve(context.Background(), size.p)
				if err != nil {
					t.Errorf("%s, %s, valid after %s: %v", size.name, sv.Name(), c.name, err)
				} else if got.Objective != want.Objective {
					t.Errorf("%s, %s, valid after %s: objective %v, want %v", size.name, sv.Name(), c.name, got.Objective, want.Objective)
				}
			}
		}
	}
}

// spoilable copies p's nodes and Trainers so that a case may change them.
func spoilable(p *alloc.Problem) *alloc.Problem {
	q := *p
	q.Free = slices.Clone(p.Free)
	q.Trainers = slices.Clone(p.Trainers)
	for j := range q.Trainers {
		q.Trainers[j].Held = slices.Clone(p.Trainers[j].Held)
	}
	return &q
}

// holding returns the i-th Trainer of p that holds nodes.
func holding(p *alloc.Problem, i int) *alloc.Trainer {
	for j := range p.Trainers {
		if len(p.Trainers[j].Held) > 0 {
			if i == 0 {
				return &p.Trainers[j]
			}
			i--
		}
	}
	panic("too few Trainers hold nodes")
}
