package episode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/remote"
	"github.com/nemorl/nemorl-slurm/stages"
)

const trainLineText = `NEMORL_ENV_TRAIN_RESULT={"status":"ok","train_reward":0.31,"inner_steps":42,"weights_sha256":"` +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + `","weights_bytes":3087467520,"trainer_exit_status":0}`

// sameScan reports whether two scan results agree: the same record, or
// the same rejection at the same line and offset.
func sameScan(r1 record.Record, e1 error, r2 record.Record, e2 error) string {
	if (e1 == nil) != (e2 == nil) {
		return fmt.Sprintf("errors differ: %v / %v", e1, e2)
	}
	if e1 != nil {
		var j1, j2 *record.Rejection
		if !errors.As(e1, &j1) || !errors.As(e2, &j2) {
			return fmt.Sprintf("not rejections: %v / %v", e1, e2)
		}
		if j1.Reason != j2.Reason || j1.Line != j2.Line || j1.Offset != j2.Offset {
			return fmt.Sprintf("rejections differ: %+v / %+v", j1, j2)
		}
		return ""
	}
	if fmt.Sprintf("%+v", r1) != fmt.Sprintf("%+v", r2) {
		return fmt.Sprintf("records differ: %+v / %+v", r1, r2)
	}
	return ""
}

// readOutput (a filter on the cluster) finds exactly what ScanTail finds
// in the same window read whole: over crafted files and random ones whose
// window cuts lines anywhere, prefixes included.
func TestReadOutputMatchesScanTail(t *testing.T) {
	d := &Driver{Host: remote.NewLocal()}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a dir $(touch pwned) `id`")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	check := func(name string, data []byte, window int64) {
		t.Helper()
		p := filepath.Join(dir, "out.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := d.parts().collector.readOutput(ctx, p, window)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !out.fi.Exists || !out.fi.Regular() || out.fi.Size != int64(len(data)) || out.fi.Ctime.IsZero() || out.fi.Links != 1 {
			t.Errorf("%s: file info %+v", name, out.fi)
		}
		start := max(int64(len(data))-window, 0)
		r1, e1 := record.ScanTail(record.StageTrain, data[start:], start)
		r2, e2 := record.ScanLines(record.StageTrain, out.lines)
		if diff := sameScan(r1, e1, r2, e2); diff != "" {
			t.Errorf("%s (window %d, %d bytes): %s", name, window, len(data), diff)
		}
	}
	filler := strings.Repeat("log line\n", 50)
	for name, data := range map[string]string{
		"one record":          filler + trainLineText + "\n+ exit 0\n",
		"no newline at end":   filler + trainLineText,
		"two records":         trainLineText + "\n" + filler + trainLineText + "\n",
		"foreign record":      filler + `NEMORL_ENV_RESULT={"reward":1}` + "\n" + trainLineText + "\n",
		"none":                filler,
		"empty":               "",
		"prefix inside":       filler + "echo " + trainLineText + "\n",
		"malformed":           filler + "NEMORL_ENV_TRAIN_RESULT={\"status\":\n",
		"binary and CR":       "\x00\x01\r\n" + filler + trainLineText + "\r\n\x00\n",
		"colons in the lines": "a:b:c\n" + strings.ReplaceAll(trainLineText, "0.31", "0.31") + "\n1:2:3\n",
	} {
		check(name, []byte(data), TailBytes)
		check(name+", small window", []byte(data), 200)
	}
	// The window's first line is partial: a record cut in its middle, and a
	// cut that lands exactly on a prefix, are not lines of the file.
	data := []byte("xx" + trainLineText + "\n" + trainLineText + "\n")
	for _, w := range []int64{int64(len(trainLineText)) + 1, int64(len(trainLineText)) + 2, int64(len(trainLineText)) + 3, int64(len(data)) - 2, int64(len(data)) - 1, int64(len(data))} {
		check(fmt.Sprintf("cut at %d", w), data, w)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"log\n", trainLineText, "\n", "NEMORL_ENV_", "NEMORL_ENV_RESULT={}\n", "x", "\x00", "NEMORL_ENV_TRAIN_RESULT=", ":", "\r"}
	for i := range 150 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		check(fmt.Sprintf("random %d", i), []byte(b.String()), int64(1+rng.IntN(400)))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "pwned")); err == nil {
		t.Error("a path ran a command")
	}
}

// What the policy may plant where an output belongs is reported, never
// read: the read must not block on a FIFO or follow a symlink.
func TestReadOutputPlanted(t *testing.T) {
	d := &Driver{Host: remote.NewLocal()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{fifo: "fifo", link: "symbolic link", sub: "directory"} {
		out, err := d.parts().collector.readOutput(ctx, p, TailBytes)
		if err != nil || out.fi.Type != want || out.fi.Regular() || out.lines != nil {
			t.Errorf("%s: %+v %v, want a %s, not read", p, out, err, want)
		}
	}
	out, err := d.parts().collector.readOutput(ctx, filepath.Join(dir, "absent"), TailBytes)
	if err != nil || out.fi.Exists {
		t.Errorf("absent: %+v %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "absent")); err == nil {
		t.Error("inspecting a missing output created it")
	}
}

func FuzzParseOutputTail(f *testing.F) {
	f.Add([]byte("nemorl-collect absent\n"))
	f.Add([]byte("nemorl-collect lstat fifo|0|1700000000|12|1\n"))
	f.Add([]byte("nemorl-collect lstat regular file|120|1700000000|12|1\nnemorl-collect tail 20\n1:0:NEMORL_ENV_x\n3:40:" + trainLineText + "\n"))
	f.Add([]byte("nemorl-collect lstat regular file|1|1|1|1\nnemorl-collect replaced\n"))
	f.Add([]byte("nemorl-collect lstat regular file|120|1700000000|12|1\nnemorl-collect tail 0\n2:30:nemorl: isolation: mount point /run/munge is not allowed\n3:90:" + trainLineText + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := parseOutputTail(b)
		if err != nil {
			return
		}
		if len(out.findings) > maxFindings {
			t.Fatalf("%d findings, more than %d", len(out.findings), maxFindings)
		}
		for _, l := range out.lines {
			if strings.HasPrefix(string(l.Body), guardPrefix) {
				t.Fatalf("a finding among the record lines: %q", l.Body)
			}
		}
		for _, l := range out.lines {
			if l.No < 1 || l.Offset < out.start {
				t.Fatalf("line %+v before the window at %d", l, out.start)
			}
		}
		if len(out.lines) > 0 && !out.fi.Exists {
			t.Fatal("lines of a file that does not exist")
		}
	})
}

// cannedRun answers every command with out.
type cannedRun struct {
	remote.Host
	out string
}

func (c cannedRun) Run(context.Context, remote.Command) (*remote.Result, error) {
	return &remote.Result{Stdout: []byte(c.out)}, nil
}

// An output replaced while it is read (after its job ended, which the
// honest job never does) is planted: the policy's 0 for train, not a retry
// that a process swapping it could keep going until a deadline masks it.
func TestScanReplacedIsPlanted(t *testing.T) {
	d := &Driver{Host: cannedRun{Host: remote.NewLocal(), out: "nemorl-collect lstat regular file|10|1700000000|7|1\nnemorl-collect replaced\n"}}
	e := &ledger.Entry{Episode: "ep-r", Dir: t.TempDir(), Isolation: "apptainer"}
	o, err := d.parts().collector.scan(context.Background(), e, stages.Train)
	if err != nil || !o.Replaced || o.Record != nil || o.RecordErr != nil {
		t.Fatalf("scan of a replaced output: %+v, %v", o, err)
	}
}

// An isolation_breach outcome names the guard's findings (each a path and
// the setting that can produce it), read from the stage's own output with
// the records' care; the records themselves are read as before.
func TestGuardFindingsInDetail(t *testing.T) {
	d := &Driver{Host: remote.NewLocal()}
	ctx := context.Background()
	e := &ledger.Entry{Episode: "ep-1", Dir: t.TempDir()}
	p := filepath.Join(e.Dir, "train", "out.log")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	log := "nemorl: stage train starting\n" +
		`nemorl: isolation: mount point /run/munge is not allowed in the train container: not a path Apptainer, --nv or the train stage's binds mount; cause: a site bind` + "\n" +
		"nemorl: isolation: unix socket /tmp/x.sock (a way to a daemon: munge's reaches Slurm)\n" +
		"nemorl: isolation: the guard refused the train container (findings above); the payload was not started\n" +
		trainLineText + "\n"
	if err := os.WriteFile(p, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := d.parts().collector.scan(ctx, e, stages.Train)
	f := o.Findings
	if err != nil || len(f) != 3 || !strings.HasPrefix(f[0], "mount point /run/munge ") || !strings.Contains(f[0], "cause: a site bind") || !strings.HasPrefix(f[1], "unix socket /tmp/x.sock") {
		t.Fatalf("findings %q, %v", f, err)
	}
	if o.RecordErr != nil || o.Record == nil {
		t.Fatalf("record beside findings: %v", o.RecordErr)
	}
	// The records of the same file are what they were: findings never
	// reach the record parser.
	out, err := d.parts().collector.readOutput(ctx, p, TailBytes, true)
	if err != nil || len(out.lines) != 1 || !strings.HasPrefix(string(out.lines[0].Body), "NEMORL_ENV_TRAIN_RESULT=") {
		t.Errorf("records with findings: %v %+v", err, out)
	}
}
