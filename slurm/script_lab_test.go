package slurm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLabBatchScript: scripts with sacct's own framing inside, with and
// without a final newline, and an array's task (its array's script), come
// back byte for byte from slurmctld (scontrol) and from the accounting
// database (sacct --batch-script, AccountingStoreFlags=job_script), and
// through BatchScript once slurmctld has forgotten the job (MinJobAge=30
// in the lab).
func TestLabBatchScript(t *testing.T) {
	t.Parallel()
	eachSlurm(t, testLabBatchScript)
}

func testLabBatchScript(t *testing.T, l *lab) {
	c, cr := l.client(t)
	dashes := strings.Repeat("-", 80)
	body := "#!/bin/bash\n" +
		"cat >/dev/null <<'X'\n" +
		"Batch Script for 1\n" + dashes + "\nNONE\n\n" +
		"X\n"
	scripts := map[string]string{
		"newline":    body + "true\n",
		"no newline": body + "true",
		"blank tail": body + "true\n\n\n",
		// an unterminated here-document: bash warns and goes on
		"dashes last": "#!/bin/bash\ncat >/dev/null <<'X'\nBatch Script for 1\n" + dashes,
		"NONE last":   body + ": NONE\nNONE",
	}
	ids := map[string]string{}
	for name, s := range scripts {
		ids[name] = submit(t, c, SubmitRequest{Script: []byte(s), Name: "nemorl-script-t", Args: l.jobArgs(t)})
	}
	// An array's task: its array's script, from slurmctld under the task's
	// id, from sacct's record of the task once it ran.
	scripts["array task"] = body + "echo \"$SLURM_ARRAY_TASK_ID\"\n"
	array := submit(t, c, SubmitRequest{Script: []byte(scripts["array task"]), Array: "0-1", Name: "nemorl-script-t", Args: l.jobArgs(t)})
	ids["array task"] = TaskID(array, 1)
	ctx := context.Background()

	// 1. slurmctld: scontrol only.
	cr.reset()
	for name, id := range ids {
		got, err := c.BatchScript(ctx, id)
		if err != nil || string(got) != scripts[name] {
			t.Errorf("%s (job %s) from slurmctld: %q, %v\nwant %q", name, id, got, err, scripts[name])
		}
	}
	if n := cr.count("sacct"); n != 0 {
		t.Errorf("%d sacct calls while slurmctld knows the jobs", n)
	}

	// 2. the accounting database, once the jobs have ended (sacct says
	// NONE for a few seconds after a job starts).
	waitFor(t, c, mapValues(ids), labWait, terminalInSacct)
	for name, id := range ids {
		var (
			got      []byte
			err      error
			deadline = time.Now().Add(time.Minute)
		)
		for {
			got, err = c.sacctBatchScript(ctx, id)
			if err == nil || !(errors.Is(err, ErrNoBatchScript) || errors.Is(err, ErrUnknownJob)) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil || string(got) != scripts[name] {
			t.Errorf("%s (job %s) from sacct: %q, %v\nwant %q", name, id, got, err, scripts[name])
		}
	}

	// 3. BatchScript after slurmctld has purged the jobs: sacct's bytes.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(3 * time.Minute)
			for {
				_, err := c.ctldBatchScript(ctx, id)
				if errors.Is(err, errCtldUnknownJob) {
					break
				}
				if time.Now().After(deadline) {
					mu.Lock()
					t.Errorf("%s (job %s): slurmctld still answers after 3 min: %v", name, id, err)
					mu.Unlock()
					return
				}
				time.Sleep(2 * time.Second)
			}
			got, err := c.BatchScript(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || string(got) != scripts[name] {
				t.Errorf("%s (job %s) after slurmctld forgot it: %q, %v\nwant %q", name, id, got, err, scripts[name])
			}
		}()
	}
	wg.Wait()

	if _, err := c.BatchScript(ctx, "99999999"); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("unknown job: %v", err)
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
