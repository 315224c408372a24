//go:build race

package contamination

// raceEnabled: the race detector slows the corpus scan about tenfold, so
// it samples fewer files.
const raceEnabled = true
