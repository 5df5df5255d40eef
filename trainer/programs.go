package trainer

// The programs each launcher runs on the controller (a rendezvous store,
// a driver), which a submission needs found there: the core refuses a
// Trainer whose launcher's programs are missing (sidecar.StartOptions)
// instead of failing its every start.

// ControllerPrograms is the interpreter that runs torchrun's rendezvous
// store on the controller.
func (l *torchrun) ControllerPrograms() []string { return []string{l.python()} }

// ControllerPrograms is horovodrun, the driver that runs on the
// controller.
func (h *horovod) ControllerPrograms() []string {
	if len(h.s.Command) == 0 {
		return nil
	}
	return []string{h.s.Command[0]}
}

// ControllerPrograms is the interpreter that runs the elastic store
// process on the controller.
func (l *elastic) ControllerPrograms() []string { return []string{l.s.Python} }
