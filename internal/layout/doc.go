// Package layout holds no code: its tests check the house's import rules
// and seams with `go list` and the parsed source (which package may
// import which, and who may speak the node agent's command line).
package layout
