package serve

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPlace(t *testing.T) {
	// up: a cluster that answers, with gpus of which free are free,
	// pending jobs, its GPU jobs' run time and queue wait.
	up := func(name string, gpus, free, pending int, run, wait time.Duration) clusterFacts {
		return clusterFacts{Name: name, Up: true, Known: true, GPUs: gpus, FreeGPUs: free, Pending: pending, Run: run, Wait: wait}
	}
	for _, c := range []struct {
		name  string
		facts []clusterFacts
		n     int
		want  string // rows per cluster, "-" for unplaced
	}{
		{"free GPUs first, the most room first", []clusterFacts{up("a", 2, 2, 0, 0, 0), up("b", 1, 1, 0, 0, 0)}, 3, "a:2 b:1"},
		{"then by capacity: four GPUs drain a line four times as fast", []clusterFacts{up("a", 4, 0, 0, time.Minute, 0), up("b", 1, 0, 0, time.Minute, 0)}, 10, "a:8 b:2"},
		{"a faster cluster takes more", []clusterFacts{up("a", 1, 0, 0, 30*time.Second, 0), up("b", 1, 0, 0, 90*time.Second, 0)}, 4, "a:3 b:1"},
		{"the recent queue wait is a floor (others' jobs, fair share)", []clusterFacts{up("a", 8, 0, 0, time.Minute, 10*time.Minute), up("b", 1, 0, 0, time.Minute, 0)}, 3, "b:3"},
		{"pending jobs take the free GPUs first", []clusterFacts{up("a", 4, 4, 4, time.Minute, 0), up("b", 1, 1, 0, time.Minute, 0)}, 1, "b:1"},
		{"a cluster not yet measured: as fast as the best measured", []clusterFacts{up("a", 1, 0, 0, 10*time.Second, 0), up("b", 1, 0, 0, 0, 0)}, 4, "a:2 b:2"},
		{"a cluster down gets nothing", []clusterFacts{{Name: "a", Up: false, Known: true, GPUs: 8, FreeGPUs: 8}, up("b", 1, 0, 5, time.Hour, time.Hour)}, 2, "b:2"},
		{"all down: unplaced", []clusterFacts{{Name: "a"}, {Name: "b"}}, 2, "-:2"},
		{"max_in_flight bounds a cluster", []clusterFacts{{Name: "a", Up: true, Known: true, GPUs: 8, FreeGPUs: 8, InFlight: 3, MaxInFlight: 4}, up("b", 0, 0, 0, time.Hour, time.Hour)}, 3, "a:1 b:2"},
		{"every cluster at its bound: unplaced", []clusterFacts{{Name: "a", Up: true, InFlight: 1, MaxInFlight: 1}}, 2, "-:2"},
		{"room unknown counts as none free", []clusterFacts{{Name: "a", Up: true}, up("b", 1, 1, 0, time.Minute, 0)}, 2, "a:1 b:1"},
		{"ties: fewer in flight, then the config's order", []clusterFacts{{Name: "a", Up: true, Known: true, InFlight: 5}, {Name: "b", Up: true, Known: true, InFlight: 1}, {Name: "c", Up: true, Known: true, InFlight: 1}}, 1, "b:1"},
		{"one cluster: every row", []clusterFacts{up("only", 1, 0, 100, time.Hour, time.Hour)}, 5, "only:5"},
		{"no rows", []clusterFacts{up("a", 1, 1, 0, 0, 0)}, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := place(c.facts, make([]placeRow, c.n), nil)
			count := map[string]int{}
			var order []string
			for _, i := range p.Cluster {
				name := "-"
				if i >= 0 {
					name = c.facts[i].Name
				}
				if count[name] == 0 {
					order = append(order, name)
				}
				count[name]++
			}
			var got []string
			for _, f := range append(c.facts, clusterFacts{Name: "-"}) {
				if count[f.Name] > 0 {
					got = append(got, fmt.Sprintf("%s:%d", f.Name, count[f.Name]))
				}
			}
			if g := strings.Join(got, " "); g != c.want {
				t.Fatalf("placed %s, want %s (why: %q)", g, c.want, p.Why)
			}
			if len(p.Why) != len(c.facts) {
				t.Fatalf("why %q", p.Why)
			}
			for i, w := range p.Why {
				if !strings.HasPrefix(w, c.facts[i].Name+": ") {
					t.Errorf("why %q does not name %s", w, c.facts[i].Name)
				}
			}
		})
	}
}

// TestPlaceEarlierRowsFirst: rows are placed in arrival order, each where
// it starts soonest given the rows before it, so placing n rows at once is
// placing them one at a time.
func TestPlaceEarlierRowsFirst(t *testing.T) {
	facts := []clusterFacts{{Name: "a", Up: true, Known: true, GPUs: 3, FreeGPUs: 3, Run: 40 * time.Second, Wait: 5 * time.Second}, {Name: "b", Up: true, Known: true, GPUs: 2, FreeGPUs: 1, Pending: 2, Run: 15 * time.Second}}
	all := place(facts, make([]placeRow, 12), nil).Cluster
	fs := append([]clusterFacts(nil), facts...)
	for r := range 12 {
		one := place(fs, make([]placeRow, 1), nil).Cluster[0]
		if one != all[r] {
			t.Fatalf("row %d: alone to %d, in the batch to %d", r, one, all[r])
		}
		fs[one].Pending++ // the row waits there like any other job
	}
}

// TestPlaceGPUTypes: with clusters of several GPU types (serve.mix_gpu_types)
// the rows of one task index go to clusters of one type: the type its
// rows already placed hold, else the type of the cluster its first row
// goes to; a row whose type has no cluster that can take it waits. Rows
// without a task index go anywhere.
func TestPlaceGPUTypes(t *testing.T) {
	typed := func(name, gpuType string, free int) clusterFacts {
		return clusterFacts{Name: name, Up: true, Known: true, GPUs: 4, FreeGPUs: free, Run: time.Minute, GPUType: gpuType}
	}
	tasks := func(ts ...string) []placeRow {
		rows := make([]placeRow, len(ts))
		for i, task := range ts {
			rows[i].Task = task
		}
		return rows
	}
	for _, c := range []struct {
		name  string
		facts []clusterFacts
		rows  []placeRow
		held  map[string]string
		want  string // each row's cluster, "-" for none
	}{
		{"without a task index the rows spread by room", []clusterFacts{typed("h", "h100", 2), typed("a", "a100", 2)}, tasks("", "", "", ""), nil, "h a h a"},
		{"a task's rows follow its first, whatever the room elsewhere", []clusterFacts{typed("h", "h100", 2), typed("a", "a100", 2)}, tasks("7", "7", "7", "7"), nil, "h h h h"},
		{"two tasks, each on one type", []clusterFacts{typed("h", "h100", 2), typed("a", "a100", 2)}, tasks("1", "2", "1", "2", "1", "2"), nil, "h a h a h a"},
		{"a held type: the free GPUs of another type are not taken", []clusterFacts{typed("h", "h100", 0), typed("a", "a100", 4)}, tasks("3", "3"), map[string]string{"3": "h100"}, "h h"},
		{"another cluster of the held type is", []clusterFacts{typed("h1", "h100", 0), typed("a", "a100", 4), typed("h2", "h100", 2)}, tasks("3", "3", "3"), map[string]string{"3": "h100"}, "h2 h2 h1"},
		{"the held type down: the rows wait", []clusterFacts{{Name: "h", GPUType: "h100"}, typed("a", "a100", 4)}, tasks("3", "", "3"), map[string]string{"3": "h100"}, "- a -"},
		{"an untyped gres is a type of its own", []clusterFacts{typed("h", "h100", 4), typed("u", "", 1)}, tasks("5", "5"), map[string]string{"5": ""}, "u u"},
		{"a tried cluster is skipped for one of the same type", []clusterFacts{typed("h1", "h100", 4), typed("a", "a100", 4), typed("h2", "h100", 0)},
			[]placeRow{{Task: "9", Tried: []bool{true, false, false}}}, map[string]string{"9": "h100"}, "h2"},
		{"held for other tasks only", []clusterFacts{typed("h", "h100", 1), typed("a", "a100", 4)}, tasks("4"), map[string]string{"3": "h100"}, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := place(c.facts, c.rows, c.held)
			got := make([]string, len(p.Cluster))
			for i, ci := range p.Cluster {
				got[i] = "-"
				if ci >= 0 {
					got[i] = c.facts[ci].Name
				}
			}
			if g := strings.Join(got, " "); g != c.want {
				t.Fatalf("placed %s, want %s (why: %q)", g, c.want, p.Why)
			}
			for i, f := range c.facts {
				if !strings.HasPrefix(p.Why[i], f.Name+" ("+typeName(f.GPUType)+"): ") {
					t.Errorf("why %q does not name %s and its GPU type", p.Why[i], f.Name)
				}
			}
		})
	}
	// held is the caller's: place does not write into it.
	held := map[string]string{"1": "h100"}
	place([]clusterFacts{typed("h", "h100", 1), typed("a", "a100", 1)}, tasks("1", "2"), held)
	if len(held) != 1 || held["1"] != "h100" {
		t.Errorf("place wrote into held: %v", held)
	}
}

// TestTaskOfKey: a row's task index, for placement, read from the row and,
// for an episode re-attached after a restart, from its identity key.
func TestTaskOfKey(t *testing.T) {
	rw, rerr := parseRow([]byte(gymRow(12, 3, "")))
	if rerr != nil {
		t.Fatal(rerr)
	}
	key, rerr := idempotencyKey("", rw)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if taskOf(rw) != "12" || taskOfKey(key) != "12" {
		t.Errorf("task of the row %q, of its key %q (%s): want 12", taskOf(rw), taskOfKey(key), key)
	}
	hk, _ := idempotencyKey("my-key", rw)
	for _, k := range []string{hk, "", "g:", "g:x:1:abc", "h:g:1:2"} {
		if got := taskOfKey(k); got != "" {
			t.Errorf("taskOfKey(%q) = %q, want none", k, got)
		}
	}
	plain, _ := parseRow([]byte(`{"responses_create_params": {"input": "solve"}}`))
	if taskOf(plain) != "" {
		t.Errorf("a row without _ng_task_index: task %q", taskOf(plain))
	}
}
