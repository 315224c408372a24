// Command nemorl-slurm runs NeMo Gym nemorl_env episodes on Slurm clusters.
package main

import (
	"os"

	"github.com/nemorl/nemorl-slurm/cli"
)

func main() { os.Exit(cli.Main(os.Args, os.Stdin, os.Stdout, os.Stderr)) }
