package templates

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nemorl/nemorl-slurm/internal/labtest"
	"github.com/nemorl/nemorl-slurm/stages"
)

// exitSignals are the signals a payload may die by: the common ones and
// both ends of the real-time range (SIGRTMAX is 64: 128+64 = 192, which
// sacct before 25.11 shows as 64).
var exitSignals = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "BUS": 7, "FPE": 8, "KILL": 9, "USR1": 10,
	"SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "XCPU": 24, "SYS": 31, "RTMIN": 34, "RTMAX": 64}

// TestScriptExitStatuses renders each stage's script and runs it with a
// payload that ends with every status 0–255, and by each signal above:
// the script exits as stages.ScriptExit says (the rule the rules package's
// TestPayloadExitNeverAVerdict reads on every Slurm), and no reading of
// that status by sacct (as is, or folded by 128 before Slurm 25.11) is a
// verdict the script did not decide itself. Only the eval script, whose
// payload is the pinned evaluator, passes a status of 64–79 through as its
// verdict.
func TestScriptExitStatuses(t *testing.T) {
	t.Parallel()
	type run struct {
		how    string // the payload's end: "exit N" or "kill SIG"
		status int    // what bash's wait sees: N, or 128+signal
	}
	var runs []run
	for n := 0; n <= 255; n++ {
		runs = append(runs, run{fmt.Sprintf("exit %d", n), n})
	}
	for name, n := range exitSignals {
		runs = append(runs, run{"kill " + name, 128 + n})
	}
	for _, stage := range stages.All {
		t.Run(string(stage), func(t *testing.T) {
			t.Parallel()
			// Workers with a tree each (a run's scratch and out.log are
			// its tree's); eval's runs wait out its output watch, so more.
			workers := 4
			if stage == stages.Eval {
				workers = 32
			}
			jobs := make(chan run)
			var wg sync.WaitGroup
			for range workers {
				tr := stageRun(t, map[stages.Stage]string{stage: labtest.ExitStandIn})
				status := filepath.Join(filepath.Dir(tr.Dir), "status") // next to the stand-in
				if stage == stages.Train {
					if err := os.WriteFile(filepath.Join(tr.Dir, "author/change.diff"), []byte("d"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if stage == stages.Eval {
					writeWeights(t, tr)
				}
				// The author job reads and deletes its secrets.env (staged
				// by the tool, not rendered): each run gets one anew.
				secrets := filepath.Join(tr.Dir, "author/secrets.env")
				key := []byte("NEMORL_POLICY_API_KEY=" + testKey + "\n")
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range jobs {
						if err := os.WriteFile(secrets, key, 0o600); err != nil {
							t.Error(err)
							continue
						}
						if err := os.WriteFile(status, []byte(r.how), 0o600); err != nil {
							t.Error(err)
							continue
						}
						out, code := runScript(t, tr, stage)
						if !strings.Contains(out, fmt.Sprintf("payload exited with status %d\n", r.status)) {
							t.Errorf("%s payload %q: its status %d not seen by the script\n%s", stage, r.how, r.status, tail(out, 1500))
							continue
						}
						if want := stages.ScriptExit(stage, r.status); code != want {
							t.Errorf("%s payload %q (status %d): script exit %d, want %d\n%s", stage, r.how, r.status, code, want, tail(out, 1500))
						}
						for _, reading := range stages.SacctReadings(code) {
							verdict := stage == stages.Eval && r.status == code // the pinned evaluator's own
							if stages.ReservedExit(reading) && !verdict {
								t.Errorf("%s payload %q: script exit %d reads as %d, a verdict the script did not decide", stage, r.how, code, reading)
							}
						}
					}
				}()
			}
			for _, r := range runs {
				jobs <- r
			}
			close(jobs)
			wg.Wait()
		})
	}
}
