package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "new" {
		t.Fatalf("content %q, %v", got, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries in the directory, want 1 (no temp file left)", len(entries))
	}
	// A directory that cannot be written to: an error naming the file,
	// and the old content kept.
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("y"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestWriteFuncFillError: an error of fill comes back as is, the old
// content stays, and no temp file is left.
func TestWriteFuncFillError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := Write(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFunc(p, 0o600, func(w io.Writer) error {
		io.WriteString(w, "half of the new")
		return boom
	})
	if err != boom {
		t.Fatalf("err %v, want the fill error as is", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Fatalf("content %q after a failed fill", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries, want 1", len(entries))
	}
}
