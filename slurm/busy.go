package slurm

import (
	"errors"
	"strings"

	"github.com/nemorl/nemorl-slurm/remote"
)

// busyAnswers are what Slurm's commands print when the controller (or
// slurmdbd) is overloaded, throttling the user (SlurmctldParameters=
// rl_enable) or restarting: the question may be asked again later, and
// the jobs it was about are not affected.
var busyAnswers = []string{
	"rate limit",                            // "Rate limit exceeded, please retry momentarily" (under rl_enable the 24.11 commands back off by themselves and print nothing: docs/serve.md)
	"socket timed out",                      // "Socket timed out on send/recv operation"
	"temporarily unavailable",               // "Resource temporarily unavailable"
	"unable to contact slurm controller",    // slurmctld down or failing over
	"slurm backup controller in standby",    // a failover in progress
	"communication connection failure",      // "Communication connection failure"
	"connection refused",                    // "... Connection refused" from slurmctld or slurmdbd
	"slurmdbd: sending message to slurmdbd", // "error: slurmdbd: Sending message to slurmdbd failed"
}

// IsControllerBusy tells whether err carries a Slurm command's answer that
// the controller is busy, throttling or away (busyAnswers), or a command
// stopped at its deadline (ErrDeadline: under rl_enable a throttled
// command says nothing and waits) while no command of err lost its
// connection: a reason to ask again later, more slowly, never a fact
// about a job.
func IsControllerBusy(err error) bool {
	var ce *remote.ConnError
	if errors.Is(err, ErrDeadline) && !errors.As(err, &ce) && !errors.Is(err, remote.ErrConnectionLost) {
		return true
	}
	found := false
	walkErrors(err, func(e error) {
		var ce *remote.CommandError
		if !found && errors.As(e, &ce) && e == error(ce) {
			s := strings.ToLower(ce.Stderr)
			for _, b := range busyAnswers {
				if strings.Contains(s, b) {
					found = true
					return
				}
			}
		}
	})
	return found
}

// walkErrors calls f on err and everything it wraps (errors.Join too).
func walkErrors(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, f)
		}
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), f)
	}
}
