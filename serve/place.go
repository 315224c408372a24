package serve

import (
	"fmt"
	"slices"
	"time"
)

// clusterFacts are what placement knows of one cluster when a batch of rows
// is placed (gathered by clusters.go; place decides from them alone).
type clusterFacts struct {
	Name string
	// Up is false while the cluster does not answer (its last room probe or
	// submission failed to reach it): it gets no new rows.
	Up bool
	// InFlight are this serve's episodes on it; MaxInFlight its bound
	// (clusters[].max_in_flight, 0: none).
	InFlight, MaxInFlight int
	// Known says the room below was read (sinfo, squeue); unknown room is
	// taken as none free and nothing pending.
	Known bool
	// GPUs of the cluster's GRES type on its nodes that take jobs, the
	// FreeGPUs of them that no job holds, and the Pending jobs in its
	// partition that wait for resources.
	GPUs, FreeGPUs, Pending int
	// Run is the recent run time of this serve's GPU jobs there (0: none
	// seen yet: the shortest one seen on another cluster stands in,
	// defaultRun when none has one). Wait is their recent queue wait (0:
	// none seen).
	Run, Wait time.Duration
	// GPUType is the type of the cluster's gres (configs.GPUType: "h100";
	// "" for an untyped gres, a type of its own). Clusters of several
	// types are behind one serve only with serve.mix_gpu_types.
	GPUType string
}

// placeRow is what placement knows of one row.
type placeRow struct {
	// Task groups the rows that must share a GPU type: those of one
	// _ng_task_index (the rows of one prompt, which GRPO compares with
	// each other); "" for a row without one.
	Task string
	// Tried marks, by the facts' index, the clusters a submission of the
	// row could not reach (nil: none): it is not placed there again.
	Tried []bool
}

// defaultRun stands in for a GPU job's run time until one is seen on any
// cluster.
const defaultRun = time.Minute

// runs are the facts' run times, a cluster not yet measured given the
// shortest one measured elsewhere: a cluster new to this serve is tried as
// if it were as fast as the best known, never ranked behind every
// measured one by a made-up figure.
func runs(facts []clusterFacts) []time.Duration {
	best := time.Duration(0)
	for _, f := range facts {
		if f.Run > 0 && (best == 0 || f.Run < best) {
			best = f.Run
		}
	}
	if best == 0 {
		best = defaultRun
	}
	r := make([]time.Duration, len(facts))
	for i, f := range facts {
		r[i] = f.Run
		if r[i] <= 0 {
			r[i] = best
		}
	}
	return r
}

// placement is where place put each row (an index into the facts, -1 for a
// row no cluster can take now) and, per cluster, why in one line.
type placement struct {
	Cluster []int
	Why     []string
}

// place puts the rows on the clusters that are up and under their bound.
// Each row goes where it is expected to start soonest. A cluster with a
// free GPU not yet claimed (free GPUs, less the jobs pending there and the
// rows this batch already put there) starts it now, the most room first.
// Else the row waits for the jobs ahead of it to start: at the cluster's
// rate, its GPUs over its GPU jobs' run time, and never less than the
// queue wait its jobs saw lately (other users' jobs, fair share and
// limits show there). The shortest expected wait wins; ties go to the
// cluster with more room, then fewer of this serve's episodes, then the
// config's order.
//
// The rows of one task share a GPU type (with serve.mix_gpu_types the
// clusters may have several): held maps a task to the type its rows
// already placed run on, and the first row of a task not held takes the
// type of the cluster it goes to for the rows after it. A row whose
// task's type has no cluster that can take it now is not placed (it
// waits), whatever room the others have. A pure function of the facts
// (table-tested).
func place(facts []clusterFacts, rows []placeRow, held map[string]string) placement {
	p := placement{Cluster: make([]int, len(rows)), Why: make([]string, len(facts))}
	added := make([]int, len(facts))
	run := runs(facts)
	types := map[string]string{}
	for task, t := range held {
		types[task] = t
	}
	for r, row := range rows {
		want, pinned := types[row.Task]
		pinned = pinned && row.Task != ""
		best, bestWait, bestRoom := -1, time.Duration(0), 0
		for i, f := range facts {
			if !f.Up || (f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight) ||
				(pinned && f.GPUType != want) || (i < len(row.Tried) && row.Tried[i]) {
				continue
			}
			room, gpus := f.FreeGPUs-f.Pending-added[i], f.GPUs
			if !f.Known {
				room, gpus = -added[i], 1
			}
			wait := time.Duration(0)
			if room <= 0 {
				wait = max(time.Duration(1-room)*run[i]/time.Duration(max(1, gpus)), f.Wait)
			}
			better := best < 0 || wait < bestWait || (wait == bestWait && room > bestRoom) ||
				(wait == bestWait && room == bestRoom && f.InFlight+added[i] < facts[best].InFlight+added[best])
			if better {
				best, bestWait, bestRoom = i, wait, room
			}
		}
		p.Cluster[r] = best
		if best >= 0 {
			added[best]++
			if row.Task != "" && !pinned {
				types[row.Task] = facts[best].GPUType
			}
		}
	}
	mixed := slices.ContainsFunc(facts, func(f clusterFacts) bool { return f.GPUType != facts[0].GPUType })
	for i, f := range facts {
		name := f.Name
		if mixed {
			name += " (" + typeName(f.GPUType) + ")"
		}
		switch {
		case !f.Up:
			p.Why[i] = fmt.Sprintf("%s: %d rows: not answering", name, added[i])
		case f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight && added[i] < len(rows):
			p.Why[i] = fmt.Sprintf("%s: %d rows: at max_in_flight %d", name, added[i], f.MaxInFlight)
		case !f.Known:
			p.Why[i] = fmt.Sprintf("%s: %d rows: room unknown, %d in flight", name, added[i], f.InFlight)
		default:
			seen := ""
			if f.Run <= 0 {
				seen = " (none seen yet)"
			}
			p.Why[i] = fmt.Sprintf("%s: %d rows: %d of %d GPUs free, %d jobs pending, GPU jobs run %s%s and waited %s, %d in flight",
				name, added[i], f.FreeGPUs, f.GPUs, f.Pending, run[i].Round(time.Second), seen, f.Wait.Round(time.Second), f.InFlight)
		}
	}
	return p
}

// typeName is a GPU type for people: the type, or "untyped GPU" for a
// gres without one.
func typeName(t string) string {
	if t == "" {
		return "untyped GPU"
	}
	return t
}
