package trainer

import (
	"os"
	"testing"

	"github.com/bftrainer/bftrainer/trainer/trainertest"
)

// TestMain lets the test binary be bftrainer's node agent and supervisor,
// the way the real binary is (trainertest.AgentMain): the local and ssh
// transports under test run the very code they run in production.
func TestMain(m *testing.M) {
	if code, ran := trainertest.AgentMain(); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
