//go:build race

package journal

// raceEnabled: this test binary has the race detector, whose start-up
// (about a second here) would dominate every helper process.
const raceEnabled = true
