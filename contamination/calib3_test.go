package contamination

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestOpaqueCalibration measures the opaque bytes of every file under
// NEMORL_CONTAM_CALIB (each as an added-file patch, binary files as GIT
// binary patches): the largest are logged, for the choice of
// DefaultMaxOpaque (doc.go).
func TestOpaqueCalibration(t *testing.T) {
	dir := os.Getenv("NEMORL_CONTAM_CALIB")
	if dir == "" {
		t.Skip("NEMORL_CONTAM_CALIB not set")
	}
	ps := standInProblems()
	type row struct {
		name string
		n    int64
		bin  bool
	}
	var rows []row
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) > 4<<20 {
			return nil
		}
		name := strings.TrimPrefix(p, "/")
		var patch []byte
		bin := !isText(data[:min(len(data), 8000)]) || strings.IndexByte(string(data[:min(len(data), 8000)]), 0) >= 0
		if bin {
			patch = binarySectionPatch(name, data)
		} else {
			patch = filePatch(name, data)
		}
		_, sc := check(patch, ps, defaults, Options{MaxOpaque: 1 << 40})
		rows = append(rows, row{p, sc.Opaque, bin})
		return nil
	})
	sort.Slice(rows, func(i, j int) bool { return rows[i].n > rows[j].n })
	var maxText int64
	for _, r := range rows {
		if !r.bin && r.n > maxText {
			maxText = r.n
		}
	}
	for i, r := range rows {
		if (i < 40 || !r.bin && i < 400) && r.n > 0 {
			t.Logf("%8d %v %s", r.n, r.bin, r.name)
		}
	}
	t.Logf("%d files; largest opaque total of a text file %d", len(rows), maxText)
}
