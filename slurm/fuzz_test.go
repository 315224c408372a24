package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// addCaptures seeds f with every captured file matching pattern.
func addCaptures(f *testing.F, pattern string) {
	var files []string
	for _, dir := range []string{"lab", "lab-24.11", "synthetic"} {
		m, _ := filepath.Glob(filepath.Join("testdata", dir, pattern))
		files = append(files, m...)
	}
	for _, p := range files {
		if b, err := readCapture(p); err == nil {
			f.Add(b)
		}
	}
}

func checkJobs(t *testing.T, jobs []JobInfo) {
	seen := map[string]bool{}
	for _, j := range jobs {
		if !ValidJobID(j.ID) {
			t.Fatalf("invalid id %q", j.ID)
		}
		if seen[j.ID] {
			t.Fatalf("id %q twice", j.ID)
		}
		seen[j.ID] = true
		if j.State.Class < Unknown || j.State.Class > Failed {
			t.Fatalf("class %d", j.State.Class)
		}
		if (j.State.Failure != NoFailure) != (j.State.Class == Failed) {
			t.Fatalf("failure %q with class %v", j.State.Failure, j.State.Class)
		}
		if j.Elapsed < 0 {
			t.Fatalf("negative elapsed %v", j.Elapsed)
		}
		if j.TimeLimit < 0 && j.TimeLimit != Unlimited {
			t.Fatalf("time limit %v", j.TimeLimit)
		}
		if strings.Contains(j.NodeList, "\n") {
			t.Fatalf("newline in nodelist")
		}
		// An array task is named "ARRAY_TASK" whatever Slurm printed;
		// any other job is no task.
		if array, task, ok := SplitTaskID(j.ID); ok != j.IsTask() || (ok && (array != j.ArrayJobID || task != j.ArrayTask)) {
			t.Fatalf("id %q: array %q task %d", j.ID, j.ArrayJobID, j.ArrayTask)
		}
		if !j.IsTask() && (j.ArrayTask != -1 || j.ArrayJobID != "") {
			t.Fatalf("plain job %q: array %q task %d", j.ID, j.ArrayJobID, j.ArrayTask)
		}
		if j.RawID == "" || strings.Contains(j.RawID, "_") {
			t.Fatalf("job %q: raw id %q", j.ID, j.RawID)
		}
	}
}

// checkLookups: every job a listing shows is what a look-up of its id
// answers (tasks from an array's pending record included).
func checkLookups(t *testing.T, set *jobSet) {
	jobs, err := set.list(maxListedTasks)
	if err != nil {
		return
	}
	for _, j := range jobs {
		k, ok := set.lookup(j.ID)
		if !ok || k.ID != j.ID || k.State != j.State || k.RawID != j.RawID || k.ArrayTask != j.ArrayTask {
			t.Fatalf("listed %+v, looked up %+v (%v)", j, k, ok)
		}
	}
}

func FuzzParseSacct(f *testing.F) {
	addCaptures(f, "sacct_*.txt")
	f.Add([]byte(sacctLine("1", "1", "n", "CANCELLED by 0", "0:15", "None", "Unknown", "None", "1", "1-00:00:01", "None assigned", "nemorl", "UNLIMITED", "c")))
	f.Add([]byte(sacctLine("2", "2", "n", "PENDING", "0:0", "JobHeldAdmin", "1", "Unknown", "Unknown", "00:00:00", "None assigned", "nemorl", "Partition_Limit", "") +
		sacctLine("2.batch", "2.batch", "batch", "COMPLETED", "0:0", "", "1", "2", "3", "00:00:01", "vm", "", "", "")))
	// an array: its pending record, a task split out with its step
	f.Add([]byte(sacctLine("7", "7_[1-3,5%2]", "a", "PENDING", "0:0", "None", "1", "Unknown", "Unknown", "00:00:00", "None assigned", "u", "5", "") +
		sacctLine("9", "7_0", "a", "FAILED", "3:0", "None", "1", "2", "3", "00:00:01", "vm", "u", "5", "c") +
		sacctLine("9.batch", "7_0.batch", "batch", "FAILED", "3:0", "", "1", "2", "3", "00:00:01", "vm", "", "", "")))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, _ := ParseSacct(b)
		checkJobs(t, jobs)
		for _, j := range jobs {
			if j.Source != SourceSacct {
				t.Fatalf("source %q", j.Source)
			}
		}
		set, _ := parseSacctSet(b, nil)
		checkLookups(t, set)
	})
}

func FuzzParseSqueue(f *testing.F) {
	addCaptures(f, "squeue_*.txt")
	f.Add([]byte(strings.Join([]string{"3", "n", "PENDING", "JobHeldUser", "1", "N/A", "N/A", "0:00", "", "nemorl", "1-02:03:00", "(null)"}, Sep) + "\n"))
	f.Add([]byte(strings.Join([]string{"7=7_[0,2-3]", "a", "PENDING", "JobHeldUser", "1", "N/A", "N/A", "0:00", "", "u", "5:00", "c"}, Sep) + "\n" +
		strings.Join([]string{"9=7_1", "a", "CANCELLED", "Dependency", "1", "2", "3", "0:00", "", "u", "5:00", "c"}, Sep) + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, _ := ParseSqueue(b)
		checkJobs(t, jobs)
		set, _ := parseSqueueSet(b, nil)
		checkLookups(t, set)
		for _, j := range jobs {
			if j.Source != SourceSqueue || len(j.Steps) != 0 {
				t.Fatalf("source %q steps %d", j.Source, len(j.Steps))
			}
			if j.State.Class == Pending && !j.Start.IsZero() {
				t.Fatalf("pending job with a start time")
			}
		}
	})
}

func FuzzParseSbatch(f *testing.F) {
	for _, name := range []string{"sbatch_ok", "sbatch_warning", "sbatch_fail", "sbatch_fail_mem"} {
		for _, dir := range []string{"lab", "synthetic"} {
			out, err1 := os.ReadFile(filepath.Join("testdata", dir, name+".stdout"))
			errb, err2 := os.ReadFile(filepath.Join("testdata", dir, name+".stderr"))
			if err1 == nil && err2 == nil {
				f.Add(out, errb)
			}
		}
	}
	f.Add([]byte("12;cluster\n"), []byte(""))
	f.Fuzz(func(t *testing.T, stdout, stderr []byte) {
		r, err := ParseSbatch(stdout, stderr)
		if err == nil && (!isDigits(r.JobID) || strings.ContainsAny(r.Cluster, " \t;\n")) {
			t.Fatalf("accepted %+v", r)
		}
		if err != nil && r.JobID != "" {
			t.Fatalf("error with job id %+v", r)
		}
	})
}

func FuzzParseElapsed(f *testing.F) {
	for _, s := range []string{"1-02:03:04", "02:03", "0:00", "00:00:01.5", "INVALID", "12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseElapsed(s)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("%q → %v %v", s, d, ok)
		}
		_ = ParseTime(s, time.UTC)
		_ = ParseExitCode(s)
		_ = ParseState(s, s)
	})
}

// formatSqueueLimit formats a time limit as squeue %l (and sacct
// Timelimit) prints it: Slurm's secs2time_str.
func formatSqueueLimit(d time.Duration) string {
	secs := int64(d / time.Second)
	days, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	switch {
	case days > 0:
		return fmt.Sprintf("%d-%02d:%02d:%02d", days, h, m, s)
	case h > 0:
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}

func FuzzParseTimeLimit(f *testing.F) {
	for _, s := range []string{"1:00", "30:00", "1:00:00", "1-00:00:00", "1-02:03:00", "60", "1563",
		"UNLIMITED", "NOT_SET", "INVALID", "Partition_Limit", "2-12", "2-12:30", "", "-1", "1:2:3:4"} {
		f.Add(s, int64(len(s))*60)
	}
	f.Add("0:45", int64(45))
	f.Add("36500-00:00:00", int64(maxTimeLimit/time.Second))
	f.Fuzz(func(t *testing.T, s string, secs int64) {
		d, err := ParseTimeLimit(s)
		switch {
		case err != nil && d != 0:
			t.Fatalf("%q → %v with error %v", s, d, err)
		case d < 0 && d != Unlimited:
			t.Fatalf("%q → %v", s, d)
		case d > maxTimeLimit:
			t.Fatalf("%q → %v, over the bound", s, d)
		case d > 0 && d%time.Second != 0:
			t.Fatalf("%q → %v: not whole seconds", s, d)
		}

		// Round trip of a limit in whole seconds within the bound, as
		// squeue prints it, and in whole minutes, as sacct TimelimitRaw does.
		if secs < 0 {
			secs = -(secs + 1)
		}
		secs %= int64(maxTimeLimit/time.Second) + 1
		lim := time.Duration(secs) * time.Second
		if got, err := ParseTimeLimit(formatSqueueLimit(lim)); err != nil || got != lim {
			t.Fatalf("%v → %q → %v, %v", lim, formatSqueueLimit(lim), got, err)
		}
		min := lim.Truncate(time.Minute)
		raw := strconv.FormatInt(int64(min/time.Minute), 10)
		if got, err := ParseTimeLimit(raw); err != nil || got != min {
			t.Fatalf("%v → %q → %v, %v", min, raw, got, err)
		}
	})
}

// FuzzArrayIDs: task ids and --array specs. SplitTaskID and TaskID are
// each other's inverse, on what ValidJobID accepts as a task's id; a spec
// SbatchArgs takes names indices Slurm takes, and the range records
// sacct and squeue print read back the tasks they name.
func FuzzArrayIDs(f *testing.F) {
	for _, s := range []string{"123_4", "0-49", "0,3,7", "0-49%5", "7_[0,2-3]", "7_[1-99:2%4]", "123", "123_04", "1-4000000", "0-3:2"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, task int) {
		if array, n, ok := SplitTaskID(s); ok {
			if TaskID(array, n) != s || !ValidJobID(s) || n < 0 || n > MaxArrayIndex {
				t.Fatalf("%q → %q %d", s, array, n)
			}
		} else if strings.Contains(s, "_") && ValidJobID(s) {
			t.Fatalf("%q: not a task, yet a valid job id", s)
		}
		if id := TaskID(s, task); id != "" {
			if a, n, ok := SplitTaskID(id); !ok || a != s || n != task {
				t.Fatalf("TaskID(%q, %d) = %q → %q %d %v", s, task, id, a, n, ok)
			}
		}
		if checkArraySpec(s) == nil {
			list, _, _ := strings.Cut(s, "%")
			set, err := parseTaskList(list, false)
			if err != nil || set.count() < 1 {
				t.Fatalf("spec %q accepted, list %v", s, err)
			}
			if strings.ContainsAny(s, " :[]") {
				t.Fatalf("spec %q accepted", s)
			}
		}
		if array, tasks, ok, err := parseTaskRange(s); ok && err == nil {
			if !canonicalNumber(array) || len(tasks) == 0 {
				t.Fatalf("%q → %q %v", s, array, tasks)
			}
			for _, sp := range tasks {
				if sp.first < 0 || sp.last > MaxArrayIndex || sp.first > sp.last || sp.step < 1 {
					t.Fatalf("%q → span %+v", s, sp)
				}
				if !tasks.has(sp.first) || !tasks.has(sp.last-(sp.last-sp.first)%sp.step) {
					t.Fatalf("%q: span %+v not in its set", s, sp)
				}
			}
		}
	})
}
