//go:build !race

package contamination

const raceEnabled = false
