package slurm

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func sacctScriptOutput(id, script string) string {
	return "Batch Script for " + id + "\n" + strings.Repeat("-", 80) + "\n" + script + "\n"
}

func TestParseSacctBatchScript(t *testing.T) {
	tricky := "#!/bin/bash\n" + strings.Repeat("-", 80) + "\nBatch Script for 1\n" + strings.Repeat("-", 80) + "\necho hi"
	cases := []struct {
		name, id, out string
		want          string
		err           error // nil: want success; errAny: any other error
	}{
		{"newline", "12", sacctScriptOutput("12", "#!/bin/bash\necho a\n"), "#!/bin/bash\necho a\n", nil},
		{"no final newline", "12", sacctScriptOutput("12", "#!/bin/bash\necho a"), "#!/bin/bash\necho a", nil},
		{"blank lines at the end", "12", sacctScriptOutput("12", "#!/bin/bash\necho a\n\n\n"), "#!/bin/bash\necho a\n\n\n", nil},
		{"framing inside", "1", sacctScriptOutput("1", tricky), tricky, nil},
		{"NONE", "12", sacctScriptOutput("12", "NONE\n"), "", ErrNoBatchScript},
		{"empty", "12", "", "", ErrUnknownJob},
		{"blank", "12", "\n", "", ErrUnknownJob},
		{"other id", "12", sacctScriptOutput("13", "#!/bin/sh\n"), "", errAny},
		{"id prefix", "1", sacctScriptOutput("12", "#!/bin/sh\n"), "", errAny},
		{"array task", "12", sacctScriptOutput("12_1", "#!/bin/sh\n"), "", errAny},
		{"het component", "12", sacctScriptOutput("12+0", "#!/bin/sh\n"), "", errAny},
		{"short rule", "12", "Batch Script for 12\n" + strings.Repeat("-", 79) + "\n#!/bin/sh\n\n", "", errAny},
		{"cut short", "12", "Batch Script for 12\n" + strings.Repeat("-", 80) + "\n#!/bin/sh", "", errAny},
		{"not a script", "12", sacctScriptOutput("12", "echo a\n"), "", errAny},
		{"column header", "12", "JobID\n------\n", "", errAny},
	}
	for _, c := range cases {
		got, err := ParseSacctBatchScript(c.id, []byte(c.out))
		switch {
		case c.err == nil && (err != nil || string(got) != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		case c.err == errAny && (err == nil || errors.Is(err, ErrNoBatchScript) || errors.Is(err, ErrUnknownJob)):
			t.Errorf("%s: %q, %v; want a framing error", c.name, got, err)
		case c.err != nil && c.err != errAny && !errors.Is(err, c.err):
			t.Errorf("%s: %q, %v; want %v", c.name, got, err, c.err)
		}
		if err != nil && got != nil {
			t.Errorf("%s: script with an error", c.name)
		}
	}
}

var errAny = errors.New("any error")

// TestBatchScriptPaths: slurmctld first; sacct when slurmctld no longer
// knows the job (22.05 exits 0 then, with the message on stderr) or
// fails; both errors kept when both fail.
func TestBatchScriptPaths(t *testing.T) {
	const script = "#!/bin/bash\necho a" // no final newline
	type answer struct {
		out, err string
		exit     int
	}
	ctldUnknown := answer{"", "job script retrieval failed: Invalid job id specified\n", 0}
	ctldForeign := answer{"", "job script retrieval failed: Invalid user id\n", 0}
	cases := []struct {
		name         string
		ctld, sacct  answer
		want         string
		err          error
		sacctCalls   int
		errSubstring string
	}{
		{"slurmctld", answer{script, "", 0}, answer{}, script, nil, 0, ""},
		{"slurmctld forgot", ctldUnknown, answer{sacctScriptOutput("42", script), "", 0}, script, nil, 1, ""},
		{"slurmctld forgot, exit 1", answer{"", "job script retrieval failed: Invalid job id specified\n", 1}, answer{sacctScriptOutput("42", script), "", 0}, script, nil, 1, ""},
		{"no stored script", ctldUnknown, answer{sacctScriptOutput("42", "NONE\n"), "", 0}, "", ErrNoBatchScript, 1, ""},
		{"unknown", ctldUnknown, answer{"", "", 0}, "", ErrUnknownJob, 1, ""},
		{"another user's job", ctldForeign, answer{"", "", 0}, "", nil, 1, "Invalid user id"},
		{"controller down", answer{"", "slurm_load_jobs error: Unable to contact slurm controller\n", 1}, answer{sacctScriptOutput("42", script), "", 0}, script, nil, 1, ""},
		{"both down", answer{"", "Unable to contact slurm controller\n", 1}, answer{"", "sacct: error: slurmdbd: Connection refused\n", 1}, "", nil, 1, "Connection refused"},
		{"empty stdout", answer{"", "", 0}, answer{sacctScriptOutput("42", script), "", 0}, script, nil, 1, ""},
	}
	for _, c := range cases {
		f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
			"scontrol": func(argv []string) (string, string, int) {
				if strings.Join(argv, " ") != "scontrol write batch_script 42 -" {
					return "", "bad argv " + strings.Join(argv, " "), 2
				}
				return c.ctld.out, c.ctld.err, c.ctld.exit
			},
			"sacct": func(argv []string) (string, string, int) {
				if strings.Join(argv, " ") != "sacct --batch-script --jobs=42" {
					return "", "bad argv " + strings.Join(argv, " "), 2
				}
				return c.sacct.out, c.sacct.err, c.sacct.exit
			},
		}}
		got, err := New(f).BatchScript(context.Background(), "42")
		wantOK := c.err == nil && c.errSubstring == ""
		switch {
		case wantOK && (err != nil || string(got) != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("%s: %v; want %v", c.name, err, c.err)
		case c.errSubstring != "" && (err == nil || !strings.Contains(err.Error(), c.errSubstring)):
			t.Errorf("%s: %v; want it to say %q", c.name, err, c.errSubstring)
		}
		if n := f.count("sacct"); n != c.sacctCalls {
			t.Errorf("%s: %d sacct calls, want %d", c.name, n, c.sacctCalls)
		}
		for _, call := range f.calls {
			if !call.Idempotent {
				t.Errorf("%s: %v not idempotent", c.name, call.Argv)
			}
		}
	}
	for _, id := range []string{"", "12_1", "12+0", "1;rm", "-1"} {
		f := &fakeRunner{}
		if _, err := New(f).BatchScript(context.Background(), id); err == nil || len(f.calls) != 0 {
			t.Errorf("id %q: %v, %d calls", id, err, len(f.calls))
		}
	}
}

func FuzzParseSacctBatchScript(f *testing.F) {
	f.Add("1", []byte(sacctScriptOutput("1", "#!/bin/bash\necho a\n")))
	f.Add("1", []byte(sacctScriptOutput("1", "#!/bin/bash\nBatch Script for 1\n"+strings.Repeat("-", 80)+"\nx")))
	f.Add("7", []byte(sacctScriptOutput("7", "NONE\n")))
	f.Add("7", []byte(""))
	f.Add("7", []byte(sacctScriptOutput("7_1", "#!/bin/sh\n")))
	f.Fuzz(func(t *testing.T, id string, out []byte) {
		got, err := ParseSacctBatchScript(id, out)
		if err != nil {
			if got != nil {
				t.Fatalf("script with error %v", err)
			}
			return
		}
		// Success means out is exactly one record for id framing got.
		if !bytes.Equal([]byte(sacctScriptOutput(id, string(got))), out) {
			t.Fatalf("%q does not frame %q", out, got)
		}
		if !bytes.HasPrefix(got, []byte("#!")) {
			t.Fatalf("not a script: %q", got)
		}
	})
}
