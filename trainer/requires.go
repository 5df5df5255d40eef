package trainer

import (
	"slices"
	"strings"
)

// Requirement is a program a launcher needs on the controller, as a
// command that succeeds where it is there: what `bftrainer doctor` runs.
type Requirement struct {
	What string   // "torchrun", "python with the elastic runtime"
	Argv []string // the command; it exits 0 when the program is there
	Env  []string // added to the environment
	Hint string   // the fix when it is not
}

// Requirer is a Launcher that says what it needs.
type Requirer interface {
	Requires() []Requirement
}

// Requires is torchrun's command (its module imported, when it is
// python -m MODULE) and torch for its interpreter.
func (l *torchrun) Requires() []Requirement {
	c := l.s.Command
	run := []string{c[0], "--help"}
	if isPython(c[0]) && len(c) > 2 && c[1] == "-m" {
		run = []string{c[0], "-c", "import " + c[2]}
	}
	return []Requirement{
		{What: "torchrun (" + c[0] + ")", Argv: run,
			Hint: "install torch for that interpreter, or set [trainer.launcher.torchrun] command"},
		{What: "python with torch (" + l.python() + ")", Argv: []string{l.python(), "-c", "import torch"},
			Hint: "install torch, or set [trainer.launcher.torchrun] python"},
	}
}

// Requires is the interpreter with torch and the elastic runtime
// (bftrainer_elastic, from pythonpath); for mpi-elastic, the MPI
// launcher's too.
func (l *elastic) Requires() []Requirement {
	section := "[trainer.launcher." + Elastic + "]"
	if l.mpi != nil {
		section = "[trainer.launcher." + MPIElastic + "]"
	}
	r := Requirement{What: "python with the elastic runtime (" + l.s.Python + ")",
		Argv: []string{l.s.Python, "-c", "import torch, bftrainer_elastic"},
		Hint: "install torch for that interpreter and the runtime (make install puts it in PREFIX/lib/bftrainer/python), or set " + section + " python and pythonpath"}
	if l.s.PythonPath != "" {
		r.Env = []string{"PYTHONPATH=" + l.s.PythonPath}
	}
	if l.mpi == nil {
		return []Requirement{r}
	}
	rs := []Requirement{r}
	for _, m := range l.mpi.Requires() {
		m.Hint = strings.ReplaceAll(m.Hint, "[trainer.launcher."+MPI+"]", section)
		rs = append(rs, m)
	}
	return rs
}

// Requires is the site's MPI launcher: the configured command (its
// --version answers), else an mpirun or mpiexec on PATH — what a Trainer's
// first start looks for (MPIProgram).
func (l *mpiLauncher) Requires() []Requirement {
	if c := l.s.Command; len(c) > 0 {
		return []Requirement{{What: "MPI launcher (" + c[0] + ")", Argv: append(slices.Clone(c), "--version"),
			Hint: "install Open MPI (openmpi-bin) or MPICH (mpich), or set [trainer.launcher.mpi] command"}}
	}
	return []Requirement{{What: "MPI launcher (mpirun or mpiexec on PATH)",
		Argv: []string{"/bin/sh", "-c", "command -v mpirun || command -v mpiexec"},
		Hint: "install Open MPI (openmpi-bin) or MPICH (mpich), or set [trainer.launcher.mpi] command"}}
}
