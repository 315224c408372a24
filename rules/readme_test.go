package rules

import (
	"io/fs"
	"os"
)

func fsPerm(n int) fs.FileMode { return fs.FileMode(n) }

func readREADME() (string, error) {
	b, err := os.ReadFile("../README.md")
	return string(b), err
}
