package rules

import (
	"io/fs"
	"os"
)

func fsPerm(n int) fs.FileMode { return fs.FileMode(n) }

// readREADME reads the page that holds the attribution table (moved from
// the README to docs/episode.md).
func readREADME() (string, error) {
	b, err := os.ReadFile("../docs/episode.md")
	return string(b), err
}
