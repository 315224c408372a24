package episode

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nemorl/nemorl-slurm/ledger"
	"github.com/nemorl/nemorl-slurm/rules"
)

// TestWalkOfOneEpisodeLab follows one stand-in episode from submit to its
// score and counts what the engine did to its entry: every save (with the
// fields it changed) and every rules.Decide call. Each save must record a
// change: a save that wrote the entry as it was is work for nothing, and
// a sign that two parts of the engine own the entry.
func TestWalkOfOneEpisodeLab(t *testing.T) {
	d, _ := labDriver(t, nil)
	var mu sync.Mutex
	var changed [][]string // by save: the entry's fields that differ from the save before
	var last map[string]any
	d.Ledger.OnSave = func(e *ledger.Entry) {
		b, err := json.Marshal(e)
		if err != nil {
			t.Error(err)
			return
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		delete(m, "seal")
		mu.Lock()
		defer mu.Unlock()
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !reflect.DeepEqual(m[k], last[k]) {
				diff = append(diff, k)
			}
		}
		for k := range last {
			if _, ok := m[k]; !ok {
				diff = append(diff, k+"(gone)")
			}
		}
		changed, last = append(changed, diff), m
	}
	decides := 0
	d.onDecide = func(string) { mu.Lock(); decides++; mu.Unlock() }
	e := submitOneWatched(t, d)
	if o := e.Outcome; o == nil || o.Outcome != rules.Scored {
		t.Fatalf("outcome %+v, want scored", o)
	}
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for i, c := range changed {
		if len(c) == 0 {
			t.Errorf("save %d of %d wrote the entry unchanged", i+1, len(changed))
		}
		lines = append(lines, strings.Join(c, ","))
	}
	t.Logf("one episode, submit to scored: %d saves, %d rules.Decide calls; each save changed: %s", len(changed), decides, strings.Join(lines, " | "))
}

// submitOneWatched submits one episode through d and watches it to its
// end (4 minutes at most); it is cancelled when the test ends first.
func submitOneWatched(t *testing.T, d *Driver) *ledger.Entry {
	t.Helper()
	ctx := context.Background()
	e, lock, err := d.SubmitOne(ctx, "", []byte("stand-in prompt"))
	if err != nil {
		t.Fatal(err)
	}
	lock.Unlock()
	t.Cleanup(func() {
		if e, err := d.Ledger.Load(e.Episode); err == nil && !e.Final() {
			cancelAsOwner(d, e)
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	got, err := d.Watch(wctx, []string{e.Episode}, WatchOptions{Act: true, PollMin: 300 * time.Millisecond, PollMax: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return got[e.Episode]
}
