package serve

import (
	"fmt"
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

// place puts n rows on the clusters that are up and under their bound.
// Each row goes where it is expected to start soonest. A cluster with a
// free GPU not yet claimed (free GPUs, less the jobs pending there and the
// rows this batch already put there) starts it now, the most room first.
// Else the row waits for the jobs ahead of it to start: at the cluster's
// rate, its GPUs over its GPU jobs' run time, and never less than the
// queue wait its jobs saw lately (other users' jobs, fair share and
// limits show there). The shortest expected wait wins; ties go to the
// cluster with more room, then fewer of this serve's episodes, then the
// config's order. A pure function of the facts (table-tested).
func place(facts []clusterFacts, n int) placement {
	p := placement{Cluster: make([]int, n), Why: make([]string, len(facts))}
	added := make([]int, len(facts))
	run := runs(facts)
	for r := range n {
		best, bestWait, bestRoom := -1, time.Duration(0), 0
		for i, f := range facts {
			if !f.Up || (f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight) {
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
		}
	}
	for i, f := range facts {
		switch {
		case !f.Up:
			p.Why[i] = fmt.Sprintf("%s: %d rows: not answering", f.Name, added[i])
		case f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight && added[i] < n:
			p.Why[i] = fmt.Sprintf("%s: %d rows: at max_in_flight %d", f.Name, added[i], f.MaxInFlight)
		case !f.Known:
			p.Why[i] = fmt.Sprintf("%s: %d rows: room unknown, %d in flight", f.Name, added[i], f.InFlight)
		default:
			seen := ""
			if f.Run <= 0 {
				seen = " (none seen yet)"
			}
			p.Why[i] = fmt.Sprintf("%s: %d rows: %d of %d GPUs free, %d jobs pending, GPU jobs run %s%s and waited %s, %d in flight",
				f.Name, added[i], f.FreeGPUs, f.GPUs, f.Pending, run[i].Round(time.Second), seen, f.Wait.Round(time.Second), f.InFlight)
		}
	}
	return p
}
