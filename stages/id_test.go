package stages

import (
	"regexp"
	"sort"
	"testing"
	"time"
)

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^ep-\d{8}T\d{6}Z-[0-9a-f]{8}$`)
	base := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	var ids []string
	for i := 0; i < 1000; i++ {
		id := NewID(base.Add(time.Duration(i) * time.Second))
		if !re.MatchString(id) {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Errorf("ids do not sort by time")
	}
}
