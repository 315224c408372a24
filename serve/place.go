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
	// FreeGPUs of the cluster's GRES type, Pending jobs in its partition.
	FreeGPUs, Pending int
	// Wait is the recent queue wait of this serve's GPU jobs there (0:
	// none seen yet: the shortest wait seen on another cluster stands in,
	// defaultWait when none has one).
	Wait time.Duration
}

// defaultWait stands in for a cluster's queue wait until one is seen on
// any cluster.
const defaultWait = time.Minute

// waits are the facts' queue waits, a cluster not yet measured given the
// shortest one measured elsewhere: a cluster new to this serve is tried as
// if it were as good as the best known, never ranked behind every
// measured one by a made-up figure.
func waits(facts []clusterFacts) []time.Duration {
	best := time.Duration(0)
	for _, f := range facts {
		if f.Wait > 0 && (best == 0 || f.Wait < best) {
			best = f.Wait
		}
	}
	if best == 0 {
		best = defaultWait
	}
	w := make([]time.Duration, len(facts))
	for i, f := range facts {
		w[i] = f.Wait
		if w[i] <= 0 {
			w[i] = best
		}
	}
	return w
}

// placement is where place put each row (an index into the facts, -1 for a
// row no cluster can take now) and, per cluster, why in one line.
type placement struct {
	Cluster []int
	Why     []string
}

// place puts n rows on the clusters that are up and under their bound.
// Each row goes where it is expected to start soonest: a cluster with a
// free GPU not yet claimed (free GPUs, less the jobs pending there and the
// rows this batch already put there) starts it now, the most room first;
// else the row waits behind the cluster's deficit, each place in line
// costing the cluster's recent queue wait, and the shortest expected wait
// wins. Ties go to the cluster with fewer of this serve's episodes, then
// to the config's order. A pure function of the facts (table-tested).
func place(facts []clusterFacts, n int) placement {
	p := placement{Cluster: make([]int, n), Why: make([]string, len(facts))}
	added := make([]int, len(facts))
	qwait := waits(facts)
	for r := range n {
		best, bestWait, bestRoom := -1, time.Duration(0), 0
		for i, f := range facts {
			if !f.Up || (f.MaxInFlight > 0 && f.InFlight+added[i] >= f.MaxInFlight) {
				continue
			}
			room := f.FreeGPUs - f.Pending - added[i]
			if !f.Known {
				room = -added[i]
			}
			wait := time.Duration(0)
			if room <= 0 {
				wait = time.Duration(1-room) * qwait[i]
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
			if f.Wait <= 0 {
				seen = " (none seen yet)"
			}
			p.Why[i] = fmt.Sprintf("%s: %d rows: %d GPUs free, %d jobs pending, queue wait %s%s, %d in flight", f.Name, added[i], f.FreeGPUs, f.Pending, qwait[i].Round(time.Second), seen, f.InFlight)
		}
	}
	return p
}
