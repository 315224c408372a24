package slurm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// v2205 and v2411 are Slurm releases on either side of the change in
// sacct --batch-script's framing (24.11 adds no newline of its own).
var (
	v2205 = Version{Major: 22, Minor: 5, Micro: 8, Raw: "22.05.8"}
	v2405 = Version{Major: 24, Minor: 5, Micro: 8, Raw: "24.05.8"}
	v2411 = Version{Major: 24, Minor: 11, Micro: 5, Raw: "24.11.5"}
	v2605 = Version{Major: 26, Minor: 5, Micro: 3, Raw: "26.05.3"}
)

func sacctScriptOutput(id, script string) string {
	return string(FrameSacctBatchScript(v2205, id, []byte(script)))
}

func TestParseSacctBatchScript(t *testing.T) {
	tricky := "#!/bin/bash\n" + strings.Repeat("-", 80) + "\nBatch Script for 1\n" + strings.Repeat("-", 80) + "\necho hi"
	header := func(id string) string { return "Batch Script for " + id + "\n" + strings.Repeat("-", 80) + "\n" }
	cases := []struct {
		name, id string
		v        Version
		out      string
		want     string
		err      error // nil: want success; errAny: any other error
	}{
		{"newline", "12", v2205, header("12") + "#!/bin/bash\necho a\n\n", "#!/bin/bash\necho a\n", nil},
		{"no final newline", "12", v2205, header("12") + "#!/bin/bash\necho a\n", "#!/bin/bash\necho a", nil},
		{"blank lines at the end", "12", v2205, sacctScriptOutput("12", "#!/bin/bash\necho a\n\n\n"), "#!/bin/bash\necho a\n\n\n", nil},
		{"framing inside", "1", v2205, sacctScriptOutput("1", tricky), tricky, nil},
		{"NONE", "12", v2205, header("12") + "NONE\n\n", "", ErrNoBatchScript},
		{"24.05 still adds", "12", v2405, header("12") + "#!/bin/bash\necho a\n", "#!/bin/bash\necho a", nil},
		{"24.11 newline", "12", v2411, header("12") + "#!/bin/bash\necho a\n", "#!/bin/bash\necho a\n", nil},
		{"24.11 no final newline", "12", v2411, header("12") + "#!/bin/bash\necho a", "#!/bin/bash\necho a", nil},
		{"24.11 blank lines at the end", "12", v2411, header("12") + "#!/bin/bash\n\n\n", "#!/bin/bash\n\n\n", nil},
		{"24.11 framing inside", "1", v2411, header("1") + tricky, tricky, nil},
		{"24.11 NONE", "12", v2411, header("12") + "NONE\n", "", ErrNoBatchScript},
		{"26.05 NONE", "12", v2605, header("12") + "NONE\n", "", ErrNoBatchScript},
		{"24.11 under --noheader", "12", v2411, "#!/bin/bash\necho a\n", "", errAny},
		{"empty", "12", v2205, "", "", ErrUnknownJob},
		{"blank", "12", v2205, "\n", "", ErrUnknownJob},
		{"24.11 empty", "12", v2411, "", "", ErrUnknownJob},
		{"other id", "12", v2205, sacctScriptOutput("13", "#!/bin/sh\n"), "", errAny},
		{"id prefix", "1", v2205, sacctScriptOutput("12", "#!/bin/sh\n"), "", errAny},
		{"array task", "12", v2205, sacctScriptOutput("12_1", "#!/bin/sh\n"), "", errAny},
		{"24.11 array task", "12", v2411, header("12_1") + "#!/bin/sh\n", "", errAny},
		{"het component", "12", v2205, sacctScriptOutput("12+0", "#!/bin/sh\n"), "", errAny},
		{"short rule", "12", v2205, "Batch Script for 12\n" + strings.Repeat("-", 79) + "\n#!/bin/sh\n\n", "", errAny},
		{"cut short", "12", v2205, header("12") + "#!/bin/sh", "", errAny},
		{"not a script", "12", v2205, sacctScriptOutput("12", "echo a\n"), "", errAny},
		{"24.11 not a script", "12", v2411, header("12") + "echo a\n", "", errAny},
		{"24.11 header only", "12", v2411, header("12"), "", errAny},
		{"column header", "12", v2205, "JobID\n------\n", "", errAny},
	}
	for _, c := range cases {
		got, err := ParseSacctBatchScript(c.v, c.id, []byte(c.out))
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

// TestSacctBatchScriptCaptures: real sacct --batch-script output of each
// Slurm the lab runs (testdata/lab: 22.05.8, cluster 1; testdata/
// lab-24.11: cluster 3; capture_batch_script.sh) gives back the submitted
// scripts byte for byte, with and without a final newline, and NONE for a
// job without a batch script (an srun allocation), as the version that
// printed it frames them. 24.11's --noheader output is the bare script
// (why the Client keeps the header: it names the job).
func TestSacctBatchScriptCaptures(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "lab*", "batch_script_version.txt"))
	if len(dirs) == 0 {
		t.Fatal("no batch script captures")
	}
	seen := map[bool]bool{} // by SacctAddsNewline
	for _, vf := range dirs {
		dir := filepath.Dir(vf)
		vb, err := os.ReadFile(vf)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ParseVersion(string(vb))
		if err != nil {
			t.Fatalf("%s: %v", vf, err)
		}
		seen[SacctAddsNewline(v)] = true
		read := func(name string) []byte {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		for _, c := range []string{"nl", "nonl", "none"} {
			id := strings.TrimSpace(string(read("batch_script_" + c + ".id")))
			got, err := ParseSacctBatchScript(v, id, read("batch_script_"+c+".sacct.txt"))
			if c == "none" {
				if !errors.Is(err, ErrNoBatchScript) {
					t.Errorf("%s %s: %q, %v; want ErrNoBatchScript", dir, c, got, err)
				}
				continue
			}
			want := read("batch_script_" + c + ".sh")
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s %s: %q, %v; want %q", dir, c, got, err, want)
			}
			if !SacctAddsNewline(v) && !bytes.Equal(read("batch_script_"+c+".noheader.txt"), want) {
				t.Errorf("%s %s: --noheader is not the bare script", dir, c)
			}
		}
	}
	if !seen[true] {
		t.Error("no capture of a sacct that adds a newline (22.05-24.05)")
	}
	if !seen[false] {
		t.Error("no capture of a sacct that adds none (24.11+)")
	}
}

var errAny = errors.New("any error")

// TestBatchScriptPaths: slurmctld first; sacct when slurmctld no longer
// knows the job (22.05 exits 0 then, with the message on stderr) or
// fails, framed as the cluster's sacct version frames it; both errors
// kept when both fail.
func TestBatchScriptPaths(t *testing.T) {
	const script = "#!/bin/bash\necho a" // no final newline
	type answer struct {
		out, err string
		exit     int
		frame    bool // out is a script (or NONE) that sacct frames
	}
	ctldUnknown := answer{"", "job script retrieval failed: Invalid job id specified\n", 0, false}
	ctldForeign := answer{"", "job script retrieval failed: Invalid user id\n", 0, false}
	framed := func(s string) answer { return answer{out: s, frame: true} }
	cases := []struct {
		name         string
		ctld, sacct  answer
		want         string
		err          error
		sacctCalls   int
		errSubstring string
	}{
		{"slurmctld", answer{script, "", 0, false}, answer{}, script, nil, 0, ""},
		{"slurmctld forgot", ctldUnknown, framed(script), script, nil, 1, ""},
		{"slurmctld forgot, newline", ctldUnknown, framed(script + "\n"), script + "\n", nil, 1, ""},
		{"slurmctld forgot, exit 1", answer{"", "job script retrieval failed: Invalid job id specified\n", 1, false}, framed(script), script, nil, 1, ""},
		{"no stored script", ctldUnknown, framed("NONE\n"), "", ErrNoBatchScript, 1, ""},
		{"unknown", ctldUnknown, answer{}, "", ErrUnknownJob, 1, ""},
		{"another user's job", ctldForeign, answer{}, "", nil, 1, "Invalid user id"},
		{"controller down", answer{"", "slurm_load_jobs error: Unable to contact slurm controller\n", 1, false}, framed(script), script, nil, 1, ""},
		{"both down", answer{"", "Unable to contact slurm controller\n", 1, false}, answer{"", "sacct: error: slurmdbd: Connection refused\n", 1, false}, "", nil, 1, "Connection refused"},
		{"empty stdout", answer{"", "", 0, false}, framed(script), script, nil, 1, ""},
	}
	for _, v := range []struct {
		line string
		v    Version
	}{{"slurm-wlm 22.05.8\n", v2205}, {"slurm 24.11.5\n", v2411}} {
		for _, c := range cases {
			name := v.v.Raw + " " + c.name
			versions := 0
			f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
				"scontrol": func(argv []string) (string, string, int) {
					if strings.Join(argv, " ") != "scontrol write batch_script 42 -" {
						return "", "bad argv " + strings.Join(argv, " "), 2
					}
					return c.ctld.out, c.ctld.err, c.ctld.exit
				},
				"sacct": func(argv []string) (string, string, int) {
					if strings.Join(argv, " ") == "sacct --version" {
						versions++
						return v.line, "", 0
					}
					if strings.Join(argv, " ") != "sacct --batch-script --jobs=42" {
						return "", "bad argv " + strings.Join(argv, " "), 2
					}
					if c.sacct.frame {
						return string(FrameSacctBatchScript(v.v, "42", []byte(c.sacct.out))), "", 0
					}
					return c.sacct.out, c.sacct.err, c.sacct.exit
				},
			}}
			cl := New(f)
			got, err := cl.BatchScript(context.Background(), "42")
			wantOK := c.err == nil && c.errSubstring == ""
			switch {
			case wantOK && (err != nil || string(got) != c.want):
				t.Errorf("%s: %q, %v; want %q", name, got, err, c.want)
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("%s: %v; want %v", name, err, c.err)
			case c.errSubstring != "" && (err == nil || !strings.Contains(err.Error(), c.errSubstring)):
				t.Errorf("%s: %v; want it to say %q", name, err, c.errSubstring)
			}
			if n := f.count("sacct") - versions; n != c.sacctCalls {
				t.Errorf("%s: %d sacct calls, want %d", name, n, c.sacctCalls)
			}
			// The version is asked once per Client.
			if c.sacctCalls > 0 {
				if _, err := cl.BatchScript(context.Background(), "42"); (err == nil) != wantOK || versions != 1 {
					t.Errorf("%s: again: %v, %d sacct --version", name, err, versions)
				}
			}
			for _, call := range f.calls {
				if !call.Idempotent {
					t.Errorf("%s: %v not idempotent", name, call.Argv)
				}
			}
		}
	}
	// An array task's id is taken (TestBatchScriptTask); a malformed one,
	// a heterogeneous component and anything else are not.
	for _, id := range []string{"", "12_01", "12_[1-2]", "12+0", "1;rm", "-1"} {
		f := &fakeRunner{}
		if _, err := New(f).BatchScript(context.Background(), id); err == nil || len(f.calls) != 0 {
			t.Errorf("id %q: %v, %d calls", id, err, len(f.calls))
		}
	}
}

// TestBatchScriptVersionUnknown: a sacct whose version cannot be read
// frames its script in a way that cannot be told: no script, an error
// (never bytes that may be off by a newline), and the version is asked
// again next time.
func TestBatchScriptVersionUnknown(t *testing.T) {
	answers := []string{"sacct: unrecognized option '--version'\n", "slurm 24.11.5\n"}
	versions := 0
	f := &fakeRunner{handlers: map[string]func([]string) (string, string, int){
		"scontrol": func([]string) (string, string, int) {
			return "", "job script retrieval failed: Invalid job id specified\n", 0
		},
		"sacct": func(argv []string) (string, string, int) {
			if argv[1] == "--version" {
				versions++
				if versions == 1 {
					return "", answers[0], 1
				}
				return answers[1], "", 0
			}
			return "Batch Script for 42\n" + strings.Repeat("-", 80) + "\n#!/bin/sh\n", "", 0
		},
	}}
	c := New(f)
	if got, err := c.BatchScript(context.Background(), "42"); err == nil || got != nil || !strings.Contains(err.Error(), "unrecognized option") {
		t.Fatalf("%q, %v", got, err)
	}
	if got, err := c.BatchScript(context.Background(), "42"); err != nil || string(got) != "#!/bin/sh\n" || versions != 2 {
		t.Fatalf("%q, %v, %d asks", got, err, versions)
	}
}

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Version
		err  bool
	}{
		{"slurm-wlm 22.05.8\n", Version{22, 5, 8, "22.05.8"}, false},
		{"slurm 24.11.5\n", Version{24, 11, 5, "24.11.5"}, false},
		{"slurm 24.11.0-0rc1", Version{24, 11, 0, "24.11.0-0rc1"}, false},
		{"slurm 26.05", Version{26, 5, 0, "26.05"}, false},
		{"", Version{}, true},
		{"slurm", Version{}, true},
		{"sacct: error: foo bar", Version{}, true},
		{"slurm 24", Version{}, true},
		{"slurm 24.x.1", Version{}, true},
		{"slurm 24.11.5.1", Version{}, true},
		{"slurm 24.11.5 extra", Version{}, true},
		{"munge 0.5.15", Version{}, true},
	} {
		got, err := ParseVersion(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%q: %+v, %v", c.in, got, err)
		}
	}
	for _, c := range []struct {
		v     Version
		adds  bool
		major int
	}{{v2205, true, 22}, {v2405, true, 24}, {v2411, false, 24}, {v2605, false, 26}, {Version{Major: 25, Minor: 5}, false, 25}, {Version{Major: 23, Minor: 11}, true, 23}} {
		if SacctAddsNewline(c.v) != c.adds {
			t.Errorf("%v: adds newline %v", c.v, !c.adds)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	f.Add("slurm-wlm 22.05.8\n")
	f.Add("slurm 24.11.0-0rc1")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Micro < 0 || v.Raw == "" || !strings.Contains(s, v.Raw) {
			t.Fatalf("%q: %+v", s, v)
		}
	})
}

func FuzzParseSacctBatchScript(f *testing.F) {
	for _, late := range []bool{false, true} {
		f.Add("1", late, []byte(sacctScriptOutput("1", "#!/bin/bash\necho a\n")))
		f.Add("1", late, []byte(sacctScriptOutput("1", "#!/bin/bash\nBatch Script for 1\n"+strings.Repeat("-", 80)+"\nx")))
		f.Add("7", late, []byte(sacctScriptOutput("7", "NONE\n")))
		f.Add("7", late, []byte(""))
		f.Add("7", late, []byte(sacctScriptOutput("7_1", "#!/bin/sh\n")))
	}
	// The real captures, of each version.
	files, _ := filepath.Glob(filepath.Join("testdata", "lab*", "batch_script_*.txt"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		base, ok := strings.CutSuffix(p, ".sacct.txt")
		if !ok {
			base, ok = strings.CutSuffix(p, ".noheader.txt")
		}
		if !ok {
			continue // the version
		}
		id, _ := os.ReadFile(base + ".id")
		f.Add(strings.TrimSpace(string(id)), strings.Contains(p, "24.11"), b)
	}
	f.Fuzz(func(t *testing.T, id string, late bool, out []byte) {
		v := v2205
		if late {
			v = v2411
		}
		got, err := ParseSacctBatchScript(v, id, out)
		if err != nil {
			if got != nil {
				t.Fatalf("script with error %v", err)
			}
			return
		}
		// Success means out is exactly one record for id framing got.
		if !bytes.Equal(FrameSacctBatchScript(v, id, got), out) {
			t.Fatalf("%q does not frame %q", out, got)
		}
		if !bytes.HasPrefix(got, []byte("#!")) || string(got) == sacctNone {
			t.Fatalf("not a script: %q", got)
		}
	})
}
