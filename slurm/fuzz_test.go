package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// addCaptures seeds f with every captured file matching pattern.
func addCaptures(f *testing.F, pattern string) {
	files, _ := filepath.Glob(filepath.Join("testdata", "lab", pattern))
	files2, _ := filepath.Glob(filepath.Join("testdata", "synthetic", pattern))
	for _, p := range append(files, files2...) {
		if b, err := readCapture(p); err == nil {
			f.Add(b)
		}
	}
}

func checkJobs(t *testing.T, jobs []JobInfo) {
	seen := map[string]bool{}
	for _, j := range jobs {
		if !validJobID(j.ID) {
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
		if strings.Contains(j.NodeList, "\n") {
			t.Fatalf("newline in nodelist")
		}
	}
}

func FuzzParseSacct(f *testing.F) {
	addCaptures(f, "sacct_*.txt")
	f.Add([]byte(sacctLine("1", "1", "n", "CANCELLED by 0", "0:15", "None", "Unknown", "None", "1", "1-00:00:01", "None assigned", "nemorl", "c")))
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, _ := ParseSacct(b)
		checkJobs(t, jobs)
		for _, j := range jobs {
			if j.Source != SourceSacct {
				t.Fatalf("source %q", j.Source)
			}
		}
	})
}

func FuzzParseSqueue(f *testing.F) {
	addCaptures(f, "squeue_*.txt")
	f.Fuzz(func(t *testing.T, b []byte) {
		jobs, _ := ParseSqueue(b)
		checkJobs(t, jobs)
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
